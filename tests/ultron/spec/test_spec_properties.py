"""Any spec gives a job or one clear validation error: property-based (hypothesis).

Specs are a valid one with fields replaced, added or mangled: values of any type, nested junk,
unicode, huge numbers, nan and inf, the paper's keys, duplicate keys and text that is not YAML.
``load_spec`` must return a :class:`JobSpec` or raise :class:`SpecError` (whose message can be
printed), never anything else; ``ultron validate`` must print no traceback.
"""

from __future__ import annotations

import math
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ultron.errors import SpecError
from ultron.spec.job import JobSpec
from ultron.spec.loader import PAPER_KEYS, load_spec

REPO = Path(__file__).parents[3]
TOY = REPO / "tests" / "data" / "toy"
ULTRON = str(Path(sys.executable).with_name("ultron"))

BASE: dict[str, Any] = {
    "name": "prop",
    "code": str(TOY),
    "model": "toy_model:Quadratic",
    "search_space": {"x": {"type": "uniform", "low": 0.0, "high": 4.0}, "y": [0, 1]},
    "num_iterations": 4,
}
FIELDS = sorted(
    {*JobSpec.model_fields, *PAPER_KEYS, "model_classname", "module_name", "package_name"}
)
NESTED_KEYS = [
    "type", "low", "high", "values", "q", "log", "base", "metric", "mode", "cpu", "memory",
    "gpu", "compute", "min_resource", "max_resource", "url", "format", "batch_size",
]  # fmt: skip
DOMAIN_TYPES = ["uniform", "loguniform", "int", "randint", "choice", "normal", "quniform", "?"]

numbers = st.one_of(
    st.integers(),
    st.integers(min_value=-(10**40), max_value=10**40),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0, -1, 1, 2**63, -(2**63) - 1, 1e308, -1e308, 5e-324, math.nan, math.inf]),
)
texts = st.one_of(
    st.text(max_size=12),
    st.sampled_from(["", " ", "toy_model:Quadratic", "a:b:c", "..", "/", "\x00", "é🙂", "1e999"]),
)
scalars = st.one_of(st.none(), st.booleans(), numbers, texts)
junk = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.one_of(texts, st.sampled_from(NESTED_KEYS)), inner, max_size=4),
    ),
    max_leaves=12,
)
domains = st.one_of(
    junk,
    st.lists(scalars, max_size=4),
    st.fixed_dictionaries(
        {"type": st.sampled_from(DOMAIN_TYPES)},
        optional={"low": numbers, "high": numbers, "values": junk, "q": numbers, "log": junk},
    ),
)


@st.composite
def specs(draw: st.DrawFn) -> dict[Any, Any]:
    """A valid spec with some fields dropped, replaced by junk, or added."""
    spec: dict[Any, Any] = dict(BASE)
    for key in draw(st.lists(st.sampled_from(sorted(BASE)), max_size=2, unique=True)):
        del spec[key]
    spec.update(draw(st.dictionaries(st.sampled_from(FIELDS), junk, max_size=3)))
    if draw(st.booleans()):
        spec["search_space"] = draw(st.dictionaries(texts, domains, max_size=3))
    if draw(st.booleans()):  # keys that are no field, or not even text
        spec.update(
            draw(st.dictionaries(st.one_of(texts, st.integers(), st.none()), junk, max_size=2))
        )
    return spec


def _check(load: Any) -> JobSpec | None:
    """``load()`` gives a JobSpec or a SpecError that prints; anything else fails the test."""
    try:
        spec = load()
    except SpecError as exc:
        assert str(exc) and exc.issues
        return None
    assert isinstance(spec, JobSpec)
    return spec


def _yaml_text(data: dict[Any, Any], extra_lines: list[str]) -> str | None:
    try:
        text = yaml.safe_dump(data, allow_unicode=True, sort_keys=False)
    except (yaml.YAMLError, UnicodeError):
        return None
    return text + "".join(f"{line}\n" for line in extra_lines)


# Lines appended to a YAML text: duplicate keys, YAML's own tags and anchors, broken syntax.
extra_lines = st.lists(
    st.one_of(
        st.builds(lambda key, value: f"{key}: {value}", st.sampled_from(FIELDS), st.sampled_from(
            ["1", "-1", ".nan", ".inf", "1e999", "x", "[1, 2", "{a: 1}", "!!binary aGk=",
             "!!python/object:os.system ls", "&a 1", "*a", "2026-01-01", "!!set {a}", "~", "'é'"]
        )),
        st.text(max_size=20),
    ),
    max_size=3,
)  # fmt: skip

SETTINGS = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


@SETTINGS
@given(spec=specs())
def test_any_mapping_gives_a_job_or_a_spec_error(spec: dict[Any, Any]) -> None:
    _check(lambda: load_spec(spec, base_dir=REPO))


@SETTINGS
@given(spec=specs(), lines=extra_lines, suffix=st.sampled_from([".yaml", ".yml", ".json"]))
def test_any_spec_file_gives_a_job_or_a_spec_error(
    spec: dict[Any, Any], lines: list[str], suffix: str
) -> None:
    text = _yaml_text(spec, lines)
    if text is None:
        return
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / f"job{suffix}"
        path.write_text(text, encoding="utf-8")
        _check(lambda: load_spec(path, check_code=True))


@SETTINGS
@given(content=st.one_of(st.binary(max_size=200), st.text(max_size=200).map(str.encode)))
def test_any_bytes_give_a_job_or_a_spec_error(content: bytes) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "job.yaml"
        path.write_bytes(content)
        _check(lambda: load_spec(path, check_code=True))


@pytest.mark.slow
@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=specs(), lines=extra_lines)
def test_validate_command_prints_no_traceback(spec: dict[Any, Any], lines: list[str]) -> None:
    text = _yaml_text(spec, lines)
    if text is None:
        return
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "job.yaml"
        path.write_text(text, encoding="utf-8")
        done = subprocess.run(
            [ULTRON, "validate", str(path)], capture_output=True, text=True, timeout=120
        )
    output = done.stdout + done.stderr
    assert done.returncode in (0, 2), output
    assert "Traceback" not in output, output
