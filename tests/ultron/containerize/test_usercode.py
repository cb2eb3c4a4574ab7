"""``user_code``: a code base's modules win their names in our process, and leave no trace."""

from __future__ import annotations

import importlib
import sys
import types
from pathlib import Path

import pytest

from ultron.containerize.usercode import import_paths, top_level_names, user_code


def _package(root: Path, dotted: str, text: str) -> Path:
    folder = root.joinpath(*dotted.split("."))
    folder.mkdir(parents=True)
    (folder / "__init__.py").write_text(text)
    return root


def test_import_paths_put_a_src_layout_first(tmp_path: Path) -> None:
    assert import_paths(tmp_path) == (str(tmp_path),)
    (tmp_path / "src").mkdir()
    assert import_paths(tmp_path) == (str(tmp_path / "src"), str(tmp_path))
    assert import_paths(tmp_path / "missing") == ()


def test_names_of_what_ultron_runs_on_stay_ours(tmp_path: Path) -> None:
    # distributed comes in through dask[distributed], an extra of a requirement
    for name in ("tasks", "prefect", "json", "ultron", "redis", "distributed"):
        _package(tmp_path, name, "")
    for module in ("train.py", "_shared.py", "fast.cpython-311-x86_64-linux-gnu.so", "README.md"):
        (tmp_path / module).write_text("")
    assert top_level_names([tmp_path]) == {"tasks", "train", "_shared", "fast"}
    with user_code([tmp_path]):
        import prefect

        assert str(tmp_path) not in (prefect.__file__ or "")


def test_the_code_base_wins_over_a_module_already_imported_and_gets_it_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    earlier = types.ModuleType("tasks")  # what another code base (or the cwd) left imported
    monkeypatch.setitem(sys.modules, "tasks", earlier)
    _package(tmp_path, "tasks", "OWNER = 'user'")
    _package(tmp_path, "tasks.model", "from tasks import OWNER")
    path_before = list(sys.path)
    with user_code([tmp_path]):
        assert importlib.import_module("tasks.model").OWNER == "user"
    assert sys.modules["tasks"] is earlier
    assert "tasks.model" not in sys.modules
    assert sys.path == path_before


def test_nothing_is_left_when_the_block_raises(tmp_path: Path) -> None:
    _package(tmp_path, "mypkg_raises", "")
    with pytest.raises(RuntimeError), user_code([tmp_path]):
        importlib.import_module("mypkg_raises")
        raise RuntimeError("the job failed")
    assert "mypkg_raises" not in sys.modules
    assert str(tmp_path.resolve()) not in sys.path


def test_a_private_module_of_the_code_base_imports(tmp_path: Path) -> None:
    (tmp_path / "_shared.py").write_text("X = 7")
    _package(tmp_path, "mypkg_private", "from _shared import X")
    with user_code([tmp_path]):
        assert importlib.import_module("mypkg_private").X == 7
    assert "_shared" not in sys.modules


def test_modules_imported_before_the_block_stay(tmp_path: Path) -> None:
    import ultron.algorithms.space  # imported before: it lies under the folder given below

    repository = Path(ultron.algorithms.space.__file__).parents[1]
    before = set(sys.modules)
    with user_code([repository]):
        pass
    assert before <= set(sys.modules)
