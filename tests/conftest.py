"""Shared test settings: plain output and fixed width, so CLI output is stable; a history per test;
the agent's data; every verdict that is not PASS names a catalogued reason code.

The agent reads its data files as the JSON the controller writes when it packs the agent
(r9700ctl.agentpack). Tests get the same: the agent is staged once per session, in-process
agent code reads the staged JSON, and agents started as processes run from the staged tree.
"""

import pytest
from agent_stage import staged_agent_dir


@pytest.fixture(autouse=True)
def _plain_terminal(monkeypatch):
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("COLUMNS", "100")


@pytest.fixture(autouse=True, scope="session")
def _agent_data():
    """In-process agent code reads the JSON data files of the staged agent."""
    from r9700ctl.agent import datafiles

    saved = datafiles.DATA_DIR
    datafiles.DATA_DIR = staged_agent_dir() / "r9700ctl" / "data"
    datafiles._cache.clear()
    yield datafiles.DATA_DIR
    datafiles.DATA_DIR = saved
    datafiles._cache.clear()


@pytest.fixture(autouse=True)
def _own_history(monkeypatch, tmp_path_factory):
    """Every validate run is recorded: tests record into a database of their own, never the user's."""
    monkeypatch.setenv("R9700CTL_HISTORY", str(tmp_path_factory.mktemp("history") / "history.db"))


@pytest.fixture(autouse=True, scope="session")
def _every_verdict_names_a_code(_agent_data):
    """Issue 20: a verdict that is not PASS carries a code of data/codes.yaml. Every test that builds
    one checks it: a missing or unknown code fails the test that made the verdict."""
    from r9700ctl.agent import codes, result

    known = codes.catalogue()

    def check(verdict):
        if verdict.code not in known:
            what = f"unknown code {verdict.code!r}" if verdict.code else "no code"
            raise ValueError(f"{verdict.id} {verdict.subject} {verdict.status}: {what} (data/codes.yaml)")

    saved = result.code_check
    result.code_check = check
    yield
    result.code_check = saved
