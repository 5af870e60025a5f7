"""Arithmetic of the measurements, without torch: bus bandwidth, scaling, latency figures.

The checks import this module in the agent's own process (which never imports torch); the
kernels use it in their children. Pure functions, tested on the CPU (tests/unit/test_kernels_*).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from r9700ctl.agent import stats

GB = 1e9  # bandwidths in GB/s, base 10 (nccl-tests, nvbandwidth)


def gbps(nbytes: float, seconds: float) -> float:
    """Bandwidth in GB/s (base 10) of `nbytes` moved in `seconds`."""
    if seconds <= 0:
        raise ValueError(f"non-positive duration {seconds!r}")
    return nbytes / seconds / GB


def bus_factor(world_size: int) -> float:
    """All-reduce bus bandwidth factor 2(n-1)/n (nccl-tests PERFORMANCE.md)."""
    if world_size < 1:
        raise ValueError("world size must be >= 1")
    return 2.0 * (world_size - 1) / world_size


def algbw_gbs(size_bytes: int, seconds: float) -> float:
    return gbps(size_bytes, seconds)


def busbw_gbs(size_bytes: int, seconds: float, world_size: int) -> float:
    return algbw_gbs(size_bytes, seconds) * bus_factor(world_size)


def world_sizes(gpu_count: int) -> list[int]:
    """1, 2, 4, ... up to the GPU count, and the count itself when it is not a power of two."""
    sizes, n = [], 1
    while n <= gpu_count:
        sizes.append(n)
        n *= 2
    if gpu_count >= 1 and sizes[-1] != gpu_count:
        sizes.append(gpu_count)
    return sizes


def scaling_table(step_ms: Mapping[int, float], comm_share: Mapping[int, float] | None = None) -> list[dict]:
    """Rows of n, step time, speedup and efficiency against n = 1 (which must be present)."""
    if 1 not in step_ms:
        raise ValueError("scaling needs the one-GPU step time as its reference")
    base = step_ms[1]
    rows = []
    for n in sorted(step_ms):
        speedup = base / step_ms[n]
        row = {"n": n, "step_ms": step_ms[n], "speedup": speedup, "efficiency": speedup / n}
        if comm_share is not None and n in comm_share:
            row["comm_share"] = comm_share[n]
        rows.append(row)
    return rows


def latency_stats(seconds: Sequence[float]) -> dict[str, float]:
    """p50/p95/p99 (ms), tail ratio, CV and drift of one repeat's per-iteration times."""
    if len(seconds) < 10:
        raise ValueError(f"{len(seconds)} iterations: need >= 10 for percentiles and drift")
    ms = [s * 1e3 for s in seconds]
    p50 = stats.percentile(ms, 50)
    return {
        "p50_ms": p50,
        "p95_ms": stats.percentile(ms, 95),
        "p99_ms": stats.percentile(ms, 99),
        "max_ms": max(ms),
        "tail_ratio": stats.percentile(ms, 99) / p50 if p50 > 0 else float("inf"),
        "cv": stats.cv(ms),
        "drift": stats.drift(ms, 0.1),
        "iterations": len(ms),
    }


def median_of_repeats(repeats: Sequence[dict[str, float]]) -> dict[str, float]:
    """Each statistic's median over the repeats (the figures a report shows)."""
    keys = [k for k in repeats[0] if k != "iterations"]
    out = {k: stats.median(r[k] for r in repeats) for k in keys}
    out["iterations"] = repeats[0]["iterations"]
    return out
