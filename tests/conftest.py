"""Shared test settings: plain output and fixed width, so CLI output is stable; a history per test."""

import pytest


@pytest.fixture(autouse=True)
def _plain_terminal(monkeypatch):
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("COLUMNS", "100")


@pytest.fixture(autouse=True)
def _own_history(monkeypatch, tmp_path_factory):
    """Every validate run is recorded: tests record into a database of their own, never the user's."""
    monkeypatch.setenv("R9700CTL_HISTORY", str(tmp_path_factory.mktemp("history") / "history.db"))
