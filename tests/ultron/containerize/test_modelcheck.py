"""The model check after containerize: a real subprocess of ``sys.executable`` per case."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from ultron.containerize.modelcheck import check_model
from ultron.errors import SpecError
from ultron.usercode import import_paths

GOOD = """\
print("a model that prints while it is imported")


class Model:
    def score(self, hyperparameters, checkpoint_path, resume):
        return 0.0


class Static:
    @staticmethod
    def score(hyperparameters, checkpoint_path, resume):
        return 0.0


class Flexible:
    def score(self, *args, **kwargs):
        return 0.0


def factory():
    return Model()
"""

BAD = {
    "NoScore": ("class NoScore:\n    pass\n", "has none"),
    "TwoArgs": (
        "class TwoArgs:\n    def score(self, hyperparameters, checkpoint_path):\n"
        "        return 0.0\n",
        "too many positional arguments",
    ),
    "KeywordOnly": (
        "class KeywordOnly:\n    def score(self, *, hyperparameters, checkpoint_path, resume):\n"
        "        return 0.0\n",
        "too many positional arguments",
    ),
    "Async": (
        "class Async:\n    async def score(self, hyperparameters, checkpoint_path, resume):\n"
        "        return 0.0\n",
        "not async",
    ),
    "NeedsWidth": (
        "class NeedsWidth:\n    def __init__(self, width):\n        self.width = width\n"
        "    def score(self, hyperparameters, checkpoint_path, resume):\n        return 0.0\n",
        "missing a required argument: 'width'",
    ),
    "Raises": (
        "class Raises:\n    def __init__(self):\n        raise RuntimeError('no GPU here')\n"
        "    def score(self, hyperparameters, checkpoint_path, resume):\n        return 0.0\n",
        "RuntimeError: no GPU here",
    ),
    "Exits": (
        "class Exits:\n    def __init__(self):\n        raise SystemExit(3)\n"
        "    def score(self, hyperparameters, checkpoint_path, resume):\n        return 0.0\n",
        "SystemExit: 3",
    ),
}


@pytest.fixture(scope="module")
def code(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("code")
    (root / "pyproject.toml").write_text("[project]\nname = 'checked'\nversion = '0'\n")
    package = root / "src" / "checked"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "good.py").write_text(GOOD)
    (package / "bad.py").write_text("".join(source for source, _ in BAD.values()))
    (package / "broken.py").write_text("import no_such_dependency_anywhere\n")
    return root


def _issues(code: Path, model: str) -> list[str]:
    with pytest.raises(SpecError) as info:
        check_model(sys.executable, import_paths(code), model)
    assert {issue.field for issue in info.value.issues} == {"model"}
    assert all(issue.value == model and issue.fix for issue in info.value.issues)
    return [issue.rule for issue in info.value.issues]


@pytest.mark.parametrize("name", ["Model", "Static", "Flexible", "factory"])
def test_a_good_model_passes(code: Path, name: str) -> None:
    check_model(sys.executable, import_paths(code), f"checked.good:{name}")


@pytest.mark.parametrize("name", sorted(BAD))
def test_each_bad_model_is_one_error_on_model(code: Path, name: str) -> None:
    rules = _issues(code, f"checked.bad:{name}")
    assert len(rules) == 1
    assert BAD[name][1] in rules[0]


def test_wrong_score_and_constructor_are_reported_together(tmp_path: Path) -> None:
    (tmp_path / "both.py").write_text(
        "class Both:\n    def __init__(self, width):\n        pass\n"
        "    def score(self):\n        return 0.0\n"
    )
    rules = _issues(tmp_path, "both:Both")
    assert len(rules) == 2
    assert "score" in rules[0] and "Both()" in rules[1]


@pytest.mark.parametrize(
    ("model", "words"),
    [
        ("checked.broken:Model", "No module named 'no_such_dependency_anywhere'"),
        ("checked.nowhere:Model", "No module named 'checked.nowhere'"),
        ("checked.good:Modle", "must define Modle"),
    ],
)
def test_an_import_that_fails_is_named(code: Path, model: str, words: str) -> None:
    (rule,) = _issues(code, model)
    assert words in rule


def test_a_constructor_that_hangs_is_stopped(tmp_path: Path) -> None:
    (tmp_path / "slow.py").write_text(
        "import time\n\nclass Slow:\n    def __init__(self):\n        time.sleep(60)\n"
        "    def score(self, hyperparameters, checkpoint_path, resume):\n        return 0.0\n"
    )
    with pytest.raises(SpecError, match="must end within 2 s"):
        check_model(sys.executable, [str(tmp_path)], "slow:Slow", timeout_s=2)


def test_a_process_that_dies_without_an_answer_is_named(tmp_path: Path) -> None:
    (tmp_path / "dies.py").write_text("import os\nos._exit(7)\n")
    (rule,) = _issues(tmp_path, "dies:Model")
    assert "exited with 7" in rule
