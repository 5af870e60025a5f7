"""Latency stability: p50/p95/p99 of a fixed step over many iterations, repeated (C11).

Protocol (docs/validation.md C11): 1000 iterations x 3 repeats, medians of the
repeats reported. Each iteration is timed with its own pair of events, without host
synchronisation inside the loop, so the figures are device-side step latencies. The workload
is the tensor-parallel layer step over all ranks (`workload="tp"`), or one all-reduce of a
fixed size (`workload="allreduce"`, stas00's --profile_stability).

tail ratio  p99 / p50                         WARN > 1.5, FAIL > 3 (docs/validation.md C11)
CV          stdev / mean
drift       median(last 10%) / median(first 10%)  a thermal soak shows as drift > 1
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

from r9700ctl.agent.kernels import collective, timing, tpstep
from r9700ctl.agent.kernels.figures import latency_stats, median_of_repeats
from r9700ctl.agent.kernels.specs import StepSpec


def _allreduce_times(size_bytes: int, dtype: str, iterations: int, warmup: int) -> list[float]:
    device = collective.rank_device()
    elem = torch.tensor([], dtype=collective.DTYPES[dtype]).element_size()
    buf = torch.full((max(1, size_bytes // elem),), 1.0, dtype=collective.DTYPES[dtype], device=device)
    for _ in range(warmup):
        dist.all_reduce(buf)
        buf.fill_(1.0)
    timing.synchronize(device)
    dist.barrier()
    timers = []
    timing.hold(device)
    for _ in range(iterations):
        timer = timing.WindowTimer(device)
        timer.start()
        dist.all_reduce(buf)
        timer.stop()
        timers.append(timer)
        buf.fill_(1.0)  # outside the marks: values never grow
    timing.synchronize(device)
    return [t.seconds() for t in timers]


def latency_rank(rank: int, world_size: int, spec: StepSpec) -> dict[str, Any]:
    """One rank's latency distribution over `spec.repeats` runs of `spec.iterations` steps."""
    workload, iterations, repeats, warmup = spec.workload, spec.iterations, spec.repeats, spec.warmup
    size_bytes, dtype, warmup_s = spec.size_bytes, spec.dtype, spec.warmup_s
    shape = {**spec.layer, "tokens": spec.tokens}
    if workload not in ("tp", "allreduce"):
        raise ValueError(f"unknown workload {workload!r}: 'tp' or 'allreduce'")
    if workload == "allreduce" and world_size < 2:
        raise ValueError("the all-reduce workload needs >= 2 ranks")
    runs = []
    layer = None
    if workload == "tp":
        layer = tpstep.TensorParallelLayer(
            tpstep.shape_from(shape), rank, world_size, collective.rank_device()
        )
    for k in range(repeats):
        if layer is not None:
            seconds = tpstep.time_iterations(layer, iterations, warmup, warmup_s if k == 0 else 0.0)["step_s"]
        else:
            seconds = _allreduce_times(size_bytes, dtype, iterations, warmup)
        runs.append(latency_stats(seconds))
    out: dict[str, Any] = {
        "rank": rank,
        "world_size": world_size,
        "workload": workload,
        "median": median_of_repeats(runs),
        "repeats": runs,
        "warmup": warmup,
        "warmup_s": warmup_s,
        "versions": timing.versions(),
    }
    if layer is not None:
        out["shape"] = tpstep.describe(layer.shape, world_size)
    else:
        out["size_bytes"] = size_bytes
        out["dtype"] = dtype
    return out
