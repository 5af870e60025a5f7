"""The registry of preflight's families of checks, as the agent's checks register (agent/checks).

A family module registers `fn(ctx) -> list[CheckResult]` under a name with an order; `judge`
imports every family (FAMILIES) and runs them in order. The order carries the dependencies:
a family may read what an earlier one put into the context (the GPUs found at 30, the release
resolved at 40, the runtime decision at 85), never a later one's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from r9700ctl.agent.result import CheckResult
    from r9700ctl.preflight.model import Context

CheckFn = Callable[["Context"], "list[CheckResult]"]
# Every family of checks, imported by `load()` so each registers itself.
FAMILIES = ("system", "gpus", "release", "kernel", "driver", "power", "cluster", "environment")


@dataclass(frozen=True)
class PreflightCheck:
    name: str
    order: int
    fn: CheckFn = field(compare=False, repr=False)


REGISTRY: dict[str, PreflightCheck] = {}


def register(name: str, *, order: int) -> Callable[[CheckFn], CheckFn]:
    """Register `fn(ctx) -> list[CheckResult]` as the check `name`, run at `order`."""

    def decorator(fn: CheckFn) -> CheckFn:
        existing = REGISTRY.get(name)
        if existing is not None and existing.fn.__module__ != fn.__module__:
            raise ValueError(
                f"preflight check {name!r} registered twice ({existing.fn.__module__}, {fn.__module__})"
            )
        REGISTRY[name] = PreflightCheck(name, order, fn)
        return fn

    return decorator


def load() -> list[PreflightCheck]:
    """Every registered check, in order (the family modules imported first)."""
    import importlib

    for family in FAMILIES:
        importlib.import_module(f"r9700ctl.preflight.{family}")
    return sorted(REGISTRY.values(), key=lambda c: (c.order, c.name))
