"""The check registry: one module per family in this package, each registering `run(ctx)`.

    @register(id="hostbw", levels=from_level("quick"), order=40, thresholds=("hostbw.peer_warn_fraction",))
    def run(ctx: AgentContext) -> list[CheckResult]: ...

A check's family (what --only and --skip also match) is its id unless it names another; a check
needs a GPU unless it says `needs_gpu=False`.

`thresholds` names every thresholds.yaml key the check reads: the runner refuses to start when
the data files lack one (there are no fallback values in the code).

`load_all()` imports every module of the package (a module that fails to import is reported,
not fatal); `plan(level, only, skip)` picks and orders the checks of a level. P2P-like checks
register `runs_last=True`: they can hang the whole host (ROCm/rocm-systems#11348), so every
other figure is measured before them.
"""

from __future__ import annotations

import importlib
import pkgutil
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from r9700ctl.agent.levels import LEVEL_NAMES

if TYPE_CHECKING:
    from r9700ctl.agent.context import AgentContext
    from r9700ctl.agent.result import CheckResult

CheckFn = Callable[["AgentContext"], "list[CheckResult]"]
ALL_LEVELS = frozenset(LEVEL_NAMES)


@dataclass(frozen=True)
class CheckSpec:
    """A registered check: what it is called, where it runs, and the function that runs it."""

    id: str
    family: str
    levels: frozenset[str]
    needs_gpu: bool
    order: int
    runs_last: bool
    fn: CheckFn = field(compare=False, repr=False)
    thresholds: frozenset[str] = frozenset()

    def sort_key(self) -> tuple[bool, int, str]:
        return (self.runs_last, self.order, self.id)


REGISTRY: dict[str, CheckSpec] = {}


def register(
    *,
    id: str,
    family: str = "",
    levels: Iterable[str],
    needs_gpu: bool = True,
    order: int = 100,
    runs_last: bool = False,
    thresholds: Iterable[str] = (),
) -> Callable[[CheckFn], CheckFn]:
    """Register `run(ctx) -> list[CheckResult]` under `id`; returns the function unchanged."""
    level_set = frozenset(levels)
    unknown = level_set - ALL_LEVELS
    if unknown:
        raise ValueError(f"check {id!r}: unknown level(s) {sorted(unknown)}; known: {sorted(ALL_LEVELS)}")

    def decorator(fn: CheckFn) -> CheckFn:
        existing = REGISTRY.get(id)
        if existing is not None and existing.fn.__module__ != fn.__module__:
            raise ValueError(f"check id {id!r} registered twice ({existing.fn.__module__}, {fn.__module__})")
        REGISTRY[id] = CheckSpec(
            id, family or id, level_set, needs_gpu, order, runs_last, fn, frozenset(thresholds)
        )
        return fn

    return decorator


def load_all() -> dict[str, str]:
    """Import every check module of this package; returns {module: traceback} for those that failed."""
    failures: dict[str, str] = {}
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        name = f"{__name__}.{info.name}"
        try:
            importlib.import_module(name)
        except Exception:
            failures[name] = traceback.format_exc(limit=5)
    return failures


def threshold_keys(specs: Iterable[CheckSpec]) -> set[str]:
    """Every thresholds.yaml key the given checks read."""
    return {key for spec in specs for key in spec.thresholds}


def known_names() -> set[str]:
    """Every check id and family, the words `--only` and `--skip` accept."""
    return {spec.id for spec in REGISTRY.values()} | {spec.family for spec in REGISTRY.values()}


def plan(level: str, only: Iterable[str] = (), skip: Iterable[str] = ()) -> list[CheckSpec]:
    """The checks of `level` in run order; `only`/`skip` match check ids or family names."""
    only_set, skip_set = set(only), set(skip)
    chosen = []
    for spec in REGISTRY.values():
        if level not in spec.levels:
            continue
        names = {spec.id, spec.family}
        if only_set and not names & only_set:
            continue
        if names & skip_set:
            continue
        chosen.append(spec)
    return sorted(chosen, key=CheckSpec.sort_key)
