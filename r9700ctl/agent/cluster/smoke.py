"""Phase 3 (rendezvous smoke) on one node: torchrun with one worker, the worker's findings back."""

from __future__ import annotations

import glob
import json
import os
import tempfile
from typing import Any

from r9700ctl.agent.cluster import launch


def collect(prefix: str) -> list[dict[str, Any]]:
    ranks = []
    for path in sorted(glob.glob(f"{prefix}.*.json")):
        try:
            with open(path, encoding="utf-8") as fh:
                ranks.append(json.load(fh))
        except (OSError, ValueError):
            continue
    return ranks


def run(plan: dict[str, Any], extra_env: dict[str, str] | None = None) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="r9700ctl-cluster-") as scratch:
        prefix = os.path.join(scratch, "rank")
        torchrun = launch.run(plan, "r9700ctl.agent.cluster.worker", prefix, extra_env)
        return {"node": plan.get("node"), "torchrun": torchrun, "ranks": collect(prefix)}
