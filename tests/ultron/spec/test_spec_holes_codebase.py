"""The holes a new user found in validation: the code base, read but not imported.

The model is found in every layout (flat, ``src``, declared, archives with and without a top
folder); static model problems are one SpecError naming ``model``; archives without a project
are named; a user's strategy and its options are checked, in the spec and where the flow builds
it. Code bases are real folders and ``.tar.gz`` archives in ``tmp_path``.
"""

from __future__ import annotations

import json
import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest

from ultron.errors import ConfigIssue, SpecError
from ultron.master.strategy import build_strategy
from ultron.spec.codebase import check_code_base
from ultron.spec.job import JobSpec
from ultron.spec.loader import load_spec
from ultron.usercode import import_paths, user_code

REPO = Path(__file__).parents[3]
DATA = Path(__file__).parents[2] / "data"

Project = Callable[[Path, dict[str, str]], Path]
OnlyIssue = Callable[..., ConfigIssue]

# --- the code base, read but not imported ---------------------------------------------------


def _job(tmp_path: Path, code: Path, **fields: object) -> dict[str, object]:
    return {
        "code": str(code),
        "model": "pkg.train:Model",
        "search_space": {"x": [1, 2]},
        **fields,
    }


def _archive(folder: Path, path: Path, *, top: str | None) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for item in sorted(folder.rglob("*")):
            name = item.relative_to(folder).as_posix()
            tar.add(item, arcname=f"{top}/{name}" if top else name, recursive=False)
    return path


@pytest.mark.parametrize(
    "layout",
    ["flat", "src", "declared", "archive", "archive-top"],
)
def test_the_model_is_found_in_every_layout(
    tmp_path: Path, layout: str, project: Project, only_issue: OnlyIssue, model_source: str
) -> None:
    files = {"pkg/__init__.py": "", "pkg/train.py": model_source}
    if layout == "src":
        files = {f"src/{k}": v for k, v in files.items()}
    if layout == "declared":
        files = {f"lib/{k}": v for k, v in files.items()}
        files["pyproject.toml"] = "[tool.setuptools.packages.find]\nwhere = ['lib']\n"
    code = project(tmp_path / "proj", files)
    if layout.startswith("archive"):
        top = "proj" if layout == "archive-top" else None
        code = _archive(code, tmp_path / "code.tar.gz", top=top)
    spec = load_spec(_job(tmp_path, code), check_code=True)
    assert check_code_base(spec) == []
    misspelled = _job(tmp_path, code, model="pkg.train:Modle")
    issue = only_issue(misspelled, check_code=True)
    assert issue.field == "model"
    assert "did you mean pkg.train:Model?" in issue.fix


def test_without_check_code_the_code_base_is_not_read(tmp_path: Path, project: Project) -> None:
    code = project(tmp_path / "proj", {})
    assert load_spec(_job(tmp_path, code, model="nowhere.at:All")).model == "nowhere.at:All"


@pytest.mark.parametrize(
    ("source", "model", "words"),
    [
        (
            "class Model:\n    def score(self, hyperparameters, checkpoint_path, resume):\n"
            "        return 0.0\n",
            "pkg.trian:Model",
            "did you mean pkg.train?",
        ),
        ("class Model:\n    pass\n", "pkg.train:Model", "has none"),
        (
            "class Model:\n    def score(self, hyperparameters):\n        return 0\n",
            "pkg.train:Model",
            "takes 1 argument(s) besides self",
        ),
        (
            "class Model:\n    def __init__(self, width):\n        pass\n"
            "    def score(self, hyperparameters, checkpoint_path, resume):\n"
            "        return 0.0\n",
            "pkg.train:Model",
            "needs width",
        ),
        ("class Model(:\n", "pkg.train:Model", "valid Python"),
    ],
)
def test_static_model_problems(
    tmp_path: Path, source: str, model: str, words: str, project: Project, only_issue: OnlyIssue
) -> None:
    code = project(tmp_path / "proj", {"pkg/__init__.py": "", "pkg/train.py": source})
    issue = only_issue(_job(tmp_path, code, model=model), check_code=True)
    assert issue.field == "model"
    assert words in issue.rule + issue.fix


