"""Each lab node presents one R9700 machine; `r9700ctl validate` judges it like a real server.

One lab: node1 healthy, then one node per planted fault (`lab up --fault NAME`, documented in
r9700ctl/lab/machine.py FAULTS). The agent runs on every node through Ansible at `--level config`
(lab nodes have no torch); each fault must be flagged by exactly its check, with its hint, and
nothing else flagged anywhere.
"""

from __future__ import annotations

import json
import re
import subprocess

import pytest
from child_process import r9700ctl

from r9700ctl.lab import NodeOptions, machine

pytestmark = pytest.mark.timeout(600)
FAULTS = list(machine.FAULTS)


@pytest.fixture(scope="module")
def fleet(make_lab_module, tmp_path_factory):
    """(lab, the validate-fleet JSON document, the CLI's stdout) of node1 healthy + one node per fault."""
    options = {f"node{i}": NodeOptions(fault=name) for i, name in enumerate(FAULTS, start=2)}
    lab = make_lab_module(nodes=len(FAULTS) + 1, gpus=4, node_options=options)
    home = tmp_path_factory.mktemp("faults")
    out = home / "fleet.json"
    done = r9700ctl("validate", str(lab.inventory), "--level", "config", "--json", str(out),
                    home=home, history_in_home=True, columns=200, timeout=500)  # fmt: skip
    assert out.is_file(), done.stdout + done.stderr
    return lab, json.loads(out.read_text()), done


def flagged(report: dict) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for result in report["results"]:
        if result["status"] not in ("PASS", "SKIP"):
            found.setdefault(result["id"], set()).add(result["status"])
    return found


def nodes(document: dict) -> dict[str, dict]:
    return {n["host"]: n["report"] for n in document["nodes"]}


def test_a_healthy_lab_node_passes_validate_config(fleet):
    _lab, document, _done = fleet
    report = nodes(document)["node1"]
    assert flagged(report) == {}, report["results"]
    assert report["status"] == "PASS"
    assert len(report["gpus"]) == 4 and {g["gfx_target"] for g in report["gpus"]} == {"gfx1201"}


@pytest.mark.parametrize("position", range(len(FAULTS)), ids=FAULTS)
def test_each_planted_fault_is_found_by_its_check_and_nothing_else(fleet, position):
    _lab, document, _done = fleet
    fault = machine.FAULTS[FAULTS[position]]
    report = nodes(document)[f"node{position + 2}"]
    own = [r for r in report["results"] if r["id"] == fault.check]
    if fault.status == "noted":  # an idle link is judged under load: noted at config
        assert flagged(report) == {}, report["results"]
        assert any("Gen4 x8" in (r["hint"] or "") for r in own), own
    else:
        assert flagged(report) == {fault.check: {fault.status}}, report["results"]
        assert all(r["hint"] for r in own if r["status"] == fault.status)


def test_the_cli_table_names_each_faulty_nodes_worst_finding_and_exits_with_the_worst(fleet):
    _lab, document, done = fleet
    assert done.returncode == 2 == document["exit_code"], done.stdout + done.stderr
    rows = {words[0]: line for line in done.stdout.splitlines() if (words := line.split())}
    for position, name in enumerate(FAULTS, start=2):
        fault = machine.FAULTS[name]
        if fault.status != "noted":
            assert fault.check in rows[f"node{position}"], done.stdout
    assert "Traceback" not in done.stdout + done.stderr


