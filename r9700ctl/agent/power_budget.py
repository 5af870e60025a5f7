"""Power caps and PSU budgets: the one model that preflight, the r9700_power role and the
agent's power phase share. Pure and standard library only (it runs on GPU nodes too).

Budget clusters run at the edge of their power supplies: owners cap each card so that the
cards a PSU feeds, plus the share of the host that PSU carries, stay inside its rating.
The arithmetic, per PSU:

    demand = host_w + sum(draw of each GPU it feeds)       draw = the GPU's power cap
    FAIL when demand > watts                               (the PSU is overcommitted)
    WARN when demand > watts x (1 - margin)                (inside the safety margin)

`margin` (r9700_psu_margin, 0.10 by default) keeps headroom for what a cap does not bound:
transients between telemetry samples, fans, PSU ageing.

The node's policy file, written by the r9700_power role and read by its boot unit and by the
validation agent (`/etc/r9700ctl/power.json`):

    {"schema": "r9700ctl.power/1", "caps_w": {"0000:03:00.0": 250.0},
     "psus": [{"name": "psu1", "watts": 1600, "gpus": ["0000:03:00.0"], "host_w": 350}],
     "margin": 0.1}
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from r9700ctl.agent import schemas
from r9700ctl.agent.result import FAIL, PASS, WARN

SCHEMA = schemas.POWER
POLICY_PATH = "etc/r9700ctl/power.json"  # below the node's root
DEFAULT_MARGIN = 0.10
_BDF = re.compile(r"^(?:([0-9a-f]{4}):)?([0-9a-f]{2}):([0-9a-f]{2})\.([0-7])$")


def normalise_address(value: Any) -> str | None:
    """ "03:00.0" or "0000:03:00.0" -> "0000:03:00.0"; None when it is not a PCI address."""
    match = _BDF.match(str(value).strip().lower()) if value is not None else None
    if match is None:
        return None
    domain, bus, dev, fn = match.groups()
    return f"{domain or '0000'}:{bus}:{dev}.{fn}"


def _watts(value: Any) -> float | None:
    """A positive number of watts, or None."""
    if isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) and number > 0 else None


@dataclass(frozen=True)
class Psu:
    """One power supply: its rating, the GPUs it feeds (PCI addresses), the host's draw on it."""

    name: str
    watts: float
    gpus: tuple[str, ...]
    host_w: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "watts": self.watts, "gpus": list(self.gpus), "host_w": self.host_w}


def parse_psus(value: Any) -> tuple[list[Psu], list[str]]:
    """r9700_psus into PSUs; what is wrong comes back as sentences naming the variable.

    Accepts a mapping {name: {watts, gpus, host_w}} (the inventory form) or a list of
    {name, watts, gpus, host_w} (the policy file's form).
    """
    if value in (None, "", {}, []):
        return [], []
    if isinstance(value, Mapping):
        items = [(str(name), entry) for name, entry in value.items()]
    elif isinstance(value, list):
        items = [
            (str(e.get("name", f"psu{k + 1}")) if isinstance(e, Mapping) else "", e)
            for k, e in enumerate(value)
        ]
    else:
        return [], ["r9700_psus must map each PSU's name to {watts, gpus, host_w}"]
    psus, problems, owner = [], [], {}
    for name, entry in items:
        where = f"r9700_psus.{name}"
        if not isinstance(entry, Mapping):
            problems.append(f"{where} must be a mapping with watts, gpus and host_w")
            continue
        unknown = sorted(set(entry) - {"watts", "gpus", "host_w", "name"})
        if unknown:
            problems.append(f"{where} has unknown key(s) {', '.join(unknown)} (known: watts, gpus, host_w)")
        watts = _watts(entry.get("watts"))
        if entry.get("watts") is None:
            problems.append(f"{where} has no watts (the PSU's rating in watts, a number > 0)")
        elif watts is None:
            problems.append(
                f"{where}.watts must be the PSU's rating in watts (a number > 0), got {entry.get('watts')!r}"
            )
        host = entry.get("host_w", 0) or 0
        host_w = 0.0 if host == 0 else _watts(host)
        if host_w is None:
            problems.append(f"{where}.host_w must be watts (a number >= 0), got {host!r}")
        gpus = entry.get("gpus") or []
        if isinstance(gpus, str) or not isinstance(gpus, list):
            problems.append(f"{where}.gpus must be a list of PCI addresses such as 0000:03:00.0")
            gpus = []
        addresses = []
        for raw in gpus:
            address = normalise_address(raw)
            if address is None:
                problems.append(f"{where}.gpus: {raw!r} is not a PCI address such as 0000:03:00.0")
            elif address in owner:
                problems.append(f"{where}.gpus: {address} is already fed by r9700_psus.{owner[address]}")
            else:
                owner[address] = name
                addresses.append(address)
        if watts is not None and host_w is not None:
            psus.append(Psu(name, watts, tuple(addresses), host_w))
    return psus, problems


