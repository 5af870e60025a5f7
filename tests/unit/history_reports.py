"""Builders of validate reports for the history tests, from the agent's real recorded reports.

bench/results/2026-12-02-h200/*.json are `r9700ctl validate --local` reports recorded on one
NVIDIA H200 (docs/benchmarks.md). `four_gpus` turns one into a 4-GPU node by repeating its GPU
and per-GPU results (distinct PCI addresses and serials), `slow_gpu` plants a slow card by
scaling one GPU's timed windows: the edited copies issue 12 asks for.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
H200 = REPO / "bench" / "results" / "2026-12-02-h200"
WINDOW_KEYS = ("windows_gbs", "windows_tflops")


def recorded(name: str = "standard.json") -> dict[str, Any]:
    return json.loads((H200 / name).read_text())


def four_gpus(report: dict[str, Any], node: str = "node1") -> dict[str, Any]:
    """The report as if the node had 4 such GPUs, each with its own PCI address and serial."""
    out = copy.deepcopy(report)
    out["node"] = node
    template = report["gpus"][0]
    out["gpus"] = []
    for index in range(4):
        gpu = copy.deepcopy(template)
        gpu["index"] = index
        gpu["pci_address"] = f"0000:{0x11 + index:02x}:00.0"
        gpu["serial"] = f"165052200{index:04d}"
        out["gpus"].append(gpu)
    results = []
    for result in report["results"]:
        if result["subject"] == "gpu0":
            for index in range(4):
                copied = copy.deepcopy(result)
                copied["subject"] = f"gpu{index}"
                results.append(copied)
        else:
            results.append(copy.deepcopy(result))
    out["results"] = results
    return out


def slow_gpu(report: dict[str, Any], subject: str, factor: float, check_prefix: str = "") -> dict[str, Any]:
    """A copy where every timed window (and the median) of `subject`'s figures is scaled by factor."""
    out = copy.deepcopy(report)
    for result in out["results"]:
        if result["subject"] != subject or not result["id"].startswith(check_prefix):
            continue
        evidence = result.get("evidence") or {}
        for key in WINDOW_KEYS:
            if isinstance(evidence.get(key), list):
                evidence[key] = [w * factor for w in evidence[key]]
                result["value"] = result["value"] * factor
    return out


def moved(report: dict[str, Any], order: list[int]) -> dict[str, Any]:
    """The same cards enumerated in another order: torch index i is now the card that was order[i]."""
    out = copy.deepcopy(report)
    old = {g["index"]: g for g in report["gpus"]}
    out["gpus"] = []
    for new_index, old_index in enumerate(order):
        gpu = copy.deepcopy(old[old_index])
        gpu["index"] = new_index
        out["gpus"].append(gpu)
    renumber = {f"gpu{old_index}": f"gpu{new_index}" for new_index, old_index in enumerate(order)}
    for result in out["results"]:
        result["subject"] = re.sub(
            r"gpu\d+", lambda m: renumber.get(m.group(0), m.group(0)), result["subject"]
        )
    return out


def fleet(
    reports: dict[str, dict[str, Any]], started: str = "2026-12-03T10:00:00+00:00", level: str = "standard"
) -> dict[str, Any]:
    """A validate-fleet document around these node reports (as `validate INVENTORY --json` writes)."""
    from r9700ctl.agent.result import exit_code_for, worst

    statuses = [r["status"] for r in reports.values()]
    return {
        "schema": "r9700ctl.validate-fleet/1",
        "toolkit_version": "0.1.0",
        "level": level,
        "started": started,
        "status": worst(statuses),
        "exit_code": exit_code_for(statuses),
        "nodes": [
            {"host": host, "status": r["status"], "agent_rc": r["exit_code"], "error": "", "report": r}
            for host, r in reports.items()
        ],
        "fleet": {"results": [], "compared_metrics": 0, "note": "no fleet comparison: 2 node(s)"},
        "notes": [],
    }
