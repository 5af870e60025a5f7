"""All-reduce bus bandwidth sweep, one process per GPU through torch.distributed (C6).

Read busbw, not algbw (nccl-tests doc/PERFORMANCE.md,
https://github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md):
    algbw = S / t            S = bytes of the buffer each rank reduces, t = time of one call
    busbw = algbw * 2(n-1)/n  each element crosses 2(n-1) of the n links in a ring, so busbw
                              is comparable with the bottleneck link's bandwidth whatever n is.
Sizes are base 2 (MiB), bandwidths base 10 (GB/s).

Timing per size (stas00 all_reduce_bench): warm-up calls apart; in each window the buffer is
refilled outside the timed region, the ranks meet at a barrier, the stream is held by a gate
kernel, `calls` all-reduces are queued between two events; seconds per call are averaged across
ranks (nccl-tests' default) and the median over windows is reported.

Correctness (nccl-tests' #wrong): before timing, rank r fills element i with
(r + 1) * (i % 7 + 1); after one all-reduce every element must equal n(n+1)/2 * (i % 7 + 1)
within the dtype's tolerance. The count of wrong elements is summed over ranks.

On the CPU (gloo backend, the CI path) the same code runs with host timing. `fault` plants a
failure for tests and for proving the check catches one: {"corrupt_rank": r} adds 1000 to one
element of rank r's input; {"stall_rank": r, "stall_s": s} makes rank r sleep before joining;
{"slowdown": f} makes every timed call last about f times as long (a pause of (f - 1) x the
call's time measured before the windows, the same on every rank so pauses do not compound): a
collective f times slower, whatever the machine's speed. The
variable R9700CTL_TEST_ALLREDUCE_SLOWDOWN sets f from outside, for tests that run the whole
collective check twice and need the second run slower (tests/unit/test_agent_baseline.py).
"""

from __future__ import annotations

import os
import time
from typing import Any

import torch
import torch.distributed as dist

from r9700ctl.agent import stats
from r9700ctl.agent.kernels import timing
from r9700ctl.agent.kernels.figures import algbw_gbs, bus_factor, busbw_gbs
from r9700ctl.agent.kernels.specs import AllReduceSpec

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
# Relative tolerance of the correctness check: partial sums are rounded to the dtype on the way.
TOLERANCE = {"bf16": 1.0 / 64, "fp16": 2e-3, "fp32": 1e-5}
PATTERN_PERIOD = 7
# Test-only: a planted slowdown factor for the timed all-reduces (unset in real runs).
PLANTED_SLOWDOWN_ENV = "R9700CTL_TEST_ALLREDUCE_SLOWDOWN"


def calls_for(size_bytes: int) -> int:
    """Calls queued per window: many for small messages (hide launch gaps), few for large ones."""
    if size_bytes <= 64 * timing.MiB:
        return 20
    if size_bytes <= 256 * timing.MiB:
        return 10
    return 5


