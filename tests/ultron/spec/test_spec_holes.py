"""The holes a new user found in validation: each one is now one SpecError naming the field.

Specs are real files in ``tmp_path``; code bases are real folders and ``.tar.gz`` archives.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from ultron.containerize.usercode import import_paths, user_code
from ultron.errors import ConfigIssue, SpecError
from ultron.master.strategy import build_strategy
from ultron.spec.codebase import check_code_base
from ultron.spec.job import MAX_ITERATIONS, JobSpec
from ultron.spec.loader import load_spec

REPO = Path(__file__).parents[3]
DATA = Path(__file__).parents[2] / "data"

GOOD = """\
name: holes
code: proj
model: pkg.train:Model
search_space:
  lr: {type: loguniform, low: 1.0e-4, high: 1.0e-1}
  act: [relu, tanh]
num_iterations: 3
"""

MODEL = """\
class Model:
    def score(self, hyperparameters, checkpoint_path, resume):
        return 0.0
"""


def _project(root: Path, files: dict[str, str]) -> Path:
    files = {"pyproject.toml": "[project]\nname = 'p'\nversion = '0'\n", **files}
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def _spec_file(tmp_path: Path, text: str, name: str = "job.yaml") -> Path:
    _project(tmp_path / "proj", {"pkg/__init__.py": "", "pkg/train.py": MODEL})
    path = tmp_path / name
    path.write_text(text)
    return path


def _only_issue(source: Path | dict[str, object], **kwargs: bool) -> ConfigIssue:
    with pytest.raises(SpecError) as info:
        load_spec(source, **kwargs)  # type: ignore[arg-type]
    assert len(info.value.issues) == 1, str(info.value)
    issue = info.value.issues[0]
    assert issue.rule and issue.fix  # every error says the rule and what to do
    return issue


def test_the_good_spec_loads(tmp_path: Path) -> None:
    spec = load_spec(_spec_file(tmp_path, GOOD), check_code=True)
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
def test_bounds_and_values_must_be_finite(tmp_path: Path, entry: str, field: str) -> None:
    text = GOOD.replace("{type: loguniform, low: 1.0e-4, high: 1.0e-1}", entry)
    issue = _only_issue(_spec_file(tmp_path, text))
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
def test_no_other_float_lets_nan_or_inf_through(tmp_path: Path, line: str, field: str) -> None:
    issue = _only_issue(_spec_file(tmp_path, f"{GOOD}{line}\n"))
    assert issue.field == field
    assert "finite" in issue.rule or "true/false" in issue.rule


def test_json_nan_and_infinity_are_refused(tmp_path: Path) -> None:
    raw = {
        "code": "proj",
        "model": "pkg.train:Model",
        "search_space": {"lr": {"type": "uniform", "low": 0, "high": float("inf")}},
    }
    path = _spec_file(tmp_path, json.dumps(raw), name="job.json")
    assert "Infinity" in path.read_text()
    assert _only_issue(path).field == "search_space.lr.high"


def test_num_iterations_has_an_upper_bound(tmp_path: Path) -> None:
    at_limit = GOOD.replace("num_iterations: 3", f"num_iterations: {MAX_ITERATIONS}")
    assert load_spec(_spec_file(tmp_path, at_limit)).num_iterations == MAX_ITERATIONS
    over = GOOD.replace("num_iterations: 3", f"num_iterations: {MAX_ITERATIONS * 10}")
    issue = _only_issue(_spec_file(tmp_path, over))
    assert (issue.field, issue.value) == ("num_iterations", MAX_ITERATIONS * 10)
    assert f"{MAX_ITERATIONS} or less" in issue.fix and "several jobs" in issue.fix


# --- the file: duplicate keys, encoding, shape --------------------------------------------------


def test_a_yaml_key_written_twice_is_refused_with_its_lines(tmp_path: Path) -> None:
    issue = _only_issue(_spec_file(tmp_path, f"{GOOD}num_iterations: 5000\n"))
    assert issue.field == "num_iterations"
    assert issue.value == ["3", "5000"]
    assert "lines 7, 8" in issue.rule


def test_yaml_duplicates_are_found_at_any_depth_all_at_once(tmp_path: Path) -> None:
    text = GOOD.replace(
        "  act: [relu, tanh]",
        "  act: [relu, tanh]\n  lr: {type: uniform, low: 0, high: 1, low: 2}\n  act: [a]",
    )
    with pytest.raises(SpecError) as info:
        load_spec(_spec_file(tmp_path, text))
    assert sorted(i.field for i in info.value.issues) == [
        "search_space.act",
        "search_space.lr",
        "search_space.lr.low",
    ]


def test_yaml_merge_keys_may_be_overridden(tmp_path: Path) -> None:
    text = GOOD.replace(
        "search_space:\n", "defaults: &d {type: uniform, low: 0, high: 1}\nsearch_space:\n"
    ).replace("  act: [relu, tanh]", "  act: [relu, tanh]\n  x: {<<: *d, high: 2}")
    with pytest.raises(SpecError) as info:  # the anchor's holder is an unknown field...
        load_spec(_spec_file(tmp_path, text))
    assert [i.field for i in info.value.issues] == ["defaults"]  # ...and x is no duplicate


def test_a_json_key_written_twice_is_refused_at_any_depth(tmp_path: Path) -> None:
    text = (
        '{"code": "proj", "model": "pkg.train:Model", "num_iterations": 3,\n'
        ' "search_space": {"lr": {"type": "uniform", "low": 0, "high": 1, "high": 9}},\n'
        ' "num_iterations": 5000}'
    )
    with pytest.raises(SpecError) as info:
        load_spec(_spec_file(tmp_path, text, name="job.json"))
    issues = {i.field: i for i in info.value.issues}
    assert sorted(issues) == ["num_iterations", "search_space.lr.high"]
    assert issues["num_iterations"].value == [3, 5000]
    assert issues["search_space.lr.high"].value == [1, 9]


def test_a_paper_key_and_ours_for_one_field_are_refused(tmp_path: Path) -> None:
    text = f"{GOOD}jobname: other\ncpu_per_pod: 2\nresources: {{cpu: 4}}\n"
    with pytest.raises(SpecError) as info:
        load_spec(_spec_file(tmp_path, text))
    assert sorted(i.field for i in info.value.issues) == ["jobname", "resources.cpu"]


def test_a_spec_that_is_not_utf8_names_the_byte(tmp_path: Path) -> None:
    path = _spec_file(tmp_path, "")
    prefix = b"# caf"
    path.write_bytes(prefix + "\u00e9\n".encode("latin-1") + GOOD.encode())
    issue = _only_issue(path)
    assert issue.field == "spec"
    assert f"byte {len(prefix)} (line 1) is 0xe9" in issue.rule
    assert "UTF-8" in issue.fix


def test_a_utf8_byte_order_mark_is_fine(tmp_path: Path) -> None:
    path = _spec_file(tmp_path, "")
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
    tmp_path: Path, text: str, words: str
) -> None:
    issue = _only_issue(_spec_file(tmp_path, text))
    assert issue.field == "spec"
    assert words in issue.rule


def test_a_folder_or_a_missing_file_is_one_clean_error(tmp_path: Path) -> None:
    spec = _spec_file(tmp_path, GOOD)
    issue = _only_issue(tmp_path)
    assert "folder" in issue.rule and str(spec) in issue.fix
    issue = _only_issue(tmp_path / "jobb.yaml")
    assert "must exist" in issue.rule and "did you mean" in issue.fix


def test_cli_validate_prints_encoding_and_duplicate_errors_without_traceback(
    tmp_path: Path,
) -> None:
    path = _spec_file(tmp_path, "")
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
def test_the_model_is_found_in_every_layout(tmp_path: Path, layout: str) -> None:
    files = {"pkg/__init__.py": "", "pkg/train.py": MODEL}
    if layout == "src":
        files = {f"src/{k}": v for k, v in files.items()}
    if layout == "declared":
        files = {f"lib/{k}": v for k, v in files.items()}
        files["pyproject.toml"] = "[tool.setuptools.packages.find]\nwhere = ['lib']\n"
    code = _project(tmp_path / "proj", files)
    if layout.startswith("archive"):
        top = "proj" if layout == "archive-top" else None
        code = _archive(code, tmp_path / "code.tar.gz", top=top)
    spec = load_spec(_job(tmp_path, code), check_code=True)
    assert check_code_base(spec) == []
    misspelled = _job(tmp_path, code, model="pkg.train:Modle")
    issue = _only_issue(misspelled, check_code=True)
    assert issue.field == "model"
    assert "did you mean pkg.train:Model?" in issue.fix


def test_without_check_code_the_code_base_is_not_read(tmp_path: Path) -> None:
    code = _project(tmp_path / "proj", {})
    assert load_spec(_job(tmp_path, code, model="nowhere.at:All")).model == "nowhere.at:All"


@pytest.mark.parametrize(
    ("source", "model", "words"),
    [
        (MODEL, "pkg.trian:Model", "did you mean pkg.train?"),
        ("class Model:\n    pass\n", "pkg.train:Model", "has none"),
        (
            "class Model:\n    def score(self, hyperparameters):\n        return 0\n",
            "pkg.train:Model",
            "takes 1 argument(s) besides self",
        ),
        (
            "class Model:\n    def __init__(self, width):\n        pass\n" + MODEL[12:],
            "pkg.train:Model",
            "needs width",
        ),
        ("class Model(:\n", "pkg.train:Model", "valid Python"),
    ],
)
def test_static_model_problems(tmp_path: Path, source: str, model: str, words: str) -> None:
    code = _project(tmp_path / "proj", {"pkg/__init__.py": "", "pkg/train.py": source})
    issue = _only_issue(_job(tmp_path, code, model=model), check_code=True)
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
def test_what_cannot_be_seen_statically_is_not_claimed_missing(tmp_path: Path, source: str) -> None:
    code = _project(tmp_path / "proj", {"pkg/__init__.py": "", "pkg/train.py": source})
    assert load_spec(_job(tmp_path, code), check_code=True).model == "pkg.train:Model"


def test_a_module_installed_beside_ultron_is_left_to_the_trial_check(tmp_path: Path) -> None:
    code = _project(tmp_path / "proj", {})
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


def test_a_users_strategy_and_its_options_are_checked(tmp_path: Path) -> None:
    files = {"pkg/__init__.py": "", "pkg/train.py": MODEL, "pkg/search.py": STRATEGY}
    code = _project(tmp_path / "proj", files)
    good = _job(tmp_path, code, strategy="pkg.search:Search", strategy_options={"start": 2})
    assert load_spec(good, check_code=True).strategy == "pkg.search:Search"
    issue = _only_issue({**good, "strategy": "pkg.search.Serch"}, check_code=True)
    assert issue.field == "strategy" and "did you mean pkg.search:Search?" in issue.fix
    issue = _only_issue({**good, "strategy_options": {"strat": 2}}, check_code=True)
    assert issue.field == "strategy_options"
    assert "strat" in issue.rule and "(start)" in issue.fix


def test_paper_fig2_archive_passes_and_errors_use_the_papers_names(tmp_path: Path) -> None:
    archive = tmp_path / "sample_model.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(REPO / "examples" / "paper_fig2" / "modelpkg", arcname="modelpkg")
    raw = json.loads((DATA / "fig2.json").read_text())
    raw["file_name"] = str(archive)
    assert load_spec(raw, check_code=True).model == "modelpkg.train:Model"
    issue = _only_issue({**raw, "model_classname": "Modell"}, check_code=True)
    assert issue.field == "model_classname/module_name/package_name"


def test_an_archive_without_a_project_is_named(tmp_path: Path) -> None:
    folder = tmp_path / "loose"
    folder.mkdir()
    (folder / "a.py").write_text("")
    (folder / "b.py").write_text("")
    archive = _archive(folder, tmp_path / "code.tar.gz", top=None)
    issue = _only_issue(_job(tmp_path, archive), check_code=True)
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
