"""A tensor-parallel transformer layer shaped like LLaMA-3-70B, with its step timed per iteration.

Shapes (LLaMA-3-70B: hidden 8192, FFN 28672, 64 query heads and 8 KV heads of 128, bf16),
split over n ranks as Megatron does:
  attention  x @ Wqkv  (column-parallel: 8192/n query columns + 2 x 1024/n KV columns per rank)
             a @ Wo    (row-parallel: 8192/n rows)            -> all-reduce of [tokens, 8192]
  MLP        h @ Wgu   (column-parallel: 2 x 28672/n columns), silu(gate) * up
             m @ Wdown (row-parallel: 28672/n rows)            -> all-reduce of [tokens, 8192]
The attention core (scores, softmax) is left out: it needs no communication under tensor
parallelism and would only add the same time on every n. Weights are random (nothing is
downloaded), scaled by 1/sqrt(fan_in) so activations stay bounded over many iterations.

Each iteration records events around the whole step and around each all-reduce, with no host
synchronisation inside the loop; the share of time in communication is sum(all-reduce time) /
sum(step time). With more ranks than KV heads (n > 8) the KV heads are replicated, as inference
engines do.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F

from r9700ctl.agent.kernels import collective, timing

DTYPES = collective.DTYPES


@dataclass(frozen=True)
class LayerShape:
    hidden: int = 8192
    ffn: int = 28672
    heads: int = 64
    kv_heads: int = 8
    tokens: int = 2048  # tokens per step: a batch of prefill, or many decode streams at once
    dtype: str = "bf16"

    def per_rank(self, world_size: int) -> dict[str, int]:
        """Column and row counts one rank holds; raises when the split is not whole."""
        head_dim = self.hidden // self.heads
        if self.heads % world_size or self.ffn % world_size:
            raise ValueError(f"{self.heads} heads / FFN {self.ffn} do not split over {world_size} ranks")
        kv_heads = max(1, self.kv_heads // world_size)
        return {
            "q": self.heads // world_size * head_dim,
            "kv": 2 * kv_heads * head_dim,
            "ffn": self.ffn // world_size,
        }

    def flops_per_step(self, world_size: int) -> float:
        """Matmul FLOPs of one rank's step (2 per multiply-add)."""
        p = self.per_rank(world_size)
        t, h = self.tokens, self.hidden
        return 2.0 * t * (h * (p["q"] + p["kv"]) + p["q"] * h + h * 2 * p["ffn"] + p["ffn"] * h)


class TensorParallelLayer:
    def __init__(self, shape: LayerShape, rank: int, world_size: int, device: torch.device, seed: int = 0):
        self.shape, self.world_size, self.device = shape, world_size, device
        p = shape.per_rank(world_size)
        self.q_cols = p["q"]
        dtype = DTYPES[shape.dtype]
        gen = torch.Generator(device=device)
        gen.manual_seed(seed * 1000 + rank)

        def weight(rows: int, cols: int) -> torch.Tensor:
            w = torch.randn(rows, cols, dtype=torch.float32, device=device, generator=gen) / math.sqrt(rows)
            return w.to(dtype)

        h = shape.hidden
        self.w_qkv = weight(h, p["q"] + p["kv"])
        self.w_o = weight(p["q"], h)
        self.w_gu = weight(h, 2 * p["ffn"])
        self.w_down = weight(p["ffn"], h)
        x_gen = torch.Generator(device=device)
        x_gen.manual_seed(seed)  # the same input on every rank, as after an embedding lookup
        self.x = torch.randn(shape.tokens, h, dtype=torch.float32, device=device, generator=x_gen).to(dtype)

    def _reduce(self, t: torch.Tensor, marks: list[timing.WindowTimer] | None) -> None:
        if self.world_size == 1:
            return
        if marks is None:
            dist.all_reduce(t)
            return
        timer = timing.WindowTimer(self.device)
        timer.start()
        dist.all_reduce(t)
        timer.stop()
        marks.append(timer)

    def step(self, marks: list[timing.WindowTimer] | None = None) -> torch.Tensor:
        x = self.x
        qkv = x @ self.w_qkv
        attn = qkv[:, : self.q_cols]  # stand-in for the attention core (no communication there)
        o = attn @ self.w_o
        self._reduce(o, marks)
        h = x + o
        gate, up = (h @ self.w_gu).chunk(2, dim=-1)
        d = (F.silu(gate) * up) @ self.w_down
        self._reduce(d, marks)
        return h + d


def warm_up(layer: TensorParallelLayer, steps: int, seconds: float = 0.0) -> int:
    """Run `steps` untimed steps, then enough more to last about `seconds` (clocks settle).

    Every rank must run the same number of steps (each holds two all-reduces): the count for
    `seconds` is agreed as the maximum over ranks. Returns the number of steps run.
    """
    device = layer.device
    for _ in range(steps):
        layer.step()
    timing.synchronize(device)
    if seconds <= 0:
        return steps
    probe = timing.WindowTimer(device)
    probe.start()
    for _ in range(5):
        layer.step()
    probe.stop()
    extra = torch.tensor(
        [math.ceil(seconds / max(probe.seconds() / 5, 1e-6))], dtype=torch.float64, device=device
    )
    if dist.is_initialized() and layer.world_size > 1:
        dist.all_reduce(extra, op=dist.ReduceOp.MAX)
    count = int(extra.item())
    for _ in range(count):
        layer.step()
    timing.synchronize(device)
    return steps + 5 + count


def time_iterations(
    layer: TensorParallelLayer, iterations: int, warmup: int, warmup_s: float = 0.0
) -> dict[str, list[float]]:
    """Per-iteration step and all-reduce seconds (events; one synchronisation at the end)."""
    device = layer.device
    warm_up(layer, warmup, warmup_s)
    if dist.is_initialized() and layer.world_size > 1:
        dist.barrier()
    steps: list[timing.WindowTimer] = []
    comms: list[list[timing.WindowTimer]] = []
    timing.hold(device)
    for _ in range(iterations):
        marks: list[timing.WindowTimer] = []
        timer = timing.WindowTimer(device)
        timer.start()
        layer.step(marks)
        timer.stop()
        steps.append(timer)
        comms.append(marks)
    timing.synchronize(device)
    return {
        "step_s": [t.seconds() for t in steps],
        "comm_s": [sum(m.seconds() for m in marks) for marks in comms],
    }


def shape_from(params: dict[str, Any] | None) -> LayerShape:
    fields = {k: v for k, v in (params or {}).items() if k in LayerShape.__dataclass_fields__}
    return LayerShape(**fields)


def describe(shape: LayerShape, world_size: int) -> dict[str, Any]:
    return {**asdict(shape), "per_rank": shape.per_rank(world_size)}
