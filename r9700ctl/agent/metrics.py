"""Every r9700_* metric, defined once, and validate reports turned into them (prometheus_client).

Used by `validate --prom` on the controller (one file for the whole fleet) and by the
r9700_monitoring timer on each node (node.py); templates/grafana/r9700-fleet.json queries only
names from METRICS (a test holds it to that). Labels: `node` is the inventory name (the fleet
report's host, or what the role tells the timer), `level` the agent level that produced the
figure, `gpu` the torch index name (gpu0) with `r9700_gpu_info` tying it to PCI address and
serial. Needs only prometheus_client and the agent's result module, so it runs on a node.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from r9700ctl.agent import schemas
from r9700ctl.agent.result import ERROR, EXIT_CODES, SKIP, STATUSES, overall
from r9700ctl.agent.sysfs import pcie_gen

NODE_SCHEMA = schemas.VALIDATE
FLEET_SCHEMA = schemas.VALIDATE_FLEET
# Prometheus has no strings: a number per status, the exit code of a run whose worst result it is
# (r9700ctl.agent.result.EXIT_CODES: INCONCLUSIVE 4, a verdict of its own), SKIP below PASS so
# "> 0" means "look at it".
STATUS_VALUES = {**EXIT_CODES, SKIP: -1}
STATUS_HELP = "0 PASS, 1 WARN, 2 FAIL, 3 ERROR, 4 INCONCLUSIVE (not judged: see the hint), -1 SKIP."


def missing_code(entry: Mapping[str, Any]) -> str:
    """The reason code of a fleet node that gave no report (validate's UNREACHABLE or NO_REPORT)."""
    return "NODE_UNREACHABLE" if entry.get("status") == "UNREACHABLE" else "NODE_NO_REPORT"


@dataclass(frozen=True)
class Metric:
    name: str
    help: str
    labels: tuple[str, ...]


METRICS: tuple[Metric, ...] = (
    Metric(
        "r9700_check_status",
        f"Verdict of a validate check: {STATUS_HELP} code: its reason code (r9700ctl explain CODE).",
        ("node", "level", "check", "subject", "code"),
    ),
    Metric(
        "r9700_check_value",
        "Figure a validate check measured (its unit in the unit label).",
        ("node", "level", "check", "subject", "metric", "unit"),
    ),
    Metric("r9700_node_status", f"Worst check verdict of the node's run: {STATUS_HELP}", ("node", "level")),
    Metric(
        "r9700_last_run_timestamp_seconds",
        "When the validate run behind these figures started (Unix time).",
        ("node", "level"),
    ),
    Metric(
        "r9700_last_run_exit_code",
        "Exit code of that run: 0 good, 1 warnings, 2 failed, 3 could not run or judge.",
        ("node", "level"),
    ),
    Metric(
        "r9700_gpu_info",
        "1 per GPU; labels tie the torch index to the card (PCI address, serial, model, VBIOS).",
        ("node", "gpu", "pci_address", "serial", "model", "vbios"),
    ),
    Metric("r9700_gpu_pcie_link_generation", "PCIe generation the GPU's link runs at now.", ("node", "gpu")),
    Metric("r9700_gpu_pcie_link_width", "PCIe lanes the GPU's link runs at now.", ("node", "gpu")),
    Metric(
        "r9700_gpu_pcie_link_max_generation",
        "Highest PCIe generation the card and slot support.",
        ("node", "gpu"),
    ),
    Metric("r9700_gpu_pcie_link_max_width", "Widest PCIe link the card and slot support.", ("node", "gpu")),
    Metric(
        "r9700_gpu_temperature_celsius",
        "GPU temperature per sensor (edge, junction, mem).",
        ("node", "gpu", "sensor"),
    ),
    Metric(
        "r9700_gpu_clock_mhz", "Current GPU clock (sclk: shader, mclk: memory).", ("node", "gpu", "clock")
    ),
    Metric("r9700_gpu_power_watts", "Board power when the run read it.", ("node", "gpu")),
    Metric("r9700_gpu_power_cap_watts", "Power cap set on the GPU.", ("node", "gpu")),
    Metric("r9700_gpu_vram_bytes", "VRAM size of the GPU.", ("node", "gpu")),
    # The staged power phase and the PCIe error counts of the run (agent checks power and aer).
    Metric(
        "r9700_gpu_power_measured_watts",
        "Board power measured in the staged power phase (figure: peak, sustained_alone, sustained_all).",
        ("node", "gpu", "figure"),
    ),
    Metric(
        "r9700_psu_draw_watts",
        "What a PSU carried in the staged power phase, its GPUs measured + the declared host share "
        "(figure: peak, sustained).",
        ("node", "psu", "figure"),
    ),
    Metric("r9700_psu_rating_watts", "A PSU's rating (r9700_psus).", ("node", "psu")),
    # The temperature and fan timelines of the phase as the figures a dashboard can plot over
    # runs (the timelines themselves are in the JSON and the HTML report).
    Metric(
        "r9700_gpu_load_temperature_max_celsius",
        "Highest temperature per sensor (edge, junction, mem) during the staged power phase's load.",
        ("node", "gpu", "sensor"),
    ),
    Metric(
        "r9700_gpu_load_fan_rpm",
        "Fan speed in the staged power phase (figure: start, end, max of the GPU's own load step).",
        ("node", "gpu", "figure"),
    ),
    Metric(
        "r9700_gpu_pcie_aer_new_errors",
        "PCIe AER errors counted on the GPU's path to its root port during the run's load steps.",
        ("node", "gpu", "kind"),
    ),
)
NAMES = frozenset(m.name for m in METRICS)
# The power phase's temperature checks and the sensor label r9700_gpu_temperature_celsius uses.
LOAD_SENSORS = {"power.temp_edge": "edge", "power.temp_hotspot": "junction", "power.temp_memory": "mem"}


@dataclass
class NodeSample:
    """One node's validate run as the metrics see it (the report may be missing: could not run)."""

    node: str
    level: str
    status: str
    report: Mapping[str, Any] | None = None
    started: float | None = None
    exit_code: int | None = None
    results: list[Mapping[str, Any]] = field(default_factory=list)


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def epoch(started: Any) -> float | None:
    """The agent's '2026-12-02T13:34:40+0000' or ISO 8601 as Unix time (None when neither)."""
    if not isinstance(started, str) or not started:
        return None
    for parse in (
        lambda t: datetime.fromisoformat(t.replace("Z", "+00:00")),
        lambda t: datetime.strptime(t, "%Y-%m-%dT%H:%M:%S%z"),
    ):
        try:
            moment = parse(started)
        except ValueError:
            continue
        return (moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)).timestamp()
    return None


