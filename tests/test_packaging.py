"""One import namespace: everything we ship installs and imports under ``ultron`` only."""

from __future__ import annotations

import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).parents[1]
MAPPED = ("flows", "tasks", "algorithms", "datamanager")  # top-level folders -> ultron.<name>


def _config() -> dict[str, object]:
    return tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]


def _packages_on_disk() -> set[str]:
    found = set()
    for root in ("ultron", *MAPPED):
        for init in (REPO / root).rglob("__init__.py"):
            parts = init.parent.relative_to(REPO).parts
            found.add(".".join(parts if parts[0] == "ultron" else ("ultron", *parts)))
    return found


def test_the_package_list_names_every_package_folder() -> None:
    config = _config()
    assert set(config["packages"]) == _packages_on_disk()  # type: ignore[arg-type]
    assert config["package-dir"] == {  # type: ignore[index]
        "ultron": "ultron",
        **{f"ultron.{name}": name for name in MAPPED},
    }


@pytest.mark.slow
def test_the_wheel_has_one_top_level_package(tmp_path: Path) -> None:
    pip = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q"]
    subprocess.run(
        [*pip, "-w", str(tmp_path), str(REPO)],
        check=True,
        cwd=tmp_path,
        timeout=300,
    )
    (wheel,) = tmp_path.glob("ultron_automl-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {name.split("/")[0] for name in names}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"ultron"}
    top_level = next(n for n in names if n.endswith(".dist-info/top_level.txt"))
    assert zipfile.ZipFile(wheel).read(top_level).decode().split() == ["ultron"]
    # every module of the repository's package folders is in it, under its ultron.* name
    for root in ("ultron", *MAPPED):
        for source in (REPO / root).rglob("*.py"):
            relative = source.relative_to(REPO).as_posix()
            assert (relative if root == "ultron" else f"ultron/{relative}") in names, relative
    assert not any("ultron-runs" in name for name in names)


def test_nothing_of_ours_imports_under_another_top_level_name(tmp_path: Path) -> None:
    code = (
        "import importlib, ultron.flows.hpo_job, ultron.tasks.finalize, ultron.algorithms, "
        "ultron.datamanager\n"
        f"for name in {MAPPED!r}:\n"
        "    try:\n"
        "        importlib.import_module(name)\n"
        "    except ModuleNotFoundError:\n"
        "        continue\n"
        "    print('importable:', name)\n"
        "print(ultron.flows.hpo_job.__name__, ultron.algorithms.__name__)\n"
    )
    out = subprocess.run(
        [sys.executable, "-P", "-c", code],
        cwd=tmp_path,  # not the repository: its folders are importable from there by path
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["ultron.flows.hpo_job", "ultron.algorithms"]
