"""Phase 4's plan and judge: the agent's all-reduce sweep across each pair of nodes, then the cluster.

Steps (each one torchrun rendezvous, r9700ctl/agent/cluster/collective.py), as the issue orders them:
every pair of nodes in the round-robin rounds of phase 2 (plan.rounds: n-1 rounds of disjoint
pairs cover every pair) with one rank per node, the same rounds with every GPU of each node where
there are several, then the whole cluster. Every pair meets, so isolation (isolation.py) names a
node or a link from the pairs alone. One wall clock covers the phase (wall_clock_s); on the node each
step's deadline is its share of what is left of it (agent/cluster/collective.py).

Bus bandwidth (busbw = S/t x 2(n-1)/n, nccl-tests doc/PERFORMANCE.md) is comparable with the
bottleneck link, so the expected figure is the network phase's measure of that link: the pair's, or
the slowest pair's for the whole cluster.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from r9700ctl.agent.kernels.specs import AllReduceSpec
from r9700ctl.agent.result import FAIL, INCONCLUSIVE, CheckResult
from r9700ctl.cluster.limits import ClusterLimits
from r9700ctl.cluster.plan import RENDEZVOUS_PORT, pair_subject, rounds
from r9700ctl.cluster.verdicts import floor_verdict, stopped, verdict

MiB = 1 << 20
# On GPUs the range, 1 MiB to 1 GiB (large sizes are bandwidth-bound: the figure judged).
GPU_SWEEP = AllReduceSpec(sizes_bytes=tuple(s * MiB for s in (1, 16, 256, 1024)), windows=3, warmup=2)
# On CPUs (gloo; the lab) small sizes and few calls: a 500 Mbit/s link moves 8 MiB in about 140 ms.
CPU_SWEEP = AllReduceSpec(
    sizes_bytes=(1 * MiB, 8 * MiB), dtype="fp32", windows=3, warmup=1, calls_per_window=3
)
JOIN_TIMEOUT_S = 300  # a node early for the cluster step waits for the pairs still running
# What one step may take on a node (torchrun importing torch, the rendezvous, the sweep): the phase's
# wall clock is the join time plus this per step of the busiest node.
STEP_BUDGET_S = 120


def sweep_of(gpus: int) -> dict[str, Any]:
    spec = GPU_SWEEP if gpus > 0 else CPU_SWEEP
    return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(spec).items()}


def schedule(nodes: list[str], gpus: int, run_id: str) -> list[dict[str, Any]]:
    """Phase 4's steps: every pair, round by round (the rounds of phase 2), then the cluster (with
    two nodes the cluster is their pair, already measured)."""
    pairs = [pair for each_round in rounds(nodes) for pair in each_round]
    return steps_for(pairs, nodes, gpus, run_id, with_cluster=len(nodes) > 2)


def wall_clock_s(steps: list[dict[str, Any]]) -> float:
    """The phase's wall clock: the join time and a step's budget for each step of the busiest node
    (the nodes run their steps one after another; the pairs of a round at once)."""
    per_node: dict[str, int] = {}
    for step in steps:
        for node in step["members"]:
            per_node[node] = per_node.get(node, 0) + 1
    return JOIN_TIMEOUT_S + STEP_BUDGET_S * max(per_node.values(), default=0)


def steps_for(
    pairs: list[tuple[str, str]], nodes: list[str], gpus: int, run_id: str, with_cluster: bool
) -> list[dict[str, Any]]:
    """Every step in the order each node runs them: pairs (1 rank per node), pairs (all GPUs), cluster."""
    steps = []
    sweep = sweep_of(gpus)
    for label, nproc in (("1", 1), ("all", gpus)) if gpus > 1 else (("1", 1),):
        for a, b in pairs:
            steps.append(
                {
                    "name": f"{pair_subject(a, b)} x{label}",
                    "members": [a, b],
                    "nproc_per_node": nproc,
                    "sweep": sweep,
                }
            )
    if with_cluster:
        steps.append(
            {
                "name": f"cluster x{'all' if gpus > 1 else '1'}",
                "members": nodes,
                "nproc_per_node": max(1, gpus),
                "sweep": sweep,
            }
        )
    for index, step in enumerate(steps):
        step["run_id"] = f"{run_id}-{index}"
        # A store port per step: a node done with its pair goes on to the cluster step while its
        # next step's head may still host a pair's store; on one port it would join that store and
        # fall with it when the pair ends (found in the lab with three nodes).
        step["port"] = RENDEZVOUS_PORT + 1 + index
    return steps


def plans(
    steps: list[dict[str, Any]], addresses: dict[str, str], timeout_s: float
) -> dict[str, dict[str, Any]]:
    """Each node's plan: the steps it is a member of, each with its head (the first member)."""
    out: dict[str, dict[str, Any]] = {}
    for node, address in addresses.items():
        mine = []
        for step in steps:
            if node not in step["members"]:
                continue
            head = step["members"][0]
            mine.append(
                {**step, "nnodes": len(step["members"]), "head": head, "head_address": addresses[head]}
            )
        out[node] = {
            "node": node,
            "address": address,
            "port": RENDEZVOUS_PORT,
            "join_timeout_s": JOIN_TIMEOUT_S,
            "timeout_s": timeout_s,
            "steps": mine,
        }
    return out


