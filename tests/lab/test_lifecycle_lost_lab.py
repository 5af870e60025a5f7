"""A node lost mid-upgrade: the rollout stops, names the lost node's state and the untouched nodes.

Two fresh lab nodes, an upgrade in batches of one. The drain hook (a command run on the
controller per node, as an operator's `scontrol update ... state=drain` is) kills node1's PID 1,
its sshd, once the rollout has begun: the move then finds node1 unreachable. What breaks if this
fails: a rollout that goes on to the next batch while a node is in an unknown state, or a
summary that calls the lost node failed or upgraded, or forgets the nodes it never touched.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from child_process import r9700ctl

pytestmark = pytest.mark.timeout(1800)


def test_a_node_lost_mid_upgrade_stops_the_rollout_with_its_state_named(
    make_lab: Any, tmp_path: Path
) -> None:
    lab = make_lab(nodes=2, gpus=1)
    pid = lab.node_pid("node1")
    assert pid
    drain = f"sh -c 'if [ {{node}} = node1 ]; then kill -9 {pid}; fi'"
    report = tmp_path / "upgrade.json"
    args = ("--rocm", "6.4.1", "--serial", "1", "--gate-level", "config", "--drain-cmd", drain)
    done = r9700ctl("upgrade", str(lab.inventory), *args, "--json", str(report),
                    home=tmp_path, history_in_home=True, columns=200, timeout=1200)  # fmt: skip
    out = done.stdout + done.stderr
    assert done.returncode == 3, out  # a node was unreachable
    nodes = {n["host"]: n for n in json.loads(report.read_text())["nodes"]}
    assert {h: (n["status"], n["batch"]) for h, n in nodes.items()} == {
        "node1": ("lost", 1),
        "node2": ("untouched", 0),
    }, out
    assert "  lost (unreachable):\n    node1: unreachable during '" in out, out
    assert (
        "its state is unknown (between its old release and 6.4.1); "
        "once it answers, run the same command again" in out
    )
    assert "  untouched: node2" in out, out
    assert "rollout lost node1 mid-way (unreachable): stopped" in out, out
    # node2 was never moved: no state written, no ROCm installed.
    untouched = lab.ssh("node2", "ls /etc/r9700ctl/state.json; dpkg-query -W rocm-core")
    assert untouched.returncode != 0 and "No such file" in untouched.stderr, (
        untouched.stdout + untouched.stderr
    )