@pytest.mark.parametrize(
    "source",
    [
        "from pkg.models import *\n",  # a re-export we cannot see
        "from pkg.models import Net as Model\n",
        "try:\n    import torch\nexcept ImportError:\n    Model = None\n",
        "Model = make_model()\n",
        "def __getattr__(name):\n    return object\n",
        "class Model(Base):\n    pass\n",  # score may be inherited
    ],
)
def test_what_cannot_be_seen_statically_is_not_claimed_missing(
    tmp_path: Path, source: str, project: Project
) -> None:
    code = project(tmp_path / "proj", {"pkg/__init__.py": "", "pkg/train.py": source})
    assert load_spec(_job(tmp_path, code), check_code=True).model == "pkg.train:Model"


def test_a_module_installed_beside_ultron_is_left_to_the_trial_check(
    tmp_path: Path, project: Project
) -> None:
    code = project(tmp_path / "proj", {})
    spec = load_spec(_job(tmp_path, code, model="json.decoder:NoSuchClass"), check_code=True)
    assert spec.model == "json.decoder:NoSuchClass"


STRATEGY = """\
class Search:
    def __init__(self, search_space, *, start=0):
        self.start = start

    def sample_hyperparameter_candidates(self, n):
        return []

    def update_state(self, hyperparameter_candidates, validation_scores):
        pass
"""


def test_a_users_strategy_and_its_options_are_checked(
    tmp_path: Path, project: Project, only_issue: OnlyIssue, model_source: str
) -> None:
    files = {"pkg/__init__.py": "", "pkg/train.py": model_source, "pkg/search.py": STRATEGY}
    code = project(tmp_path / "proj", files)
    good = _job(tmp_path, code, strategy="pkg.search:Search", strategy_options={"start": 2})
    assert load_spec(good, check_code=True).strategy == "pkg.search:Search"
    issue = only_issue({**good, "strategy": "pkg.search.Serch"}, check_code=True)
    assert issue.field == "strategy" and "did you mean pkg.search:Search?" in issue.fix
    issue = only_issue({**good, "strategy_options": {"strat": 2}}, check_code=True)
    assert issue.field == "strategy_options"
    assert "strat" in issue.rule and "(start)" in issue.fix


def test_paper_fig2_archive_passes_and_errors_use_the_papers_names(
    tmp_path: Path, only_issue: OnlyIssue
) -> None:
    archive = tmp_path / "sample_model.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(REPO / "examples" / "paper_fig2" / "modelpkg", arcname="modelpkg")
    raw = json.loads((DATA / "fig2.json").read_text())
    raw["file_name"] = str(archive)
    assert load_spec(raw, check_code=True).model == "modelpkg.train:Model"
    issue = only_issue({**raw, "model_classname": "Modell"}, check_code=True)
    assert issue.field == "model_classname/module_name/package_name"


def test_an_archive_without_a_project_is_named(tmp_path: Path, only_issue: OnlyIssue) -> None:
    folder = tmp_path / "loose"
    folder.mkdir()
    (folder / "a.py").write_text("")
    (folder / "b.py").write_text("")
    archive = _archive(folder, tmp_path / "code.tar.gz", top=None)
    issue = only_issue(_job(tmp_path, archive), check_code=True)
    assert issue.field == "code" and "pyproject.toml" in issue.rule


# --- a user's strategy refuses options it does not take, where the flow builds it ------------


def test_build_strategy_refuses_an_option_the_users_class_does_not_take() -> None:
    toy = DATA / "toy"
    base = {"code": str(toy), "model": "toy_model:Quadratic", "search_space": {"x": [1, 2]}}

    def spec(**options: object) -> JobSpec:
        fields = {**base, "strategy": "toy_model:CountingSearch", "strategy_options": options}
        return JobSpec.model_validate(fields, context={"check_paths": False})

    with user_code(import_paths(toy)):
        assert build_strategy(spec(start=5)).sample_hyperparameter_candidates(1) == [{"x": 5}]
        with pytest.raises(SpecError) as info:
            build_strategy(spec(strat=5))
    (issue,) = info.value.issues
    assert issue.field == "strategy_options"
    assert "'strat'" in issue.rule and "start, fail_at" in issue.rule
