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


def with_multi_gpu_figures(
    report: dict[str, Any], slow_pair: tuple[int, int] | None = None
) -> dict[str, Any]:
    """SYNTHESISED on top of a recorded report (a single H200 measured no pair): P2P results per
    ordered pair, an all-reduce size sweep and tensor-parallel scaling, in the agent's result
    shapes, so the report's P2P heatmap, size and scaling charts have something to draw.
    `slow_pair` gets a third of the others' P2P bandwidth."""
    out = copy.deepcopy(report)
    gpus = [g["index"] for g in out["gpus"]]
    kept = [
        r for r in out["results"] if r["id"] not in ("p2p.bandwidth", "collective.allreduce", "scaling.tp")
    ]
    extra = []
    for src in gpus:
        for dst in gpus:
            if src == dst:
                continue
            value = 51.0 + 0.3 * src - 0.2 * dst
            if slow_pair and (src, dst) in (slow_pair, slow_pair[::-1]):
                value /= 3
            status = "PASS" if value > 30 else "WARN"
            extra.append(
                {
                    "id": "p2p.bandwidth",
                    "subject": f"gpu{src}->gpu{dst}",
                    "status": status,
                    "metric": "p2p_unidirectional_bandwidth",
                    "value": round(value, 2),
                    "unit": "GB/s",
                    "threshold": ">= 20.2 GB/s; >= 0.85 x node median",
                    "hint": ""
                    if status == "PASS"
                    else "PEER: this pair is slower than the node's other pairs",
                    "evidence": {"size_bytes": 256 * 1024 * 1024, "unidirectional_windows_gbs": [value] * 5},
                }
            )
    sizes = [1, 4, 16, 64, 256, 1024]
    rows = [
        {
            "size_bytes": s << 20,
            "busbw_gbs": round(38.0 * s / (s + 12), 2),
            "windows_busbw_gbs": [38.0 * s / (s + 12)] * 5,
        }
        for s in sizes
    ]
    extra.append(
        {
            "id": "collective.allreduce",
            "subject": "node",
            "status": "PASS",
            "metric": "busbw",
            "value": rows[-1]["busbw_gbs"],
            "unit": "GB/s",
            "threshold": ">= 0.5 GB/s",
            "hint": "",
            "evidence": {"sizes": rows},
        }
    )
    for n, speedup in ((2, 1.86), (4, 3.3)):
        if n > len(gpus):
            continue
        extra.append(
            {
                "id": "scaling.tp",
                "subject": f"n={n} p2p_on",
                "status": "PASS",
                "metric": "speedup",
                "value": speedup,
                "unit": "x",
                "threshold": ">= 0.9 x expected 3.4x (FAIL below)" if n == 4 else "report only",
                "hint": "",
                "evidence": {
                    "expected_speedup": 3.4 if n == 4 else None,
                    "table": [{"n": 1, "step_ms": 10.0}, {"n": n, "step_ms": 10.0 / speedup}],
                    "repeats": [{"step_ms": 10.0 / speedup * f} for f in (0.99, 1.0, 1.01)],
                },
            }
        )
    out["results"] = kept + extra
    return out