def test_the_p2p_decision_reads_each_nodes_machine(fleet, tmp_path):
    """r9700_p2p auto as preflight decides it (through doctor: nothing changes on the nodes): off on
    every 4x R9700 node for the known host hang (issue 22 item 20), the healthy node's hardware
    allowing it, the small-BAR node's naming the BAR, the IOMMU and the ACS ones theirs."""
    lab, _document, _done = fleet
    out = tmp_path / "doctor.json"
    done = r9700ctl("doctor", str(lab.inventory), "--json", str(out), columns=200, timeout=400)
    assert out.is_file(), done.stdout + done.stderr
    decisions = {
        host["host"]: next(c["detail"] for c in host["checks"] if c["id"] == "preflight.p2p.policy")
        for host in json.loads(out.read_text())["hosts"]
    }
    node_of = {name: f"node{i}" for i, name in enumerate(FAULTS, start=2)}
    assert decisions["node1"].startswith("PCIe peer-to-peer off: known issue r9700-p2p-host-hang ("), (
        decisions
    )
    assert decisions["node1"].endswith("; BAR, IOMMU and ACS would allow it"), decisions
    assert "BAR 256 MiB < VRAM 29.9 GiB" in decisions[node_of["small-bar"]], decisions  # 30576 MiB
    assert "the IOMMU translates its DMA" in decisions[node_of["iommu-translated"]], decisions
    assert "redirects peer traffic" in decisions[node_of["acs-redirect"]], decisions
    # Issue 22 item 19: doctor reads the node's own /etc/environment and refuses the article's override.
    own = {
        host["host"]: [c for c in host["checks"] if c["id"] == "preflight.env.node_sources"]
        for host in json.loads(out.read_text())["hosts"]
    }
    assert [c["status"] for c in own[node_of["gfx942-override"]]] == ["FAIL"], own
    assert re.match(
        r"/etc/environment:\d+ sets HSA_OVERRIDE_GFX_VERSION=9.4.2: cross-family",
        own[node_of["gfx942-override"]][0]["detail"],
    )
    assert [c["status"] for c in own["node1"]] == ["PASS"], own


def test_provision_refuses_the_node_whose_etc_environment_carries_the_article_override(fleet, tmp_path):
    """Issue 22 item 19: the gfx942-override node was provisioned without a word (preflight read only
    the inventory); now its preflight refuses it, naming /etc/environment and the line, and nothing
    is changed (only a later validate found it before)."""
    lab, _document, _done = fleet
    node = f"node{FAULTS.index('gfx942-override') + 2}"
    report = tmp_path / "provision.json"
    done = r9700ctl("provision", str(lab.inventory), "--limit", node, "--json", str(report),
                    home=tmp_path, columns=200, timeout=500)  # fmt: skip
    assert done.returncode == 2, done.stdout + done.stderr
    host = {h["host"]: h for h in json.loads(report.read_text())["hosts"]}[node]
    message = host["failed_tasks"][0]["message"]
    assert re.match(
        rf"{node}: preflight refused, nothing changed: /etc/environment:\d+ sets "
        r"HSA_OVERRIDE_GFX_VERSION=9.4.2: cross-family HSA override refused \(gfx942; these GPUs: gfx1201\)",
        message,
    ), message
    assert "r9700_env_comment_out_conflicts: true" in message
    assert lab.ssh(node, "test -e /etc/apt/sources.list.d/rocm.sources").returncode != 0  # nothing changed

    # The opt-in: preflight warns, r9700_env comments the line out and keeps the old file; a second
    # run changes nothing (only preflight and r9700_env run: --tags r9700_env).
    def opted_in(name: str) -> tuple[subprocess.CompletedProcess, dict]:
        out = tmp_path / f"{name}.json"
        run = r9700ctl("provision", str(lab.inventory), "--limit", node, "--tags", "r9700_env",
                       "-e", '{"r9700_env_comment_out_conflicts": true}', "--json", str(out),
                       home=tmp_path, columns=200, timeout=500)  # fmt: skip
        return run, {h["host"]: h for h in json.loads(out.read_text())["hosts"]}[node]

    first, _ = opted_in("first")
    assert first.returncode in (0, 1), first.stdout + first.stderr
    assert "provision comments it out (r9700_env_comment_out_conflicts)" in first.stdout + first.stderr
    lines = lab.ssh(node, "cat /etc/environment").stdout.splitlines()
    assert [line for line in lines if "HSA_OVERRIDE_GFX_VERSION" in line] == [
        "# r9700ctl commented this out (it breaks the GPUs; r9700_env_comment_out_conflicts): "
        "HSA_OVERRIDE_GFX_VERSION=9.4.2"
    ]
    backup = lab.ssh(node, "cat /etc/environment.*~")
    assert backup.returncode == 0 and "HSA_OVERRIDE_GFX_VERSION=9.4.2" in backup.stdout.splitlines()
    again, entry = opted_in("again")
    assert again.returncode == 0 and entry["changed"] == 0, again.stdout + again.stderr
