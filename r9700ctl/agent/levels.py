"""Parameters per level, each with its reason (docs/validation.md R-G1).

- config: static checks only, no GPU load, < 10 s.
- quick: <= 90 s on 4 GPUs (< 60 s on one): one size, one repeat, short GEMM burn.
- standard: <= 15 min: size sweeps, 3 repeats with medians, P2P on and off, scaling 1 -> N.
- burnin: `--duration` seconds of soak with periodic re-measurement, drift, tail latency.

Checks read these through `ctx.param("family.name", default)`. Keys are "family.name"; a check
family adds its own keys here (small targeted edits). `--duration` overrides "burnin.duration_s".
"""

from __future__ import annotations

from typing import Any

# The one list of levels, shallow to deep: the CLI's --level and --gate-level choices, the check
# registry, the monitoring timer and the r9700_validate role's spec (a test keeps it equal) use it.
LEVEL_NAMES = ("config", "quick", "standard", "burnin")
GPU_LEVELS = LEVEL_NAMES[1:]  # the levels that load the GPUs

_COMMON: dict[str, Any] = {
    # Watchdog: a step's timeout is max(min, factor x its expected duration) (docs/validation.md R-G2:
    # "3x the expected duration, minimum 30 s"); checks compute the expected duration themselves.
    "watchdog.timeout_factor": 3.0,
    "watchdog.min_timeout_s": 30.0,
    # The torch probe at start (import torch, count devices, read properties): a first CUDA/HIP
    # context can take 10-20 s on a cold node with 8 GPUs; a hung driver must not hang the agent.
    "discovery.torch_timeout_s": 90.0,
    # amd-smi/nvidia-smi/lspci/dmesg calls: they return in < 2 s on a healthy node; a wedged
    # driver can make amd-smi block for minutes.
    "tools.timeout_s": 20.0,
    # Cooldown between heavy phases (R-G7: avoid one phase's heat or residual activity
    # biasing the next, DCGM#272).
    "cooldown_s": 0.0,
}
# Seconds the agent may run per level before the r9700_validate role stops it (burnin adds
# --duration): r9700ctl/validate.py reads it for `validate INVENTORY`.
TIMEOUT_S = {"config": 300, "quick": 900, "standard": 3600, "burnin": 3600}

LEVELS: dict[str, dict[str, Any]] = {
    "config": {
        **_COMMON,
        # Static checks read files and run tools only; the torch probe is optional there (it
        # counts devices for inventory) and skipped if torch is absent.
        "discovery.torch_probe": True,
    },
    "quick": {
        **_COMMON,
        "discovery.torch_probe": True,
        # One repeat: quick answers "is anything grossly wrong", standard gives medians.
        "repeats": 1,
        "cooldown_s": 0.0,
    },
    "standard": {
        **_COMMON,
        "discovery.torch_probe": True,
        # 3 repeats, report the median (docs/validation.md R-G5; nvbandwidth and CVS use medians of 3+).
        "repeats": 3,
        # 5 s between heavy phases (R-G7 "5-10 s cooldown").
        "cooldown_s": 5.0,
    },
    "burnin": {
        **_COMMON,
        "discovery.torch_probe": True,
        "repeats": 3,
        "cooldown_s": 5.0,
        # Default soak when --duration is not given: one hour (docs/validation.md L3 "1-12 h").
        "burnin.duration_s": 3600.0,
    },
}


def from_level(level: str) -> tuple[str, ...]:
    """`level` and every deeper one: the levels a check that needs `level`'s depth runs at."""
    return LEVEL_NAMES[LEVEL_NAMES.index(level) :]


def params_for(level: str, duration_s: float | None = None) -> dict[str, Any]:
    """A copy of the level's parameters, with `--duration` applied."""
    if level not in LEVELS:
        raise KeyError(f"unknown level {level!r}; known: {', '.join(LEVEL_NAMES)}")
    params = dict(LEVELS[level])
    if duration_s is not None:
        params["burnin.duration_s"] = float(duration_s)
    return params


def step_timeout(params: dict[str, Any], expected_s: float) -> float:
    """The watchdog timeout for a step expected to take `expected_s` seconds."""
    return max(float(params["watchdog.min_timeout_s"]), float(params["watchdog.timeout_factor"]) * expected_s)
