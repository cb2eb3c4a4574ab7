"""The holes a new user found in validation: each one is now one SpecError naming the field.

Specs are real files in ``tmp_path``; code bases are real folders and ``.tar.gz`` archives.
This file holds the spec file's own checks: numbers, duplicate keys, encoding and shape; the
code-base checks are in ``test_spec_holes_codebase.py``, the shared fixtures in ``conftest.py``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from ultron.errors import ConfigIssue, SpecError
from ultron.spec.job import MAX_ITERATIONS
from ultron.spec.loader import load_spec

GOOD = """\
name: holes
code: proj
model: pkg.train:Model
search_space:
  lr: {type: loguniform, low: 1.0e-4, high: 1.0e-1}
  act: [relu, tanh]
num_iterations: 3
"""

SpecFile = Callable[..., Path]
OnlyIssue = Callable[..., ConfigIssue]


@pytest.fixture
def spec_file(
    tmp_path: Path, project: Callable[[Path, dict[str, str]], Path], model_source: str
) -> SpecFile:
    """The function that writes a spec file beside the project ``proj`` with a good model.

    Returns:
        ``spec_file(text, name="job.yaml")``: writes ``text`` to ``tmp_path / name``.
    """
    project(tmp_path / "proj", {"pkg/__init__.py": "", "pkg/train.py": model_source})

    def write(text: str, name: str = "job.yaml") -> Path:
        path = tmp_path / name
        path.write_text(text)
        return path

    return write


def test_the_good_spec_loads(spec_file: SpecFile) -> None:
    spec = load_spec(spec_file(GOOD), check_code=True)
    assert spec.num_iterations == 3


# --- numbers: finite, bounded, not booleans ---------------------------------------------------


@pytest.mark.parametrize(
    ("entry", "field"),
    [
        ("{type: uniform, low: .nan, high: 1}", "search_space.lr.low"),
        ("{type: uniform, low: 0, high: .inf}", "search_space.lr.high"),
        ("{type: loguniform, low: 1.0e-4, high: .Inf}", "search_space.lr.high"),
        ("{type: int, low: -.inf, high: 4}", "search_space.lr.low"),
        ("{type: uniform, low: 0, high: 'Infinity'}", "search_space.lr.high"),
        ("[0.1, .nan]", "search_space.lr.values"),
        ("{type: choice, values: [[1, 2], [3, .inf]]}", "search_space.lr.values"),
        ("{type: uniform, low: -1.0e+308, high: 1.0e+308}", "search_space.lr"),
        ("{type: int, low: 0, high: 1.0e+300}", "search_space.lr"),
        ("{type: uniform, low: true, high: 2}", "search_space.lr.low"),
        ("{type: choice, values: [1, 2], low: 0}", "search_space.lr"),
    ],
)
def test_bounds_and_values_must_be_finite(
    entry: str, field: str, spec_file: SpecFile, only_issue: OnlyIssue
) -> None:
    text = GOOD.replace("{type: loguniform, low: 1.0e-4, high: 1.0e-1}", entry)
    issue = only_issue(spec_file(text))
    assert issue.field == field


@pytest.mark.parametrize(
    ("line", "field"),
    [
        ("trial_timeout: .inf", "trial_timeout"),
        ("acquire_timeout: .nan", "acquire_timeout"),
        ("max_failed_share: .nan", "max_failed_share"),
        ("resources: {cpu: .inf}", "resources.cpu"),
        ("resources: {gpu: true}", "resources.gpu"),
        (
            "early_stopping: {type: median, max_resource: 9, grace_period: .inf}",
            "early_stopping.grace_period",
        ),
        (
            "early_stopping: {type: pop, max_resource: 9, options: {target: .nan}}",
            "early_stopping.options",
        ),
        ("strategy_options: {sigma: [1, .nan]}", "strategy_options"),
        ("parallelism: true", "parallelism"),
    ],
)
def test_no_other_float_lets_nan_or_inf_through(
    line: str, field: str, spec_file: SpecFile, only_issue: OnlyIssue
) -> None:
    issue = only_issue(spec_file(f"{GOOD}{line}\n"))
    assert issue.field == field
    assert "finite" in issue.rule or "true/false" in issue.rule


def test_json_nan_and_infinity_are_refused(spec_file: SpecFile, only_issue: OnlyIssue) -> None:
    raw = {
        "code": "proj",
        "model": "pkg.train:Model",
        "search_space": {"lr": {"type": "uniform", "low": 0, "high": float("inf")}},
    }
    path = spec_file(json.dumps(raw), name="job.json")
    assert "Infinity" in path.read_text()
    assert only_issue(path).field == "search_space.lr.high"


def test_num_iterations_has_an_upper_bound(spec_file: SpecFile, only_issue: OnlyIssue) -> None:
    at_limit = GOOD.replace("num_iterations: 3", f"num_iterations: {MAX_ITERATIONS}")
    assert load_spec(spec_file(at_limit)).num_iterations == MAX_ITERATIONS
    over = GOOD.replace("num_iterations: 3", f"num_iterations: {MAX_ITERATIONS * 10}")
    issue = only_issue(spec_file(over))
    assert (issue.field, issue.value) == ("num_iterations", MAX_ITERATIONS * 10)
    assert f"{MAX_ITERATIONS} or less" in issue.fix and "several jobs" in issue.fix


# --- the file: duplicate keys, encoding, shape --------------------------------------------------


def test_a_yaml_key_written_twice_is_refused_with_its_lines(
    spec_file: SpecFile, only_issue: OnlyIssue
) -> None:
    issue = only_issue(spec_file(f"{GOOD}num_iterations: 5000\n"))
    assert issue.field == "num_iterations"
    assert issue.value == ["3", "5000"]
    assert "lines 7, 8" in issue.rule


def test_yaml_duplicates_are_found_at_any_depth_all_at_once(spec_file: SpecFile) -> None:
    text = GOOD.replace(
        "  act: [relu, tanh]",
        "  act: [relu, tanh]\n  lr: {type: uniform, low: 0, high: 1, low: 2}\n  act: [a]",
    )
    with pytest.raises(SpecError) as info:
        load_spec(spec_file(text))
    assert sorted(i.field for i in info.value.issues) == [
        "search_space.act",
        "search_space.lr",
        "search_space.lr.low",
    ]


def test_yaml_merge_keys_may_be_overridden(spec_file: SpecFile) -> None:
    text = GOOD.replace(
        "search_space:\n", "defaults: &d {type: uniform, low: 0, high: 1}\nsearch_space:\n"
    ).replace("  act: [relu, tanh]", "  act: [relu, tanh]\n  x: {<<: *d, high: 2}")
    with pytest.raises(SpecError) as info:  # the anchor's holder is an unknown field...
        load_spec(spec_file(text))
    assert [i.field for i in info.value.issues] == ["defaults"]  # ...and x is no duplicate


def test_a_json_key_written_twice_is_refused_at_any_depth(spec_file: SpecFile) -> None:
    text = (
        '{"code": "proj", "model": "pkg.train:Model", "num_iterations": 3,\n'
        ' "search_space": {"lr": {"type": "uniform", "low": 0, "high": 1, "high": 9}},\n'
        ' "num_iterations": 5000}'
    )
    with pytest.raises(SpecError) as info:
        load_spec(spec_file(text, name="job.json"))
    issues = {i.field: i for i in info.value.issues}
    assert sorted(issues) == ["num_iterations", "search_space.lr.high"]
    assert issues["num_iterations"].value == [3, 5000]
    assert issues["search_space.lr.high"].value == [1, 9]


def test_a_paper_key_and_ours_for_one_field_are_refused(spec_file: SpecFile) -> None:
    text = f"{GOOD}jobname: other\ncpu_per_pod: 2\nresources: {{cpu: 4}}\n"
    with pytest.raises(SpecError) as info:
        load_spec(spec_file(text))
    assert sorted(i.field for i in info.value.issues) == ["jobname", "resources.cpu"]


def test_a_spec_that_is_not_utf8_names_the_byte(spec_file: SpecFile, only_issue: OnlyIssue) -> None:
    path = spec_file("")
    prefix = b"# caf"
    path.write_bytes(prefix + "\u00e9\n".encode("latin-1") + GOOD.encode())
    issue = only_issue(path)
    assert issue.field == "spec"
    assert f"byte {len(prefix)} (line 1) is 0xe9" in issue.rule
    assert "UTF-8" in issue.fix


def test_a_utf8_byte_order_mark_is_fine(spec_file: SpecFile) -> None:
    path = spec_file("")
    path.write_bytes(b"\xef\xbb\xbf" + GOOD.encode())
    assert load_spec(path).name == "holes"


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("", "empty"),
        ("# only a comment\n", "empty"),
        ("- a\n- b\n", "a list"),
        ("just text\n", "a str"),
        ("{name: [unclosed\n", "valid YAML"),
    ],
)
def test_a_file_that_is_no_mapping_is_one_clean_error(
    text: str, words: str, spec_file: SpecFile, only_issue: OnlyIssue
) -> None:
    issue = only_issue(spec_file(text))
    assert issue.field == "spec"
    assert words in issue.rule


def test_a_folder_or_a_missing_file_is_one_clean_error(
    tmp_path: Path, spec_file: SpecFile, only_issue: OnlyIssue
) -> None:
    spec = spec_file(GOOD)
    issue = only_issue(tmp_path)
    assert "folder" in issue.rule and str(spec) in issue.fix
    issue = only_issue(tmp_path / "jobb.yaml")
    assert "must exist" in issue.rule and "did you mean" in issue.fix


def test_cli_validate_prints_encoding_and_duplicate_errors_without_traceback(
    spec_file: SpecFile,
) -> None:
    path = spec_file("")
    path.write_bytes(b"name: caf\xe9\n" + GOOD.encode() + b"num_iterations: 5000\n")
    out = subprocess.run(
        [sys.executable, "-m", "ultron.cli", "validate", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert out.returncode != 0
    assert "Traceback" not in out.stderr + out.stdout
    assert "byte 9" in out.stderr
    path.write_bytes(GOOD.encode() + b"num_iterations: 5000\n")
    out = subprocess.run(
        [sys.executable, "-m", "ultron.cli", "validate", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert out.returncode != 0 and "Traceback" not in out.stderr
    assert "num_iterations is ['3', '5000']" in out.stderr