def parse_margin(value: Any) -> tuple[float, list[str]]:
    if value in (None, ""):
        return DEFAULT_MARGIN, []
    try:
        margin = float(value)
    except (TypeError, ValueError):
        margin = -1.0
    if not 0 <= margin < 1:
        return DEFAULT_MARGIN, [
            f"r9700_psu_margin must be a fraction from 0 to below 1 (0.1 = 10%), got {value!r}"
        ]
    return margin, []


def _cap_watts(value: Any) -> float | None:
    """Whole watts > 0: `amd-smi set --power-cap` takes an integer, and the card keeps whole watts."""
    watts = _watts(value)
    return watts if watts is not None and watts.is_integer() else None


def parse_caps(cap_w: Any, by_gpu: Any) -> tuple[float | None, dict[str, float], list[str]]:
    """r9700_power_cap_w (every GPU) and r9700_power_cap_w_by_gpu (PCI address -> whole watts)."""
    problems = []
    node_cap = None
    if cap_w not in (None, ""):
        node_cap = _cap_watts(cap_w)
        if node_cap is None:
            problems.append(f"r9700_power_cap_w must be whole watts (an integer > 0) or null, got {cap_w!r}")
    caps: dict[str, float] = {}
    if by_gpu not in (None, "", {}):
        if not isinstance(by_gpu, Mapping):
            problems.append(
                "r9700_power_cap_w_by_gpu must map PCI addresses to watts, e.g. {'0000:03:00.0': 250}"
            )
        else:
            for raw, value in by_gpu.items():
                address, watts = normalise_address(raw), _cap_watts(value)
                if address is None:
                    problems.append(
                        f"r9700_power_cap_w_by_gpu: {raw!r} is not a PCI address such as 0000:03:00.0"
                    )
                elif watts is None:
                    problems.append(
                        f"r9700_power_cap_w_by_gpu.{raw} must be whole watts (an integer > 0), got {value!r}"
                    )
                else:
                    caps[address] = watts
    return node_cap, caps, problems


def plan_caps(
    node_cap: float | None, by_gpu: Mapping[str, float], addresses: list[str]
) -> tuple[dict[str, float], list[str]]:
    """The cap each GPU of the node gets: its own entry, else the node-wide cap; problems for
    entries that name no GPU of this node."""
    present = set(addresses)
    problems = [
        f"r9700_power_cap_w_by_gpu names {address}, which is not a GPU of this node "
        f"(GPUs: {', '.join(addresses) or 'none'})"
        for address in sorted(by_gpu)
        if address not in present
    ]
    plan = {}
    for address in addresses:
        cap = by_gpu.get(address, node_cap)
        if cap is not None:
            plan[address] = float(cap)
    return plan, problems


@dataclass(frozen=True)
class CapRange:
    """What the card accepts (`amd-smi static --limit`: min_power / max_power) and its cap now."""

    address: str
    min_w: float | None
    max_w: float | None
    current_w: float | None = None


def check_caps(plan: Mapping[str, float], ranges: Mapping[str, CapRange], source: str) -> list[str]:
    """Each planned cap against the card's own range; a GPU without a readable range is refused
    (setting a cap nobody could check is how a card ends up at a value it silently clamps)."""
    problems = []
    for address, cap in sorted(plan.items()):
        card = ranges.get(address)
        if card is None or card.max_w is None:
            problems.append(
                f"{address}: {source} reports no power-cap range for this GPU, so {cap:g} W cannot be checked"
            )
            continue
        low = card.min_w or 0.0
        if not low <= cap <= card.max_w:
            problems.append(
                f"{address}: {cap:g} W is outside the {low:g}-{card.max_w:g} W this card accepts ({source}); "
                f"choose a cap in that range"
            )
    return problems