def _known(status: Any) -> str:
    return str(status) if status in STATUSES else ERROR


def from_agent_report(report: Mapping[str, Any], node: str | None = None) -> NodeSample:
    results = [r for r in report.get("results") or [] if isinstance(r, Mapping)]
    code = report.get("exit_code")
    return NodeSample(
        node=node or str(report.get("node") or "localhost"),
        level=str(report.get("level") or ""),
        status=_known(report.get("status")),
        report=report,
        started=epoch(report.get("started")),
        exit_code=code if isinstance(code, int) else None,
        results=results,
    )


def samples_of(document: Mapping[str, Any]) -> list[NodeSample]:
    """Either validate schema as node samples; the fleet's own findings as the pseudo-node 'fleet'."""
    schema = document.get("schema")
    if schema == NODE_SCHEMA:
        return [from_agent_report(document)]
    if schema != FLEET_SCHEMA:
        raise ValueError(f"not a validate report (schema {schema!r})")
    level = str(document.get("level") or "")
    started = epoch(document.get("started"))
    samples = []
    for entry in document.get("nodes") or []:
        if not isinstance(entry, Mapping):
            continue
        host = str(entry.get("host") or "?")
        if isinstance(entry.get("report"), Mapping):
            samples.append(from_agent_report(entry["report"], host))
            continue
        missing = {"id": "node.report", "subject": "node", "status": ERROR, "code": missing_code(entry)}
        samples.append(NodeSample(host, level, ERROR, None, started, 3, [missing]))
    fleet = [r for r in (document.get("fleet") or {}).get("results") or [] if isinstance(r, Mapping)]
    if fleet:
        status = overall([_known(r.get("status")) for r in fleet])
        samples.append(NodeSample("fleet", level, status, None, started, None, fleet))
    return samples


