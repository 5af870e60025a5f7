"""What each measurement kernel is asked to do: one small frozen dataclass per kernel.

The checks build these in the agent's own process (which never imports torch) and hand them to
a spawned child (pickled by reference), where the kernel reads its parameters by name. This
module therefore imports nothing but the standard library. Defaults are the full-size protocol
of each kernel (its module docstring says why); the levels choose smaller ones.
"""

from __future__ import annotations

from dataclasses import dataclass, field

MiB = 1 << 20
GiB = 1 << 30


@dataclass(frozen=True)
class CopySpec:
    """Host <-> device copies (kernels.hostbw): with several GPUs, all of them at once.

    planted_default_stream_cycles: proof and tests only; queue this many GPU clock cycles of
    work (a sleep kernel, about 1 ms per 2 million) on the default stream before every phase, to
    prove the copies are ordered against it (issue 10: a poison fill on the default stream raced
    the verified copy).
    """

    gpus: tuple[int, ...]
    size_bytes: int = 256 * MiB  # TransferBench healthcheck's size
    windows: int = 5
    copies_per_window: int = 20  # back to back, as the 55 GB/s figure in docs/benchmarks.md was measured
    warmup: int = 3
    numa_nodes: dict[int, int | None] = field(default_factory=dict)
    pageable: bool = True
    root: str = "/"
    planted_default_stream_cycles: int = 0


@dataclass(frozen=True)
class MemorySpec:
    """BabelStream copy and triad on one GPU (kernels.memory); device="cpu" runs on the host (tests)."""

    gpu: int
    array_bytes: int = 1 * GiB
    windows: int = 5
    calls_per_window: int = 20
    warmup: int = 3
    device: str = "cuda"


@dataclass(frozen=True)
class SampledLoad:
    """GEMM load on `gpus` with their telemetry sampled (kernels.gemm, kernels.power): where the
    sampler reads each GPU. device="cpu" runs one host "GPU" without a sampler (tests)."""

    gpus: tuple[int, ...]
    pci_addresses: dict[int, str | None] = field(default_factory=dict)
    # Where each GPU's PCIe link is read (the card's upstream port on Radeon cards).
    link_addresses: dict[int, str | None] = field(default_factory=dict)
    root: str = "/"
    # A Radeon TEMP_HOTSPOT throttle bit counts only with a hotspot reading at least this hot
    # (the check passes thresholds compute.hotspot_warn_c; needed for the AMD sampler).
    hotspot_credible_c: float | None = None
    device: str = "cuda"


@dataclass(frozen=True)
class GemmSpec(SampledLoad):
    """n x n x n matmuls on all GPUs at once, with telemetry sampled (kernels.gemm)."""

    dtypes: tuple[str, ...] = ("bf16",)
    n: int = 8192
    seconds_per_dtype: float = 10.0
    warmup: int = 3
    sample_interval_s: float = 0.5


@dataclass(frozen=True)
class PowerSpec(SampledLoad):
    """The staged power phase (kernels.power): GEMM load on each GPU alone, then on all at once.

    The draw is sampled every sample_interval_s (0.1 s: >= 10 Hz, so a PSU's peak is seen, not
    averaged away) from an idle lead-in to the end. A stage of one GPU shows what each card draws
    by itself; the stage of all shows what the PSUs carry together.
    """

    stage_s: float = 10.0
    all_s: float = 30.0
    idle_s: float = 2.0
    n: int = 8192
    dtype: str = "bf16"
    sample_interval_s: float = 0.1


@dataclass(frozen=True)
class PairSpec:
    """P2P copies between GPUs a and b, both directions, against a host bounce (kernels.p2p)."""

    a: int
    b: int
    size_bytes: int = 256 * MiB
    windows: int = 5
    copies_per_window: int = 10
    warmup: int = 2
    bidirectional: bool = True
    host_bounce: bool = True


@dataclass(frozen=True)
class AllReduceSpec:
    """The all-reduce bus-bandwidth sweep, one rank per GPU (kernels.collective).

    fault (tests and proofs only): {"corrupt_rank": r}, {"stall_rank": r, "stall_s": s} or
    {"slowdown": f}; the kernel's docstring says what each plants.
    """

    sizes_bytes: tuple[int, ...] = tuple(s * MiB for s in (1, 4, 16, 64, 256, 1024))
    dtype: str = "bf16"
    windows: int = 5
    warmup: int = 5
    calls_per_window: int | None = None
    fault: dict[str, object] = field(default_factory=dict)


@dataclass(frozen=True)
class StepSpec:
    """The LLaMA-3-70B-shaped tensor-parallel layer step (kernels.scaling, kernels.stability).

    tokens: tokens per step; iterations timed per repeat; warmup untimed steps before each
    repeat and warmup_s seconds of untimed steps before the first (clocks settle at the
    power cap); workload "tp" (the layer step) or "allreduce" (one all-reduce of size_bytes);
    layer: fields of tpstep.LayerShape to change (tests shrink the layer; {} is LLaMA-3-70B's).
    """

    tokens: int = 2048
    iterations: int = 30
    repeats: int = 1
    warmup: int = 5
    warmup_s: float = 2.0
    workload: str = "tp"
    size_bytes: int = 64 * MiB
    dtype: str = "bf16"
    layer: dict[str, object] = field(default_factory=dict)