@dataclass
class BudgetLine:
    """One PSU's budget: what it would carry, and the verdict."""

    psu: str
    watts: float
    margin: float
    host_w: float
    draw_w: dict[str, float | None]
    demand_w: float | None
    status: str
    detail: str
    fix: str = ""
    unknown: list[str] = field(default_factory=list)
    code: str = ""  # data/codes.yaml: PSU_DRAW_UNKNOWN, PSU_OVER_RATING, PSU_INSIDE_MARGIN

    @property
    def usable_w(self) -> float:
        return self.watts * (1 - self.margin)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "usable_w": self.usable_w}


def budget_line(
    psu: Psu, draw_w: Mapping[str, float | None], margin: float, what: str = "at their caps"
) -> BudgetLine:
    """One PSU against the GPUs it feeds drawing `draw_w` (None: unknown) plus its host share."""
    draws = {address: draw_w.get(address) for address in psu.gpus}
    unknown = [a for a, w in draws.items() if w is None]
    known = sum(w for w in draws.values() if w is not None)
    demand = psu.host_w + known
    usable = psu.watts * (1 - margin)
    parts = f"{len(draws)} GPU(s) {what} ({known:g} W) + host {psu.host_w:g} W"
    line = partial(BudgetLine, psu=psu.name, watts=psu.watts, margin=margin, host_w=psu.host_w, draw_w=draws)
    if unknown:
        said = (
            f"PSU {psu.name} ({psu.watts:g} W): the draw of {', '.join(unknown)} is unknown, so its budget "
            f"cannot be checked ({parts} known)"
        )
        fix = "set r9700_power_cap_w (or a per-GPU cap) for those GPUs"
        return line(
            demand_w=None, status=WARN, detail=said, fix=fix, unknown=unknown, code="PSU_DRAW_UNKNOWN"
        )
    line = partial(line, demand_w=demand)
    carry = f"PSU {psu.name} ({psu.watts:g} W) would carry {demand:g} W: {parts}; "
    if demand > psu.watts:
        said = carry + f"over its rating by {demand - psu.watts:g} W"
        return line(status=FAIL, detail=said, fix=_fix(psu, usable), code="PSU_OVER_RATING")
    if demand > usable:
        left = f"{demand - usable:g} W ({psu.watts - demand:g} W left)"
        said = carry + f"inside its {margin:.0%} safety margin by {left}"
        return line(status=WARN, detail=said, fix=_fix(psu, usable), code="PSU_INSIDE_MARGIN")
    return line(status=PASS, detail=carry + f"{usable - demand:g} W below its {margin:.0%} margin")


def _fix(psu: Psu, usable: float) -> str:
    if not psu.gpus:
        return f"lower host_w of r9700_psus.{psu.name} or use a larger PSU"
    per_gpu = math.floor((usable - psu.host_w) / len(psu.gpus))
    lower = (
        f"cap its {len(psu.gpus)} GPU(s) at <= {per_gpu} W each (r9700_power_cap_w)"
        if per_gpu > 0
        else "its host share alone exceeds the usable budget"
    )
    return f"{lower}, move a GPU to another PSU, or use a larger PSU"


@dataclass(frozen=True)
class Policy:
    """The node's power policy file: caps to apply at boot and the PSUs that feed the GPUs."""

    caps_w: dict[str, float] = field(default_factory=dict)
    psus: tuple[Psu, ...] = ()
    margin: float = DEFAULT_MARGIN

    def to_json(self) -> str:
        body = {
            "schema": SCHEMA,
            "caps_w": dict(sorted(self.caps_w.items())),
            "psus": [p.to_dict() for p in self.psus],
            "margin": self.margin,
        }
        return json.dumps(body, indent=2, sort_keys=False) + "\n"


