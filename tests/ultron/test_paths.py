"""Job ids and the paths built from them stay inside ultron's folders, symlinks or not."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ultron.errors import SpecError
from ultron.paths import (
    JOB_ID_MAX_LENGTH,
    check_job_id,
    inside,
    job_results_url,
    new_job_id,
    remove_tree,
    scratch_dir,
)

BAD_IDS = {
    "empty": ("", "it is empty"),
    "too long": ("a" * (JOB_ID_MAX_LENGTH + 1), f"it has {JOB_ID_MAX_LENGTH + 1} characters"),
    "current folder": (".", "current or the parent folder"),
    "parent folder": ("..", "current or the parent folder"),
    "climbs out": ("../../outside", "path separator"),
    "climbs out after a name": ("job/../../outside", "path separator"),
    "absolute": ("/tmp/outside", "path separator"),
    "slash": ("a/b", "path separator"),
    "backslash": ("a\\..\\b", "path separator"),
    "NUL": ("job\0", "NUL"),
    "space": ("my job", "whitespace"),
    "newline": ("job\n", "whitespace"),
    "tab": ("\tjob", "whitespace"),
    "hidden": (".job", "starts with '.'"),
    "option": ("-rf", "starts with '-'"),
    "colon (a Redis key separator)": ("job:trials", "holds ':'"),
    "glob": ("job*", "holds '*'"),
    "not ASCII": ("jöb", "holds 'ö'"),
    "home": ("~", "holds '~'"),
}


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """ULTRON_HOME in a folder of this test, beside a folder that must stay untouched."""
    folder = tmp_path / "home"
    folder.mkdir()
    monkeypatch.setenv("ULTRON_HOME", str(folder))
    return folder


@pytest.fixture
def planted(tmp_path: Path) -> Path:
    """A ``checkpoints`` folder with a file in it, outside every folder of ultron."""
    file = tmp_path / "outside" / "checkpoints" / "precious.txt"
    file.parent.mkdir(parents=True)
    file.write_text("not ultron's")
    return file


@pytest.mark.parametrize(("job_id", "problem"), BAD_IDS.values(), ids=list(BAD_IDS))
def test_bad_job_ids_are_refused_with_field_value_rule_and_fix(job_id: str, problem: str) -> None:
    with pytest.raises(SpecError) as caught:
        check_job_id(job_id)
    (issue,) = caught.value.issues
    assert issue.field == "job_id" and issue.value == job_id
    assert problem in issue.rule and "letters" in issue.rule
    assert "plain name" in issue.fix


@pytest.mark.parametrize("job_id", ["a", "quickstart-1a2b3c4d", "A.b_C-9", "x" * JOB_ID_MAX_LENGTH])
def test_plain_job_ids_pass(job_id: str) -> None:
    assert check_job_id(job_id) == job_id


@pytest.mark.parametrize(
    "name", ["hpo-job", "../../etc", "/abs/path", "名前", "a b\tc\0", "...", "_x_", "-" * 80, ""]
)
def test_generated_job_ids_always_pass_the_check(name: str) -> None:
    job_id = new_job_id(name)
    assert check_job_id(job_id) == job_id
    assert len(job_id) <= 40 + 1 + 8


@pytest.mark.parametrize(("job_id", "problem"), BAD_IDS.values(), ids=list(BAD_IDS))
def test_no_bad_id_reaches_a_file_outside(
    job_id: str, problem: str, home: Path, planted: Path, tmp_path: Path
) -> None:
    """What finalize does with a job id (its results folder, its scratch checkpoints) is
    refused before any path is touched; the planted folder outside survives."""
    storage = tmp_path / "runs"
    with pytest.raises(SpecError):
        job_results_url(str(storage), job_id)
    with pytest.raises(SpecError):
        job_results_url("s3://bucket/runs", job_id)
    with pytest.raises(SpecError):
        remove_tree(scratch_dir(job_id) / "checkpoints", root=scratch_dir(job_id))
    assert planted.read_text() == "not ultron's"
    assert not storage.exists() and list(home.iterdir()) == []


def test_paths_of_a_good_id_lie_inside_home_and_storage(home: Path, tmp_path: Path) -> None:
    assert scratch_dir("job-1") == home.resolve() / "scratch" / "job-1"
    assert job_results_url(str(tmp_path / "runs"), "job-1") == str(
        tmp_path.resolve() / "runs/job-1"
    )
    assert job_results_url("s3://bucket/runs/", "job-1") == "s3://bucket/runs/job-1"
    url = job_results_url(f"file://{tmp_path}/runs", "job-1")
    assert url == f"file://{tmp_path}/runs/job-1"


def test_a_job_folder_that_links_outside_is_refused(
    home: Path, planted: Path, tmp_path: Path
) -> None:
    (home / "scratch").mkdir()
    (home / "scratch" / "linked").symlink_to(planted.parent.parent, target_is_directory=True)
    storage = tmp_path / "runs"
    storage.mkdir()
    (storage / "linked").symlink_to(planted.parent.parent, target_is_directory=True)
    for call in (
        lambda: scratch_dir("linked"),
        lambda: job_results_url(str(storage), "linked"),
        lambda: job_results_url(f"file://{storage}", "linked"),
    ):
        with pytest.raises(SpecError) as caught:
            call()
        assert caught.value.issues[0].field == "job_id"
        assert "must lie inside" in caught.value.issues[0].rule
    assert planted.read_text() == "not ultron's"


def test_inside_resolves_dots_and_symlinks(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "sub").mkdir(parents=True)
    (tmp_path / "outside").mkdir()
    (root / "in").symlink_to(root / "sub", target_is_directory=True)
    (root / "out").symlink_to(tmp_path / "outside", target_is_directory=True)
    assert inside(root / "sub" / "new-file", root) == (root / "sub" / "new-file").resolve()
    assert inside(root / "in" / "x", root) == (root / "sub" / "x").resolve()
    assert inside(root, root) == root.resolve()
    for escaping in (root / "out", root / "out" / "x", root / ".." / "outside", tmp_path):
        with pytest.raises(SpecError) as caught:
            inside(escaping, root, what="storage")
        (issue,) = caught.value.issues
        assert issue.field == "storage" and issue.value == str(escaping)
        assert f"must lie inside {root.resolve()}" in issue.rule


def test_remove_tree_deletes_inside_and_never_follows_links(tmp_path: Path, planted: Path) -> None:
    root = tmp_path / "root"
    tree = root / "job" / "checkpoints"
    (tree / "epoch-0001").mkdir(parents=True)
    (tree / "epoch-0001" / "weights.bin").write_bytes(b"0123")
    (tree / "link-to-outside").symlink_to(planted.parent, target_is_directory=True)
    (tree / "file-link").symlink_to(planted)
    assert remove_tree(tree, root=root) is True
    assert not tree.exists() and (root / "job").is_dir()
    assert planted.read_text() == "not ultron's"  # links inside the tree went, not their targets
    assert remove_tree(tree, root=root) is False  # nothing there: nothing to do


def test_remove_tree_removes_a_link_itself_not_its_target(tmp_path: Path, planted: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    (root / "checkpoints").symlink_to(planted.parent, target_is_directory=True)
    assert remove_tree(root / "checkpoints", root=root) is True
    assert not (root / "checkpoints").is_symlink()
    assert planted.read_text() == "not ultron's"


@pytest.mark.parametrize("where", ["dots", "parent link", "root itself", "absolute"])
def test_remove_tree_refuses_what_lies_outside(tmp_path: Path, planted: Path, where: str) -> None:
    root = tmp_path / "root"
    (root / "job").mkdir(parents=True)
    (root / "job" / "up").symlink_to(planted.parent.parent, target_is_directory=True)
    path = {
        "dots": root / "job" / ".." / ".." / "outside" / "checkpoints",
        "parent link": root / "job" / "up" / "checkpoints",  # a link on the way, not the end
        "root itself": root / "job" / "..",
        "absolute": planted.parent,
    }[where]
    with pytest.raises(SpecError):
        remove_tree(path, root=root)
    assert planted.read_text() == "not ultron's" and (root / "job").is_dir()


def test_remove_tree_of_a_link_whose_folder_lies_outside_is_refused(
    tmp_path: Path, planted: Path
) -> None:
    root = tmp_path / "root"
    root.mkdir()
    outside_link = planted.parent.parent / "link"
    os.symlink(planted.parent, outside_link)
    with pytest.raises(SpecError):
        remove_tree(outside_link, root=root)
    assert outside_link.is_symlink() and planted.exists()
