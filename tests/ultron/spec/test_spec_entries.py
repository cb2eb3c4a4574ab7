"""Typed search-space entries: what a form shows, and what older stored specs hold."""

from __future__ import annotations

import pytest

from ultron.spec.space import parse_entry


@pytest.mark.parametrize(
    ("stored", "now"),
    [
        (
            {"type": "uniform", "low": 0.0, "high": 1.0, "values": None, "log": False},
            {"type": "uniform", "low": 0.0, "high": 1.0},
        ),
        (
            {"type": "choice", "low": None, "high": None, "values": [1, 2], "log": False},
            {"type": "choice", "values": [1, 2]},
        ),
        (
            {"type": "int", "low": 1.0, "high": 8.0, "values": None, "log": True},
            {"type": "int", "low": 1, "high": 8, "log": True},
        ),
    ],
)
def test_a_spec_stored_before_typed_entries_reads_the_same(stored: dict, now: dict) -> None:
    # A job that ran with an older ultron stored every key of every entry type; it resumes
    # (ultron.master.resume compares the stored spec as the current model dumps it).
    assert parse_entry(stored).model_dump(mode="json") == parse_entry(now).model_dump(mode="json")


def test_a_choice_still_refuses_real_bounds() -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="a choice takes values, not low/high"):
        parse_entry({"type": "choice", "values": [1], "low": 0})
