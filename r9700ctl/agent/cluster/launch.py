"""torchrun on this node for phases 3 and 4: one c10d rendezvous across the nodes, then a worker module.

    torchrun --nnodes N --nproc-per-node P --rdzv-backend c10d --rdzv-endpoint HEAD:PORT
             --rdzv-id RUN --local-addr OWN --max-restarts 0 --rdzv-conf is_host=...,join_timeout=T
             -m WORKER OUT_PREFIX

Two traps of c10d's rendezvous, found in the research lab and in torch's source: without
`is_host` no node hosts the store when the endpoint is an address of a secondary NIC (torch's
_matches_machine_hostname compares the endpoint with the host name and its addresses), and without
`--local-addr` peers are told to reach a node at `socket.getfqdn()`, which can be localhost
(torch/distributed/elastic/rendezvous/dynamic_rendezvous.py, utils.py). So the first node is told it
hosts the store and every node names its own cluster address.

The environment of the job is the node's own: the list r9700_env wrote to
/etc/environment.d/90-r9700.conf (in the image, r9700-run already passed it), so a missing or
wrong NCCL_SOCKET_IFNAME shows here as it would in a user's job; NCCL_DEBUG=INFO is added so the
transport and interface RCCL took are on record.
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

from r9700ctl.agent.cluster import processes

ENVIRONMENT_FILE = "/etc/environment.d/90-r9700.conf"  # r9700_env (roles/r9700_env/vars/Debian.yml)
TAIL_LINES = 60
PIPE_GRACE_S = 5.0  # after the kill, how long the output pipe may take to close


def node_environment(path: str = ENVIRONMENT_FILE) -> dict[str, str]:
    """NAME=value lines of r9700_env's environment.d file (values are literal there by its rule)."""
    found = {}
    try:
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                name, sep, value = line.strip().partition("=")
                if sep and name and not name.startswith("#"):
                    found[name] = value
    except OSError:
        pass
    return found


def argv(plan: dict[str, Any], module: str, out_prefix: str) -> list[str]:
    head = plan["node"] == plan["head"]
    conf = f"is_host={1 if head else 0},join_timeout={int(plan['join_timeout_s'])}"
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nnodes",
        str(plan["nnodes"]),
        "--nproc-per-node",
        str(plan.get("nproc_per_node") or 1),
        "--rdzv-backend",
        "c10d",
        "--rdzv-endpoint",
        f"{plan['head_address']}:{plan['port']}",
        "--rdzv-id",
        str(plan["run_id"]),
        "--local-addr",
        str(plan["address"]),
        "--max-restarts",
        "0",
        "--rdzv-conf",
        conf,
        "-m",
        module,
        out_prefix,
    ]


def run(
    plan: dict[str, Any], module: str, out_prefix: str, extra_env: dict[str, str] | None = None
) -> dict[str, Any]:
    """Run torchrun until it ends or until plan["timeout_s"] (this step's share of the phase's wall
    clock) has passed; then torchrun, its workers and whatever they started are killed by their
    pids (processes.kill_tree), as is anything left in torchrun's session after a normal end."""
    env = dict(os.environ)
    applied = node_environment()  # in the image there is no such file: r9700-run passed the list
    env.update(applied)
    env.update(extra_env or {})
    env.setdefault("NCCL_DEBUG", "INFO")
    env.setdefault("NCCL_DEBUG_SUBSYS", "INIT,NET")
    command = argv(plan, module, out_prefix)
    timeout_s = max(0.0, float(plan["timeout_s"]))
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, start_new_session=True
    )
    processes.LIVE.add(process.pid)
    killed: set[int] = set()
    try:
        try:
            output, _ = process.communicate(timeout=timeout_s)
            timed_out = False
        except subprocess.TimeoutExpired:
            timed_out = True
            killed = processes.kill_tree(process.pid)
            try:
                output, _ = process.communicate(timeout=PIPE_GRACE_S)
            except subprocess.TimeoutExpired:  # a writer escaped the kill: stop reading
                process.kill()
                output = ""
        killed |= processes.kill_tree(process.pid, root_alive=False)
    finally:
        processes.LIVE.discard(process.pid)
    lines = (output or "").splitlines()
    return {
        "argv": command,
        "rc": process.returncode,
        "timed_out": timed_out,
        "deadline_s": round(timeout_s, 1),
        "killed": len(killed),
        "environment": {
            k: v for k, v in applied.items() if k.startswith(("NCCL_", "GLOO_", "RCCL_", "HSA_"))
        },
        "nccl_lines": [
            line for line in lines if " NCCL INFO " in line and ("Using" in line or "NET/" in line)
        ][:40],
        "tail": lines[-TAIL_LINES:],
    }