def load_policy(root: str | Path = "/") -> tuple[Policy | None, str]:
    """The node's policy file: (None, "") when there is none, (None, reason) when it is unreadable."""
    path = Path(root) / POLICY_PATH
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None, ""
    except (OSError, ValueError) as exc:
        return None, f"{path}: {exc}"
    if not isinstance(document, dict) or document.get("schema") != SCHEMA:
        return None, f"{path}: not a {SCHEMA} document"
    psus, problems = parse_psus(document.get("psus"))
    margin, margin_problems = parse_margin(document.get("margin"))
    _, caps, cap_problems = parse_caps(None, document.get("caps_w"))
    problems += margin_problems + cap_problems
    if problems:
        return None, f"{path}: {'; '.join(problems)}"
    return Policy(caps, tuple(psus), margin), ""


def psu_totals(
    samples: Iterable[Mapping[str, Any]], psu: Psu, gpu_index: Mapping[str, int]
) -> list[tuple[float, float]]:
    """(t, watts) the PSU carries at each sampler tick: its host share plus the power read for each
    GPU it feeds at that tick. One sampler reads every GPU per tick, so a tick's readings share t;
    a tick where one of the PSU's GPUs has no reading is left out rather than counted low."""
    wanted = {gpu_index[a] for a in psu.gpus if a in gpu_index}
    by_tick: dict[float, dict[int, float]] = {}
    for sample in samples:
        index, watts = sample.get("gpu"), sample.get("power_w")
        if index in wanted and isinstance(watts, (int, float)):
            by_tick.setdefault(float(sample["t"]), {})[int(index)] = float(watts)
    return [
        (t, psu.host_w + sum(readings.values()))
        for t, readings in sorted(by_tick.items())
        if len(readings) == len(wanted) and wanted
    ]


@dataclass
class DrawLine:
    """One PSU's measured load against its rating: peak (one sample) and sustained (window mean)."""

    psu: str
    watts: float
    margin: float
    host_w: float
    peak_w: float
    sustained_w: float
    window_s: float
    status: str
    detail: str
    fix: str = ""
    code: str = ""  # data/codes.yaml: PSU_OVER_RATING, PSU_INSIDE_MARGIN, PSU_PEAK_OVER_RATING

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "usable_w": self.watts * (1 - self.margin)}


def judge_draw(psu: Psu, peak_w: float, sustained_w: float, margin: float, window_s: float) -> DrawLine:
    """The measured total (GPUs read + the declared host share) against the PSU.

    The sustained total decides, with the budget's rule: FAIL over the rating, WARN inside the
    margin (a PSU's rating is a continuous load). A peak over the rating is a WARN on its own: GPU
    draw spikes far past the cap for a sample (an H200 capped at 700 W read 956 W for 0.1 s as its
    GEMM started, docs/benchmarks.md) and PSUs built for it ride such excursions out (ATX 3.0
    asks for 200% for 0.1 ms), while older or server PSUs may trip.
    """
    usable = psu.watts * (1 - margin)
    figures = (
        f"PSU {psu.name} ({psu.watts:g} W) carried {sustained_w:.0f} W sustained over {window_s:g} s, "
        f"{peak_w:.0f} W peak ({len(psu.gpus)} GPU(s) measured + host {psu.host_w:g} W declared)"
    )
    line = DrawLine(psu.name, psu.watts, margin, psu.host_w, peak_w, sustained_w, window_s, PASS, "")
    if sustained_w > psu.watts:
        line.status, line.fix, line.code = FAIL, _fix(psu, usable), "PSU_OVER_RATING"
        line.detail = f"{figures}: the sustained load is over its rating by {sustained_w - psu.watts:.0f} W"
    elif sustained_w > usable:
        line.status, line.fix, line.code = WARN, _fix(psu, usable), "PSU_INSIDE_MARGIN"
        inside = sustained_w - usable
        line.detail = (
            f"{figures}: the sustained load is inside its {margin:.0%} safety margin by {inside:.0f} W"
        )
    elif peak_w > psu.watts:
        line.status, line.code = WARN, "PSU_PEAK_OVER_RATING"
        line.fix = "check that the PSU is rated for transient excursions (ATX 3.x), or lower the caps"
        line.detail = f"{figures}: peaks exceed its rating by {peak_w - psu.watts:.0f} W"
    else:
        line.detail = f"{figures}: {usable - sustained_w:.0f} W below its {margin:.0%} margin"
    return line
