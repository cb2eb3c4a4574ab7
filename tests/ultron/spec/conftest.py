"""Fixtures shared by the holes-in-validation tests: a project folder, a good model, one issue.

``test_spec_holes.py`` and ``test_spec_holes_codebase.py`` both write real project folders and
expect one ``SpecError`` naming one field; the helpers live here once, as fixtures, since test
modules run with ``--import-mode=importlib`` and cannot import each other.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from ultron.errors import ConfigIssue, SpecError
from ultron.spec.loader import load_spec

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


def _only_issue(source: Path | dict[str, object], **kwargs: bool) -> ConfigIssue:
    with pytest.raises(SpecError) as info:
        load_spec(source, **kwargs)  # type: ignore[arg-type]
    assert len(info.value.issues) == 1, str(info.value)
    issue = info.value.issues[0]
    assert issue.rule and issue.fix  # every error says the rule and what to do
    return issue


@pytest.fixture
def model_source() -> str:
    """The source of a good ``Model``: a class with ``score(hyperparameters, ...)``.

    Returns:
        The text of a module that defines ``Model``.
    """
    return MODEL


@pytest.fixture
def project() -> Callable[[Path, dict[str, str]], Path]:
    """The function that writes a project folder: a ``pyproject.toml`` and the files given.

    Returns:
        ``write(root, files)``: writes ``files`` (path in ``root`` to text, a
        ``pyproject.toml`` among them replaces the default one) and returns ``root``.
    """
    return _project


@pytest.fixture
def only_issue() -> Callable[..., ConfigIssue]:
    """The function that loads a spec that must fail with exactly one issue.

    Returns:
        ``only_issue(source, **load_spec_options)``: the one ``ConfigIssue`` of the
        ``SpecError`` that ``load_spec`` raises, checked to give a rule and a fix.
    """
    return _only_issue
