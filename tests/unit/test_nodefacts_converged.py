"""Preflight's node call also makes the converged step's check when asked (one round trip per node):
the script preflight sends on stdin carries r9700ctl/agent/converged.py and answers under
"converged"; without the argument it is left out, as doctor's calls have it."""

from __future__ import annotations

import json
import subprocess
import sys

from r9700ctl import agentpack
from r9700ctl.agent import converged, nodefacts

MANAGED = {"files": ["/etc/r9700ctl-test-absent.conf"]}


def facts_of(args: dict) -> dict:
    command, script = agentpack.stdin_invocation("r9700ctl.agent.nodefacts", args, python=sys.executable)
    done = subprocess.run(command, shell=True, input=script, capture_output=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_asked_for_the_converged_check_the_facts_carry_its_answer():
    facts = facts_of({"converged": {"mode": "check", "managed": MANAGED}})
    answer = facts["converged"]
    # This machine has no provision record: the check's own answer, with the reason it gives.
    assert answer["recorded_key"] is None and answer["reason"] == "no complete provision recorded", answer
    assert facts["os"]["key"], "the facts are still gathered"


def test_not_asked_the_facts_have_no_converged_answer():
    assert "converged" not in facts_of({})


def test_a_crash_of_the_check_is_its_own_error_and_leaves_the_facts_standing(monkeypatch):
    """A record that is JSON but not an object made the check raise AttributeError: preflight's
    facts must still come back, with the check's failure under "converged"."""

    def crash(args):
        raise AttributeError("'list' object has no attribute 'get'")

    monkeypatch.setattr(converged, "check", crash)
    assert nodefacts.converged_check({"mode": "check", "managed": MANAGED}) == {
        "error": "AttributeError: 'list' object has no attribute 'get'"
    }
