"""A stopper the user brings (``early_stopping.type: package.module:Class``), checked like a user
strategy: statically in the spec (the file, the class, its ``on_report``), then by signature
where the flow builds it. Code bases are real folders in ``tmp_path`` whose package is named
``stoppers``, the name of ultron's own ``ultron.algorithms.stoppers``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import ultron.algorithms.stoppers as ours
from ultron.algorithms.stoppers import Decision, Stopper
from ultron.errors import ConfigIssue, SpecError
from ultron.master.strategy import build_stopper, check_options
from ultron.master.user_stopper import DuckStopper
from ultron.spec.loader import load_spec
from ultron.usercode import import_paths, user_code

Project = Callable[[Path, dict[str, str]], Path]
OnlyIssue = Callable[..., ConfigIssue]

SUBCLASS = """
from ultron.algorithms.stoppers import Decision, Stopper


class Cutoff(Stopper):
    def __init__(self, *, direction, max_resource, min_resource=1, limit=1.0):
        super().__init__(direction=direction, max_resource=max_resource)
        self.limit = limit

    def on_report(self, trial_id, step, value):
        if step >= self.max_resource or self.loss(value) > self.limit:
            return Decision.STOP
        return Decision.CONTINUE
"""

DUCK = """
class Duck:
    def __init__(self, limit=1.0):
        self.limit = limit

    def on_report(self, trial_id, step, value):
        return "stop" if value > self.limit else "continue"


class NoReport:
    def judge(self, trial_id, step, value):
        return "stop"


class ShortReport:
    def on_report(self, value):
        return "stop"
"""


def _spec(
    tmp_path: Path, project: Project, model_source: str, kind: str, **options: object
) -> dict[str, Any]:
    files = {
        "pkg/__init__.py": "",
        "pkg/train.py": model_source,
        "stoppers/__init__.py": "",
        "stoppers/mine.py": SUBCLASS,
        "stoppers/duck.py": DUCK,
    }
    code = project(tmp_path / "proj", files)
    return {
        "code": str(code),
        "model": "pkg.train:Model",
        "search_space": {"x": [1, 2]},
        "early_stopping": {"type": kind, "max_resource": 4, "options": options},
    }


def test_a_good_user_stopper_passes_the_static_check(
    tmp_path: Path, project: Project, model_source: str
) -> None:
    for kind in ("stoppers.mine:Cutoff", "stoppers.duck:Duck", "stoppers.duck.Duck"):
        raw = _spec(tmp_path, project, model_source, kind)
        stopping = load_spec(raw, check_code=True).early_stopping
        assert stopping is not None and stopping.type == kind


@pytest.mark.parametrize(
    ("kind", "in_rule", "in_fix"),
    [
        ("stoppers.mine:Cutof", "stoppers/mine.py", "did you mean stoppers.mine:Cutoff?"),
        ("stoppers.missing:Cutoff", "module stoppers.missing", "stoppers/missing.py"),
        ("stoppers.duck:NoReport", "NoReport must have a method on_report()", "def on_report"),
        ("stoppers.duck:ShortReport", "ShortReport.on_report takes 1", "trial_id, step, value"),
    ],
)
def test_a_bad_user_stopper_is_refused_naming_file_class_and_fix(
    tmp_path: Path,
    project: Project,
    model_source: str,
    only_issue: OnlyIssue,
    kind: str,
    in_rule: str,
    in_fix: str,
) -> None:
    issue = only_issue(_spec(tmp_path, project, model_source, kind), check_code=True)
    assert issue.field == "early_stopping.type" and issue.value == kind
    assert in_rule in issue.rule and in_fix in issue.fix


def test_the_users_stoppers_package_and_ours_do_not_shadow_each_other(
    tmp_path: Path, project: Project, model_source: str
) -> None:
    spec = load_spec(_spec(tmp_path, project, model_source, "stoppers.mine:Cutoff", limit=0.5))
    check_options(spec)  # a user's class is left to the flow: nothing imported here
    with user_code(import_paths(spec.code)):
        stopper = build_stopper(spec)
        import stoppers  # the user's, inside the block

        assert Path(stoppers.__file__).is_relative_to(tmp_path)
    assert isinstance(stopper, Stopper) and type(stopper).__name__ == "Cutoff"
    assert stopper.on_report("a", 1, 0.7) is Decision.STOP  # limit 0.5 from the options
    assert Path(ours.__file__).is_relative_to(Path(__file__).parents[3])


def test_a_duck_typed_stopper_is_wrapped(
    tmp_path: Path, project: Project, model_source: str
) -> None:
    spec = load_spec(_spec(tmp_path, project, model_source, "stoppers.duck:Duck", limit=2))
    with user_code(import_paths(spec.code)):
        stopper = build_stopper(spec)
    assert isinstance(stopper, DuckStopper)
    assert stopper.on_report("a", 1, 3.0) is Decision.STOP
    assert stopper.on_report("a", 1, 1.0) is Decision.CONTINUE
    assert stopper.on_trial_start("a").max_resource == 4 and stopper.poll(free_slots=1) == []


@pytest.mark.parametrize(
    ("kind", "options", "field", "in_rule"),
    [
        ("stoppers.mine:Cutoff", {"limt": 1}, "early_stopping.options", "no option 'limt'"),
        ("stoppers.duck:Duck", {"limit": "x"}, None, None),  # accepted: its own business
        ("stoppers.duck:NoReport", {}, "early_stopping.type", "on_report(trial_id, step, value)"),
        ("stoppers.mine:Gone", {}, "early_stopping.type", "importable"),
    ],
)
def test_the_signature_check_where_the_flow_builds_it(
    tmp_path: Path,
    project: Project,
    model_source: str,
    kind: str,
    options: dict[str, Any],
    field: str | None,
    in_rule: str,
) -> None:
    spec = load_spec(_spec(tmp_path, project, model_source, kind, **options))
    with user_code(import_paths(spec.code)):
        if field is None:
            build_stopper(spec)
            return
        with pytest.raises(SpecError) as info:
            build_stopper(spec)
    (issue,) = info.value.issues
    assert issue.field == field and in_rule in issue.rule
    assert "stoppers/" in issue.rule or (field == "early_stopping.type" and "Gone" in issue.value)
