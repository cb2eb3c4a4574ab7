"""``user_code``: a code base's modules win their names in our process, and leave no trace."""

from __future__ import annotations

import importlib
import json
import os
import sys
import time
import types
from pathlib import Path

import pytest

from ultron.usercode import import_paths, top_level_names, user_code


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


def test_the_names_ultron_runs_on_are_kept_on_disk_until_an_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ultron.usercode as usercode

    monkeypatch.setenv("ULTRON_HOME", str(tmp_path / "home"))
    site = tmp_path / "site-packages"  # a folder of distributions, as pip leaves one
    site.mkdir()
    monkeypatch.setattr(sys, "path", [*sys.path, str(site)])
    usercode._ours.cache_clear()
    walked = usercode._walk_requirements()
    first = usercode._ours()
    kept = next((tmp_path / "home" / "cache").glob("ours-*.json"))
    assert first == usercode._BASE | walked
    # A stored answer is what the next process gets: mark it to see it come back.
    data = json.loads(kept.read_text())
    kept.write_text(json.dumps({**data, "names": [*data["names"], "marker_name"]}))
    usercode._ours.cache_clear()
    assert "marker_name" in usercode._ours()
    # An install (a new *.dist-info folder) changes the folder: the walk is done again.
    (site / "newpkg-1.0.dist-info").mkdir()
    os.utime(site, ns=(time.time_ns() + 10**9,) * 2)  # coarse file-system clocks
    usercode._ours.cache_clear()
    assert "marker_name" not in usercode._ours()
    assert usercode._ours() == first
    # An unreadable stored answer is walked again and rewritten.
    kept.write_text("{not json")
    usercode._ours.cache_clear()
    assert usercode._ours() == first
    assert json.loads(kept.read_text())["key"] == usercode._installed_key()
    usercode._ours.cache_clear()
