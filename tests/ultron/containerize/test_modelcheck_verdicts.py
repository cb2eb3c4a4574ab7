"""The model check's remembered verdicts: a pass in an environment of ULTRON_HOME is kept."""

from __future__ import annotations

import os
import shutil
import sys
import sysconfig
from pathlib import Path

import pytest

from ultron.containerize.modelcheck import check_model
from ultron.errors import SpecError

GOOD = """\
class Model:
    def score(self, hyperparameters, checkpoint_path, resume):
        return 0.0
"""


@pytest.fixture
def env_python(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An interpreter inside ULTRON_HOME, as containerize's environments have one: a virtual
    environment made of links to this one's interpreter and packages (building a real one
    takes many seconds)."""
    monkeypatch.setenv("ULTRON_HOME", str(tmp_path / "home"))
    root = tmp_path / "home" / "envs" / "0123456789abcdef"
    (root / "bin").mkdir(parents=True)
    (root / "bin" / "python").symlink_to(sys.executable)
    shutil.copy(Path(sys.prefix) / "pyvenv.cfg", root / "pyvenv.cfg")
    packages = Path(sysconfig.get_paths()["purelib"])
    (root / packages.relative_to(sys.prefix)).parent.mkdir(parents=True)
    (root / packages.relative_to(sys.prefix)).symlink_to(packages)
    return root / "bin" / "python"


def _code(root: Path, source: str) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "checked_model.py").write_text(source)
    return root


def test_a_pass_is_remembered_and_a_changed_code_folder_is_checked_again(
    tmp_path: Path, env_python: Path
) -> None:
    code = _code(tmp_path / "code", GOOD)
    check_model(env_python, [code], "checked_model:Model")
    assert len(os.listdir(tmp_path / "home" / "modelcheck")) == 1
    # Environments are content-addressed: their code never changes in place. Were it to, the
    # remembered pass stands: the check is not run again.
    (code / "checked_model.py").write_text("raise ImportError('not run')\n")
    check_model(env_python, [code], "checked_model:Model")
    (code / "other.py").write_text("")  # the folder changed: its verdict is not the same
    with pytest.raises(SpecError, match="not run"):
        check_model(env_python, [code], "checked_model:Model")


def test_failures_and_interpreters_outside_home_are_not_remembered(
    tmp_path: Path, env_python: Path
) -> None:
    bad = _code(tmp_path / "bad", "class Model:\n    pass\n")
    with pytest.raises(SpecError):
        check_model(env_python, [bad], "checked_model:Model")
    good = _code(tmp_path / "good", GOOD)
    check_model(sys.executable, [good], "checked_model:Model")  # not an environment of ours
    assert not (tmp_path / "home" / "modelcheck").exists()
