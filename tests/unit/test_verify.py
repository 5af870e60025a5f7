"""`r9700ctl verify`: the shipped testinfra suite run through the CLI, its verdicts and exit codes.

The "nodes" here are this machine over a local connection (it was never provisioned, so
the suite must fail it, naming what is missing) and a port nobody listens on (the suite
must say it could not check, not that the node failed). Lab tests verify provisioned nodes.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from r9700ctl.cli import cli


def invoke(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def test_a_missing_inventory_is_bad_input_and_contacts_nothing(tmp_path):
    """Bad input: one line naming the file and the fix, exit 64 (through the console entry point)."""
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-m", "r9700ctl", "verify", str(tmp_path / "nope.ini")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 64
    assert out.stdout == ""
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "nope.ini" in lines[0]


@pytest.mark.timeout(300)
def test_a_node_that_was_never_provisioned_fails_with_the_missing_record_named(tmp_path):
    """Exit 2 and one line per failed check, each naming host, test and what is wrong."""
    inventory = tmp_path / "inventory.ini"
    inventory.write_text("[r9700_nodes]\nthis-machine ansible_connection=local ansible_host=127.0.0.1\n")
    result = invoke(
        "verify", str(inventory), "-k", "state_file or rocm_source", "--json", str(tmp_path / "v.json")
    )
    assert result.exit_code == 2, result.output
    lines = result.output.splitlines()
    assert lines[1] == "HOST          STATUS  PASSED  FAILED  SKIPPED  ERRORS"
    assert lines[2].startswith("this-machine  FAIL")
    assert any(
        line.startswith("this-machine  FAILED test_state_file_names_a_release_of_the_manifest")
        and "no /etc/r9700ctl/state.json" in line
        and "run `r9700ctl provision` on it first" in line
        for line in lines
    ), result.output
    assert lines[-1].startswith("1 host(s) checked in ") and lines[-1].endswith(
        "0 passed, 1 failed, 0 could not be checked"
    )
    document = json.loads((tmp_path / "v.json").read_text())
    assert document["schema"] == "r9700ctl.verify/1" and document["exit_code"] == 2
    assert {r["status"] for r in document["results"]} == {"failed"}


@pytest.mark.timeout(300)
def test_a_host_that_cannot_be_reached_could_not_be_checked_and_exits_3(tmp_path):
    """Unreachable is not failed: the contract's 3 (could not run), with the host named."""
    inventory = tmp_path / "inventory.ini"
    inventory.write_text(
        "[r9700_nodes]\nghost ansible_host=127.0.0.1 ansible_port=1 "
        "ansible_ssh_common_args='-o ConnectTimeout=5 -o BatchMode=yes'\n"
    )
    result = invoke("verify", str(inventory), "-k", "rocm_source")
    assert result.exit_code == 3, result.output
    assert "ghost  ERROR" in result.output
    assert "ghost  could not check test_rocm_source_points_at_the_resolved_release" in result.output
    assert result.output.splitlines()[-1].endswith("0 passed, 0 failed, 1 could not be checked")


def test_the_suite_ships_where_the_wheel_puts_it():
    """pyproject's force-include maps tests/infra into the package; verify finds it through content_dir."""
    from r9700ctl.verify import suite_dir

    suite = suite_dir()
    assert (suite / "conftest.py").is_file() and (suite / "pytest.ini").is_file()
    assert len(list(Path(suite).glob("test_*.py"))) >= 5
