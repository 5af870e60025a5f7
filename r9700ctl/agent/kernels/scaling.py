"""Scaling 1 -> 2 -> 4 -> ... -> N GPUs of the tensor-parallel layer step (validation.md C10b).

Strong scaling of a fixed problem (the same tokens per step on every n):
    speedup(n)    = T(1) / T(n)          T = median step time
    efficiency(n) = speedup(n) / n
    comm share(n) = sum(all-reduce time) / sum(step time), events around each all-reduce
`tp_scaling_rank` is one rank's part of one n (run once per n by the caller, each in its own
process group); `scaling_table` turns the per-n medians into the table; `expectation_verdicts`
holds a node to figures such as the magazine's "3.4x on 4, 6.1x on 8" (`--expect-scaling`).
"""

from __future__ import annotations

from typing import Any

import torch

from r9700ctl.agent.kernels import collective, timing, tpstep
from r9700ctl.agent.kernels.figures import (  # noqa: F401 (re-exported for callers of this module)
    expectation_verdicts,
    parse_expectations,
    scaling_table,
    world_sizes,
)

DEFAULT_ITERATIONS = 30
DEFAULT_WARMUP = 5


def tp_scaling_rank(
    rank: int,
    world_size: int,
    shape: dict[str, Any] | None = None,
    iterations: int = DEFAULT_ITERATIONS,
    warmup: int = DEFAULT_WARMUP,
    repeats: int = 1,
    warmup_s: float = 2.0,
) -> dict[str, Any]:
    """Median step time, all-reduce time and comm share of one rank, over `repeats` runs."""
    layer_shape = tpstep.shape_from(shape)
    device = collective.rank_device()
    layer = tpstep.TensorParallelLayer(layer_shape, rank, world_size, device)
    runs = []
    for k in range(repeats):
        times = tpstep.time_iterations(layer, iterations, warmup, warmup_s if k == 0 else 0.0)
        step, comm = times["step_s"], times["comm_s"]
        runs.append(
            {
                "step_ms": timing.median(step) * 1e3,
                "comm_ms": timing.median(comm) * 1e3,
                "comm_share": sum(comm) / sum(step) if sum(step) > 0 else 0.0,
            }
        )
    step_ms = timing.median([r["step_ms"] for r in runs])
    del layer
    if device.type == "cuda":
        torch.cuda.empty_cache()
    flops = layer_shape.flops_per_step(world_size)
    return {
        "rank": rank,
        "world_size": world_size,
        "step_ms": step_ms,
        "comm_ms": timing.median([r["comm_ms"] for r in runs]),
        "comm_share": timing.median([r["comm_share"] for r in runs]),
        "tokens_per_s": layer_shape.tokens / (step_ms / 1e3),
        "rank_tflops": flops / (step_ms / 1e3) / 1e12,
        "repeats": runs,
        "iterations": iterations,
        "warmup": warmup,
        "shape": tpstep.describe(layer_shape, world_size),
        "versions": timing.versions(),
    }