class Registry:
    """A prometheus_client registry holding every METRICS gauge."""

    def __init__(self) -> None:
        from prometheus_client import CollectorRegistry, Gauge

        self.registry = CollectorRegistry()
        self.gauges = {m.name: Gauge(m.name, m.help, list(m.labels), registry=self.registry) for m in METRICS}

    def set(self, name: str, value: float | None, **labels: Any) -> None:
        if value is not None:
            self.gauges[name].labels(**{k: "" if v is None else str(v) for k, v in labels.items()}).set(value)

    def add(self, sample: NodeSample, now: float) -> None:
        node, level = sample.node, sample.level
        self.set("r9700_node_status", STATUS_VALUES[sample.status], node=node, level=level)
        self.set("r9700_last_run_timestamp_seconds", sample.started or now, node=node, level=level)
        self.set("r9700_last_run_exit_code", sample.exit_code, node=node, level=level)
        for result in sample.results:
            check, subject = str(result.get("id") or ""), str(result.get("subject") or "")
            status = STATUS_VALUES[_known(result.get("status"))]
            code = str(result.get("code") or "")
            self.set(
                "r9700_check_status", status, node=node, level=level, check=check, subject=subject, code=code
            )
            self.set(
                "r9700_check_value",
                _number(result.get("value")),
                node=node,
                level=level,
                check=check,
                subject=subject,
                metric=result.get("metric") or "",
                unit=result.get("unit") or "",
            )
        for gpu in (sample.report or {}).get("gpus") or []:
            if isinstance(gpu, Mapping):
                self._gpu(node, gpu)
        for result in sample.results:
            self._power_and_aer(node, result)

    def _power_and_aer(self, node: str, result: Mapping[str, Any]) -> None:
        check, evidence = str(result.get("id") or ""), result.get("evidence")
        if not isinstance(evidence, Mapping):
            return
        subject = str(result.get("subject") or "")
        if check == "power.cap":
            for figure, key in (("peak", "peak_w"), ("sustained_alone", "sustained_alone_w"),
                                ("sustained_all", "sustained_all_w")):  # fmt: skip
                self.set("r9700_gpu_power_measured_watts", _number(evidence.get(key)), node=node, gpu=subject,
                         figure=figure)  # fmt: skip
        elif check.startswith("power.psu.") and isinstance(evidence.get("draw"), Mapping):
            draw = evidence["draw"]
            self.set("r9700_psu_rating_watts", _number(draw.get("watts")), node=node, psu=subject)
            for figure in ("peak", "sustained"):
                self.set("r9700_psu_draw_watts", _number(draw.get(f"{figure}_w")), node=node, psu=subject,
                         figure=figure)  # fmt: skip
        elif check in LOAD_SENSORS:
            self.set("r9700_gpu_load_temperature_max_celsius", _number(evidence.get("max_c")), node=node,
                     gpu=subject, sensor=LOAD_SENSORS[check])  # fmt: skip
        elif check == "power.fan":
            for figure in ("start", "end", "max"):
                rpm = _number(evidence.get(f"rpm_{figure}"))
                self.set("r9700_gpu_load_fan_rpm", rpm, node=node, gpu=subject, figure=figure)
        elif check == "aer" and result.get("status") != SKIP:
            totals = {"correctable": 0, "nonfatal": 0, "fatal": 0}
            for step in evidence.get("with_errors") or []:
                for increase in step.get("increases") or []:
                    if increase.get("kind") in totals:
                        totals[increase["kind"]] += int(increase.get("delta") or 0)
            for kind, count in totals.items():
                self.set("r9700_gpu_pcie_aer_new_errors", count, node=node, gpu=subject, kind=kind)

    def _gpu(self, node: str, gpu: Mapping[str, Any]) -> None:
        name = f"gpu{gpu.get('index')}"
        self.set(
            "r9700_gpu_info",
            1,
            node=node,
            gpu=name,
            pci_address=gpu.get("pci_address"),
            serial=gpu.get("serial"),
            model=gpu.get("model") or gpu.get("name"),
            vbios=gpu.get("vbios"),
        )
        link = gpu.get("link") if isinstance(gpu.get("link"), Mapping) else {}
        at = {"node": node, "gpu": name}
        self.set("r9700_gpu_pcie_link_generation", pcie_gen(_number(link.get("cur_speed_gts"))), **at)
        self.set("r9700_gpu_pcie_link_width", _number(link.get("cur_width")), **at)
        self.set("r9700_gpu_pcie_link_max_generation", pcie_gen(_number(link.get("max_speed_gts"))), **at)
        self.set("r9700_gpu_pcie_link_max_width", _number(link.get("max_width")), **at)
        for sensor, celsius in (gpu.get("temps_c") or {}).items():
            self.set("r9700_gpu_temperature_celsius", _number(celsius), sensor=sensor, **at)
        for clock, mhz in (gpu.get("clocks_mhz") or {}).items():
            self.set("r9700_gpu_clock_mhz", _number(mhz), clock=clock, **at)
        self.set("r9700_gpu_power_watts", _number(gpu.get("power_w")), **at)
        self.set("r9700_gpu_power_cap_watts", _number(gpu.get("power_cap_w")), **at)
        self.set("r9700_gpu_vram_bytes", _number(gpu.get("vram_bytes")), **at)

    def text(self) -> str:
        from prometheus_client import generate_latest

        return generate_latest(self.registry).decode("utf-8")


def registry_for(samples: Iterable[NodeSample], now: float | None = None) -> Registry:
    registry = Registry()
    moment = now if now is not None else datetime.now(timezone.utc).timestamp()
    for sample in samples:
        registry.add(sample, moment)
    return registry


def render(document: Mapping[str, Any], now: float | None = None) -> str:
    """node_exporter textfile text for a validate report (either schema)."""
    return registry_for(samples_of(document), now).text()
