"""The job spec: the paper's Fig. 2 JSON as it is, typed entries, and readable errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from ultron.algorithms.space import Choice, IntRange, LogUniform, Uniform
from ultron.errors import SpecError
from ultron.spec.loader import load_spec

DATA = Path(__file__).parents[2] / "data"
REPO = Path(__file__).parents[3]


@pytest.fixture
def archive(tmp_path: Path) -> Path:
    """A real code-base archive (the paper's sample model package)."""
    path = tmp_path / "sample_model.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        tar.add(REPO / "examples" / "paper_fig2" / "modelpkg", arcname="modelpkg")
    return path


def test_fig2_json_is_kept_verbatim_in_examples() -> None:
    assert (DATA / "fig2.json").read_text() == (
        REPO / "examples" / "paper_fig2" / "job.json"
    ).read_text()


def test_paper_fig2_json_validates_with_only_file_name_changed(archive: Path) -> None:
    raw = json.loads((DATA / "fig2.json").read_text())
    raw["file_name"] = str(archive)
    spec = load_spec(raw)
    assert spec.name == "SampleModel"
    assert spec.model == "modelpkg.train:Model"
    assert spec.strategy == "random"
    assert spec.num_iterations == 150
    assert spec.parallelism == 8
    assert spec.resources.cpu == 5.0 and spec.resources.gpu == 1
    assert spec.resources.memory == "100000Mi"
    assert spec.units == 8  # parallelism x one GPU per trial (compute: gpu)
    assert spec.code == archive
    assert spec.space["optimizer"] == Choice(("adam", "sgd", "rmsprop"))
    assert spec.space["lr"] == Choice((1e-3, 5e-3, 1e-4))


def test_paper_fig2_file_as_a_file_with_missing_archive_names_file_name(tmp_path: Path) -> None:
    path = tmp_path / "fig2.json"
    path.write_text((DATA / "fig2.json").read_text().replace("/sample_model", "/no/such"))
    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert len(info.value.issues) == 1
    assert info.value.issues[0].field == "file_name"


MODEL = """
class Model:
    def score(self, hyperparameters, checkpoint_path, resume):
        return float(hyperparameters["lr"])
"""


def _write(tmp_path: Path, text: str) -> Path:
    """The spec ``text`` beside ``proj/``, a code base defining the ``pkg.train:Model`` it names."""
    (tmp_path / "proj" / "pkg").mkdir(parents=True, exist_ok=True)
    (tmp_path / "proj" / "pyproject.toml").write_text("[project]\nname='p'\n")
    (tmp_path / "proj" / "pkg" / "__init__.py").write_text("")
    (tmp_path / "proj" / "pkg" / "train.py").write_text(MODEL)
    path = tmp_path / "job.yaml"
    path.write_text(text)
    return path


GOOD = """
name: good
code: proj
model: pkg.train:Model
search_space:
  lr: {type: loguniform, low: 1.0e-4, high: 1.0e-1}
  width: {type: int, low: 8, high: 64}
  dropout: {type: uniform, low: 0.0, high: 0.5}
  act: [relu, tanh]
"""


def test_typed_entries_and_list_form(tmp_path: Path) -> None:
    spec = load_spec(_write(tmp_path, GOOD))
    assert spec.space["lr"] == LogUniform(1e-4, 1e-1)
    assert spec.space["width"] == IntRange(8, 64)
    assert spec.space["dropout"] == Uniform(0.0, 0.5)
    assert spec.space["act"] == Choice(("relu", "tanh"))
    assert spec.code == (tmp_path / "proj").resolve()  # relative to the spec file


BAD = """
name: bad
code: no_such_folder
model: pkg.train:Model
search_space: {}
strategy: hyperopt
num_iterations: many
parallelism: 0
objective: {metric: loss, mode: minimise}
colour: blue
"""

EXPECTED = {
    "code": ("no_such_folder", "must exist"),
    "search_space": ({}, "at least one hyper-parameter"),
    "strategy": ("hyperopt", "built-in"),
    "num_iterations": ("many", "whole number"),
    "parallelism": (0, "greater than or equal to 1"),
    "objective.mode": ("minimise", "'minimize' or 'maximize'"),
    "colour": ("blue", "not a known field"),
}


def test_every_mistake_gives_one_error_all_at_once(tmp_path: Path) -> None:
    with pytest.raises(SpecError) as info:
        load_spec(_write(tmp_path, BAD))
    issues = {issue.field: issue for issue in info.value.issues}
    assert sorted(issues) == sorted(EXPECTED)
    assert len(info.value.issues) == len(EXPECTED)  # one error per mistake
    for field, (value, rule) in EXPECTED.items():
        assert issues[field].value == value
        assert rule in issues[field].rule
        assert issues[field].fix  # every error says what to do
    assert "write 'minimize'" in issues["objective.mode"].fix  # the likely spelling


@pytest.mark.parametrize(
    ("entry", "words"),
    [
        ("{type: uniform, low: 1, high: 0}", "must be below high"),
        ("{type: loguniform, low: 0, high: 1}", "positive"),
        ("{type: int, low: 1.5, high: 4}", "whole numbers"),
        ("{type: choice, values: []}", "at least one value"),
        ("{type: uniform, low: 1}", "both low and high"),
        ("{type: normal, low: 0, high: 1}", "'uniform', 'loguniform', 'int', 'choice' or 'list'"),
    ],
)
def test_bad_search_space_entries(tmp_path: Path, entry: str, words: str) -> None:
    text = GOOD.replace("{type: uniform, low: 0.0, high: 0.5}", entry)
    with pytest.raises(SpecError) as info:
        load_spec(_write(tmp_path, text))
    assert [i.field.split(".")[:2] for i in info.value.issues] == [["search_space", "dropout"]]
    assert words in str(info.value)


def test_paper_names_are_used_in_errors(tmp_path: Path, archive: Path) -> None:
    raw = json.loads((DATA / "fig2.json").read_text())
    raw.update(file_name=str(archive), parallelism_fact=0, gpu_per_pod="two")
    with pytest.raises(SpecError) as info:
        load_spec(raw)
    assert sorted(i.field for i in info.value.issues) == ["gpu_per_pod", "parallelism_fact"]


# Brackets in a value are text, not rich markup: "[/hyperopt]" once ended in a MarkupError.
MARKUP = BAD.replace("strategy: hyperopt", "strategy: '[/hyperopt] [bold]'")


@pytest.mark.parametrize("columns", ["40", "80"])
@pytest.mark.parametrize("text", [BAD, MARKUP], ids=["plain", "brackets"])
def test_cli_validate_prints_all_errors_without_traceback(
    tmp_path: Path, columns: str, text: str
) -> None:
    """Every error line comes out whole, in a pipe (no terminal) of any width."""
    bad = _write(tmp_path, text)
    with pytest.raises(SpecError) as info:
        load_spec(bad)
    out = subprocess.run(
        [sys.executable, "-m", "ultron.cli", "validate", str(bad)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": columns},
        stdin=subprocess.DEVNULL,
    )
    assert out.returncode != 0
    text = out.stdout + out.stderr
    assert "Traceback" not in text
    assert f"has {len(EXPECTED)} problem(s)" in text
    assert str(info.value) in text  # unwrapped, brackets and all
    for field in EXPECTED:
        assert f"{field} is " in text


def test_cli_validate_accepts_a_good_spec(tmp_path: Path) -> None:
    good = _write(tmp_path, GOOD)
    out = subprocess.run(
        [sys.executable, "-m", "ultron.cli", "validate", str(good)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert "valid job spec" in out.stdout


def test_quickstart_spec_is_valid() -> None:
    spec = load_spec(REPO / "examples" / "quickstart" / "job.yaml")
    assert (spec.strategy, spec.num_iterations, spec.parallelism) == ("random", 12, 2)


@pytest.mark.parametrize(
    ("least", "rule"),
    [(3, "it must be between 1 and parallelism (2)"), (0, "greater than or equal to 1")],
)
def test_min_parallelism_lies_between_1_and_parallelism(
    tmp_path: Path, least: int, rule: str
) -> None:
    raw = {
        "name": "m",
        "code": str(REPO / "tests" / "data" / "toy"),
        "model": "m:M",
        "search_space": {"a": [1]},
    }
    with pytest.raises(SpecError) as info:
        load_spec({**raw, "parallelism": 2, "min_parallelism": least}, base_dir=tmp_path)
    (issue,) = info.value.issues
    assert (issue.field, issue.value) == ("min_parallelism", least)
    assert rule in issue.rule and issue.fix