def step_results(documents: dict[str, dict[str, Any] | None]) -> dict[str, dict[str, Any]]:
    """step name -> what its head member saw (the sweep's figures are the same on every rank)."""
    found: dict[str, dict[str, Any]] = {}
    for node, document in sorted(documents.items()):
        for step in (document or {}).get("steps") or []:
            name = step["step"]
            if name not in found or (not found[name].get("ranks") and step.get("ranks")):
                found[name] = {**step, "reported_by": node}
    return found


def judge_step(
    name: str,
    members: list[str],
    seen: dict[str, Any] | None,
    network_gbs: float | None,
    limits: ClusterLimits,
) -> CheckResult:
    subject = pair_subject(*members) if len(members) == 2 else "cluster"
    check = "cluster.collective.pair" if len(members) == 2 else "cluster.collective.cluster"
    if seen is None:
        return verdict(check, subject, FAIL, code="CLUSTER_UNREACHABLE", said=f"{name}: no member reported")
    ranks = seen.get("ranks") or []
    torchrun = seen.get("torchrun") or {}
    evidence: dict[str, Any] = {"step": name, "tail": (torchrun.get("tail") or [])[-10:]}
    failed = next((r for r in ranks if r.get("error")), None)
    sweep = next((r.get("sweep") for r in ranks if r.get("sweep")), None)
    if sweep is None:
        if torchrun.get("timed_out") and failed is None:  # killed at its share of the wall clock
            code, why = "CLUSTER_PHASE_TIMEOUT", stopped(torchrun)
        else:
            why = failed["error"] if failed else f"exit {torchrun.get('rc')}"
            code = (
                "CLUSTER_RENDEZVOUS_FAILED"
                if not ranks or "world_size" not in ranks[0]
                else "CLUSTER_COLLECTIVE_TIMEOUT"
            )
        return verdict(check, subject, FAIL, code=code, said=f"{name}: {str(why)[:300]}", evidence=evidence)
    rows = sweep.get("sizes") or []
    evidence.update(sizes=rows, backend=sweep.get("backend"), world_size=sweep.get("world_size"))
    wrong = int(sweep.get("wrong_total") or 0)
    if wrong:
        return verdict(
            check,
            subject,
            FAIL,
            code="CLUSTER_WRONG_RESULT",
            value=wrong,
            unit="elements",
            said=f"{name}: {wrong} element(s) wrong",
            evidence=evidence,
        )
    largest = max(rows, key=lambda r: r.get("size_bytes") or 0) if rows else {}
    busbw = largest.get("busbw_gbs")
    common = {
        "metric": "busbw",
        "value": round(float(busbw), 4) if busbw else None,
        "unit": "GB/s",
        "evidence": evidence,
    }
    size = f"{(largest.get('size_bytes') or 0) / MiB:g} MiB"
    if not busbw or network_gbs is None:
        return verdict(
            check,
            subject,
            INCONCLUSIVE,
            code="CLUSTER_LINE_RATE_UNKNOWN",
            said=f"{name}: busbw {busbw} GB/s at {size}; no network figure to hold it to",
            **common,
        )
    evidence["network_gbs"] = network_gbs
    return floor_verdict(
        check,
        subject,
        float(busbw),
        network_gbs,
        (limits.busbw_warn_fraction_of_network, limits.busbw_fail_fraction_of_network),
        code="CLUSTER_BUSBW_LOW",
        said=f"{name}: busbw {float(busbw):.4g} GB/s at {size}",
        of=f"the network phase's {network_gbs:.4g} GB/s",
        fraction_key="fraction_of_network",
        **common,
    )
