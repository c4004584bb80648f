"""Shared test fixtures: where the session-contract corpus lives.

The corpus is not vendored: it is read from ``../shared/session-contract`` (developers and CI both have it there).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
CORPUS = REPO.parent / "shared" / "session-contract"


def corpus_dir() -> Path:
    """The corpus directory, or a clear failure when it is missing."""
    if not (CORPUS / "SPEC.md").is_file():
        pytest.fail(
            f"session-contract corpus not found at {CORPUS}: killpoint's tests read it from ../shared "
            "(check out the shared folder beside the repository)",
            pytrace=False,
        )
    return CORPUS


def reducer_manifest() -> list[dict]:
    """The reducer fixture entries of ``fixtures/manifest.json`` (empty when the corpus is missing)."""
    path = CORPUS / "fixtures" / "manifest.json"
    return json.loads(path.read_text())["fixtures"] if path.is_file() else []


def planner_manifest() -> list[dict]:
    """The planner fixture entries of ``planner-fixtures/manifest.json`` (empty when the corpus is missing)."""
    path = CORPUS / "planner-fixtures" / "manifest.json"
    return json.loads(path.read_text())["fixtures"] if path.is_file() else []


@pytest.fixture(scope="session")
def corpus() -> Path:
    """Path of ``../shared/session-contract``; fails the test with a clear message when it is absent."""
    return corpus_dir()
