"""Scaling 1 -> 2 -> 4 -> ... -> N GPUs of the tensor-parallel layer step (docs/validation.md C10b).

Strong scaling of a fixed problem (the same tokens per step on every n):
    speedup(n)    = T(1) / T(n)          T = median step time
    efficiency(n) = speedup(n) / n
    comm share(n) = sum(all-reduce time) / sum(step time), events around each all-reduce
`tp_scaling_rank` is one rank's part of one n (run once per n by the caller, each in its own
process group); `figures.scaling_table` turns the per-n medians into the table, which the check
holds to figures such as the magazine's "3.4x on 4, 6.1x on 8" (`--expect-scaling`).
"""

from __future__ import annotations

from typing import Any

import torch

from r9700ctl.agent import stats
from r9700ctl.agent.kernels import collective, timing, tpstep
from r9700ctl.agent.kernels.specs import StepSpec


def tp_scaling_rank(rank: int, world_size: int, spec: StepSpec) -> dict[str, Any]:
    """Median step time, all-reduce time and comm share of one rank, over `spec.repeats` runs."""
    iterations, warmup, repeats, warmup_s = spec.iterations, spec.warmup, spec.repeats, spec.warmup_s
    layer_shape = tpstep.shape_from({**spec.layer, "tokens": spec.tokens})
    device = collective.rank_device()
    layer = tpstep.TensorParallelLayer(layer_shape, rank, world_size, device)
    runs = []
    for k in range(repeats):
        times = tpstep.time_iterations(layer, iterations, warmup, warmup_s if k == 0 else 0.0)
        step, comm = times["step_s"], times["comm_s"]
        runs.append(
            {
                "step_ms": stats.median(step) * 1e3,
                "comm_ms": stats.median(comm) * 1e3,
                "comm_share": sum(comm) / sum(step) if sum(step) > 0 else 0.0,
            }
        )
    step_ms = stats.median([r["step_ms"] for r in runs])
    del layer
    if device.type == "cuda":
        torch.cuda.empty_cache()
    flops = layer_shape.flops_per_step(world_size)
    return {
        "rank": rank,
        "world_size": world_size,
        "step_ms": step_ms,
        "comm_ms": stats.median([r["comm_ms"] for r in runs]),
        "comm_share": stats.median([r["comm_share"] for r in runs]),
        "tokens_per_s": layer_shape.tokens / (step_ms / 1e3),
        "rank_tflops": flops / (step_ms / 1e3) / 1e12,
        "repeats": runs,
        "iterations": iterations,
        "warmup": warmup,
        "shape": tpstep.describe(layer_shape, world_size),
        "versions": timing.versions(),
    }
