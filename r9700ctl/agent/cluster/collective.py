"""Phase 4 (pairwise collective) on one node: the agent's all-reduce sweep across nodes via torchrun.

One plan per step (a pair of nodes, or the whole cluster); steps run one after the other, each with
its own rendezvous id, so a node only joins the steps it is in.
"""

from __future__ import annotations

import json
from typing import Any

from r9700ctl.agent.cluster import smoke


def run(plan: dict[str, Any]) -> dict[str, Any]:
    steps = []
    for step in plan.get("steps") or []:
        merged = {**plan, **step}
        sweep = json.dumps(step["sweep"])
        steps.append({"step": step["name"], **smoke.run(merged, {"R9700_CLUSTER_SWEEP": sweep})})
    return {"node": plan.get("node"), "steps": steps}