def rank_device() -> torch.device:
    """The device this rank reduces on: its GPU under nccl, the host under gloo."""
    if dist.is_initialized() and dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _pattern(count: int, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    return (torch.arange(count, device=device) % PATTERN_PERIOD + 1).to(dtype)


def _check(buf: torch.Tensor, name: str, rank: int, world_size: int, fault: dict[str, Any]) -> dict[str, Any]:
    """Fill the pattern, reduce once, count elements off the analytic sum (summed over ranks)."""
    device, dtype = buf.device, buf.dtype
    base = _pattern(buf.numel(), device, dtype)
    buf.copy_(base)
    buf.mul_(rank + 1)
    if fault.get("corrupt_rank") == rank:
        buf[0] += 1000
    dist.all_reduce(buf)
    expected = base.float() * (world_size * (world_size + 1) / 2)
    wrong = ((buf.float() - expected).abs() > TOLERANCE[name] * expected.abs()).sum()
    total = wrong.to(torch.float64)
    dist.all_reduce(total)
    return {"wrong": int(total.item()), "checked_elements": buf.numel() * world_size}


def _planted_pause(buf: torch.Tensor, slowdown: float) -> float:
    """Seconds to pause after each timed call for a planted `slowdown` (tests); 0 when none.

    Measured on three untimed calls, then the largest over ranks: every rank pauses the same.
    """
    if slowdown <= 1:
        return 0.0
    began = time.perf_counter()
    for _ in range(3):
        dist.all_reduce(buf)
    timing.synchronize(buf.device)
    per_call = torch.tensor([(time.perf_counter() - began) / 3], dtype=torch.float64, device=buf.device)
    dist.all_reduce(per_call, op=dist.ReduceOp.MAX)
    return (slowdown - 1) * float(per_call.item())


def _timed(
    buf: torch.Tensor, rank: int, windows: int, calls: int, warmup: int, slowdown: float = 1.0
) -> list[float]:
    """Seconds per all-reduce, averaged across ranks, one figure per window."""
    device = buf.device
    for _ in range(warmup):
        dist.all_reduce(buf)
    timing.synchronize(device)
    out = []
    world = dist.get_world_size()
    pause = _planted_pause(buf, slowdown)
    for _ in range(windows):
        buf.fill_(1.0 / world)  # refill outside the timed region: values stay bounded
        timing.synchronize(device)
        dist.barrier()
        timer = timing.WindowTimer(device)
        timing.hold(device)
        timer.start()
        for _ in range(calls):
            dist.all_reduce(buf)
            if pause:  # planted fault (tests only)
                time.sleep(pause)
        timer.stop()
        seconds = torch.tensor([timer.seconds() / calls], dtype=torch.float64, device=device)
        dist.all_reduce(seconds)
        out.append(float(seconds.item()) / world)
    return out


def allreduce_sweep(rank: int, world_size: int, spec: AllReduceSpec) -> dict[str, Any]:
    """One rank's part of the sweep; every rank returns the same figures (rank-averaged times).

    Runs inside a process group set up by the caller (ctx.run_ranks, or a test's launcher).
    """
    sizes_bytes, dtype, windows, warmup = spec.sizes_bytes, spec.dtype, spec.windows, spec.warmup
    calls_per_window, fault = spec.calls_per_window, spec.fault
    if dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; known: {', '.join(DTYPES)}")
    fault = dict(fault or {})
    if fault.get("stall_rank") == rank:
        time.sleep(float(fault.get("stall_s", 3600)))
    slowdown = float(fault.get("slowdown") or os.environ.get(PLANTED_SLOWDOWN_ENV) or 1.0)
    device = rank_device()
    elem = torch.tensor([], dtype=DTYPES[dtype]).element_size()
    rows = []
    for size in sizes_bytes:
        count = max(1, int(size) // elem)
        buf = torch.empty(count, dtype=DTYPES[dtype], device=device)
        check = _check(buf, dtype, rank, world_size, fault)
        calls = calls_per_window or calls_for(count * elem)
        seconds = _timed(buf, rank, windows, calls, warmup, slowdown)
        t = stats.median(seconds)
        rows.append(
            {
                "size_bytes": count * elem,
                "time_us": t * 1e6,
                "algbw_gbs": algbw_gbs(count * elem, t),
                "busbw_gbs": busbw_gbs(count * elem, t, world_size) if world_size > 1 else 0.0,
                "windows_busbw_gbs": [
                    round(busbw_gbs(count * elem, s, world_size), 3) if world_size > 1 else 0.0
                    for s in seconds
                ],
                "calls_per_window": calls,
                **check,
            }
        )
        del buf
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return {
        "rank": rank,
        "world_size": world_size,
        "backend": dist.get_backend() if dist.is_initialized() else None,
        "dtype": dtype,
        "sizes": rows,
        "wrong_total": sum(r["wrong"] for r in rows),
        "windows": windows,
        "warmup": warmup,
        "bus_factor": bus_factor(world_size),
        "planted_slowdown": slowdown,
        "formula": "busbw = S/t * 2(n-1)/n (nccl-tests doc/PERFORMANCE.md)",
        "versions": {**timing.versions(), "nccl": _nccl_version()},
    }


def _nccl_version() -> str | None:
    try:
        version = torch.cuda.nccl.version()
    except Exception:  # no NCCL/RCCL in a CPU build
        return None
    return ".".join(str(v) for v in version) if isinstance(version, tuple) else str(version)
