"""Phase 4 (pairwise collective) on one node: the agent's all-reduce sweep across nodes via torchrun.

One plan per step (a pair of nodes, or the whole cluster); steps run one after the other, each with
its own rendezvous id, so a node only joins the steps it is in.

The phase has one wall clock (plan["timeout_s"], counted from the start of this program) and each
step's deadline is its share of what is left of it: the time left divided by the steps left. A step
that hangs is killed at its deadline with every process it started (launch.run), and the steps
after it still get their share, so the phase ends within its wall clock and the role's outer
`timeout` never has to stop it half-way.
"""

from __future__ import annotations

import json
import time
from typing import Any

from r9700ctl.agent.cluster import smoke

# A share shorter than this is not started (a torchrun cannot even import torch in less), nor
# is any step after it: each is recorded as stopped by the phase's wall clock.
MIN_STEP_S = 5.0


def deadlines(left_s: float, steps_left: int, join_timeout_s: float) -> tuple[float, int]:
    """(this step's deadline in seconds from now, its rendezvous join timeout): an equal share of
    what is left of the phase's wall clock; the join cannot outlast the step."""
    share = max(0.0, left_s) / max(1, steps_left)
    return share, max(1, int(min(join_timeout_s, share)))


def run(plan: dict[str, Any], clock: Any = time.monotonic) -> dict[str, Any]:
    ends = clock() + float(plan["timeout_s"])
    mine = plan.get("steps") or []
    steps = []
    for index, step in enumerate(mine):
        share, join = deadlines(ends - clock(), len(mine) - index, float(plan["join_timeout_s"]))
        if share < MIN_STEP_S:
            steps += [{"step": later["name"], **not_started(share)} for later in mine[index:]]
            break
        merged = {**plan, **step, "timeout_s": share, "join_timeout_s": join}
        sweep = json.dumps(step["sweep"])
        steps.append({"step": step["name"], **smoke.run(merged, {"R9700_CLUSTER_SWEEP": sweep})})
    return {"node": plan.get("node"), "steps": steps}


def not_started(share: float) -> dict[str, Any]:
    return {
        "torchrun": {"rc": None, "timed_out": True, "not_started": True, "deadline_s": round(share, 1)},
        "ranks": [],
    }
