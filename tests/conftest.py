"""Shared test settings: plain output and fixed width, so CLI output is stable."""

import pytest


@pytest.fixture(autouse=True)
def _plain_terminal(monkeypatch):
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("COLUMNS", "100")
