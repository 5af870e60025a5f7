"""Arithmetic of the measurements, without torch: bus bandwidth, scaling, latency statistics.

The checks import this module in the agent's own process (which never imports torch); the
kernels use it in their children. Pure functions, tested on the CPU (tests/unit/test_kernels_*).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence

GB = 1e9  # bandwidths in GB/s, base 10 (nccl-tests, nvbandwidth)
EXPECTATION_MARGIN = 0.9  # FAIL when measured < 0.9 x expected (validation.md C10)


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


def parse_expectations(text: str) -> dict[int, float]:
    """'4:3.4,8:6.1' -> {4: 3.4, 8: 6.1}; raises ValueError naming the bad part."""
    out: dict[int, float] = {}
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        n, sep, value = part.partition(":")
        try:
            if not sep:
                raise ValueError
            gpus, speedup = int(n), float(value)
        except ValueError:
            raise ValueError(f"'{part}' is not GPUS:SPEEDUP (for example 4:3.4)") from None
        if gpus < 2 or speedup <= 0:
            raise ValueError(f"'{part}': GPUS must be >= 2 and SPEEDUP > 0")
        out[gpus] = speedup
    return out


def expectation_verdicts(rows: list[dict], expected: Mapping[int, float], margin: float = EXPECTATION_MARGIN):
    """Per expected n: (status, measured, expected, limit); n not measured gives "not measured"."""
    measured = {row["n"]: row["speedup"] for row in rows}
    out = {}
    for n, want in sorted(expected.items()):
        limit = margin * want
        if n not in measured:
            out[n] = ("not measured", None, want, limit)
        else:
            out[n] = ("FAIL" if measured[n] < limit else "PASS", measured[n], want, limit)
    return out


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile, q in [0, 1]."""
    if not values:
        raise ValueError("percentile of no values")
    ordered = sorted(values)
    k = (len(ordered) - 1) * q
    lo = int(k)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def latency_stats(seconds: Sequence[float]) -> dict[str, float]:
    """p50/p95/p99 (ms), tail ratio, CV and drift of one repeat's per-iteration times."""
    if len(seconds) < 10:
        raise ValueError(f"{len(seconds)} iterations: need >= 10 for percentiles and drift")
    ms = [s * 1e3 for s in seconds]
    tenth = max(1, len(ms) // 10)
    p50 = percentile(ms, 0.50)
    mean = statistics.fmean(ms)
    return {
        "p50_ms": p50,
        "p95_ms": percentile(ms, 0.95),
        "p99_ms": percentile(ms, 0.99),
        "max_ms": max(ms),
        "tail_ratio": percentile(ms, 0.99) / p50 if p50 > 0 else float("inf"),
        "cv": statistics.pstdev(ms) / mean if mean > 0 else 0.0,
        "drift": statistics.median(ms[-tenth:]) / statistics.median(ms[:tenth]),
        "iterations": len(ms),
    }


def median_of_repeats(repeats: Sequence[dict[str, float]]) -> dict[str, float]:
    """Each statistic's median over the repeats (the figures a report shows)."""
    keys = [k for k in repeats[0] if k != "iterations"]
    out = {k: float(statistics.median(r[k] for r in repeats)) for k in keys}
    out["iterations"] = repeats[0]["iterations"]
    return out
