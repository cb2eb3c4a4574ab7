"""The docs a user reads: every spec field described, a short README whose links all resolve.

The reference pages of the site are generated from these descriptions (``docs/gen_reference.py``),
so a field without one would be a blank row there and in the Prefect UI's run form.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pydantic

from ultron.settings import UltronSettings
from ultron.spec.job import JobSpec

REPO = Path(__file__).parents[1]
README = REPO / "README.md"
README_MAX_LINES = 200
# [text](target) and [text](target "title"); images too. Not inside code spans or blocks.
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")


def undescribed(schema: dict[str, Any]) -> list[str]:
    """Every field of a JSON schema and of the models it nests that has no description."""
    models = {schema.get("title", "root"): schema, **schema.get("$defs", {})}
    return [
        f"{model}.{field}"
        for model, body in models.items()
        for field, prop in body.get("properties", {}).items()
        if not str(prop.get("description", "")).strip()
    ]


def test_every_job_spec_field_has_a_description() -> None:
    assert undescribed(JobSpec.model_json_schema()) == []


def test_every_setting_has_a_description() -> None:
    assert undescribed(UltronSettings.model_json_schema()) == []


def test_the_check_finds_a_nested_field_without_a_description() -> None:
    class Inner(pydantic.BaseModel):
        bare: int = 0

    class Outer(pydantic.BaseModel):
        inner: Inner = pydantic.Field(default_factory=Inner, description="described")
        also_bare: str = ""

    assert sorted(undescribed(Outer.model_json_schema())) == ["Inner.bare", "Outer.also_bare"]


def _relative_links(markdown: str) -> list[str]:
    prose = re.sub(r"```.*?```", "", markdown, flags=re.DOTALL)
    prose = re.sub(r"`[^`\n]*`", "", prose)
    targets = [match.group(1) for match in LINK.finditer(prose)]
    return [t for t in targets if not re.match(r"^[a-z][a-z0-9+.-]*:|^#", t)]


def test_the_readme_is_short() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines"


def test_every_relative_link_of_the_readme_resolves() -> None:
    links = _relative_links(README.read_text(encoding="utf-8"))
    assert links, "README.md links to nothing of the repository"
    missing = [link for link in links if not (REPO / link.split("#", 1)[0]).exists()]
    assert missing == []


def test_the_link_check_sees_a_missing_file_and_skips_code_and_urls() -> None:
    text = (
        "[a](docs/index.md) [b](nowhere.md#x) [c](https://example.org) [d](#top)\n"
        "`[e](in-code.md)`\n```\n[f](in-block.md)\n```\n"
    )
    links = _relative_links(text)
    assert links == ["docs/index.md", "nowhere.md#x"]
    assert [link for link in links if not (REPO / link.split("#")[0]).exists()] == ["nowhere.md#x"]
