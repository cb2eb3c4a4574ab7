"""The warm_start section: job ids checked as job ids, each once, at least one; and a resumed
job may not change it (its strategy was told those jobs' trials)."""

from __future__ import annotations

from typing import Any

import pytest

from ultron.errors import SpecError
from ultron.master.resume import check_resume
from ultron.spec.loader import load_spec

BASE = {"code": ".", "model": "pkg.train:Model", "search_space": {"x": [1, 2]}}


def _load(warm_start: Any) -> Any:
    return load_spec({**BASE, "warm_start": warm_start}, check_code=False)


def test_a_list_of_job_ids_is_taken() -> None:
    spec = _load({"jobs": ["digits-a1b2", "digits-c3d4"]})
    assert spec.warm_start is not None and spec.warm_start.jobs == ["digits-a1b2", "digits-c3d4"]
    assert load_spec(BASE).warm_start is None


@pytest.mark.parametrize(
    ("warm_start", "field", "rule"),
    [
        ({"jobs": []}, "warm_start.jobs", "at least one earlier job"),
        ({"jobs": ["a", "a"]}, "warm_start.jobs", "names 'a' more than once"),
        ({"jobs": ["../etc"]}, "warm_start.jobs", "'../etc' is not a job id"),
        ({"jobs": ["a"], "from": "b"}, "warm_start.from", ""),
        ({}, "warm_start.jobs", ""),
    ],
)
def test_bad_warm_starts_name_the_field_and_the_rule(
    warm_start: dict[str, Any], field: str, rule: str
) -> None:
    with pytest.raises(SpecError) as refused:
        _load(warm_start)
    issue = refused.value.issues[0]
    assert issue.field == field and rule in issue.rule and issue.fix


def test_a_resumed_job_keeps_its_warm_start() -> None:
    first = _load({"jobs": ["old-1"]}).model_dump(mode="json")
    with pytest.raises(SpecError) as refused:
        check_resume(first, _load({"jobs": ["old-2"]}))
    assert [issue.field for issue in refused.value.issues] == ["warm_start.jobs"]
