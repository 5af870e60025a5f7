"""Validate reports into history rows, and the GPU identity that follows a card between slots.

A GPU is named in the history by its serial when a tool reported one (amd-smi's asic_serial,
nvidia-smi's serial), else by its PCI address: a subject "gpu1->gpu3" becomes
"<key of gpu1>-><key of gpu3>", so a trend or a baseline compares the same card even when the
torch index or the slot changed. Figures (r9700ctl.agent.baseline.figures_of) keep their timed
windows, which the three-gate comparison needs; results keep every check's status.
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from r9700ctl.agent import baseline
from r9700ctl.agent.result import ERROR, STATUSES
from r9700ctl.agent.schemas import VALIDATE as NODE_SCHEMA
from r9700ctl.agent.schemas import VALIDATE_FLEET as FLEET_SCHEMA
from r9700ctl.clock import parse_time, utc_text
from r9700ctl.history.store import History

GPU_TOKEN = re.compile(r"\bgpu(\d+)\b")
# Serials that say "unknown": amd-smi prints N/A, nvidia-smi zeros on boards without one.
_NO_SERIAL = re.compile(r"^(n/?a|none|unknown|0x0*|0+)$", re.IGNORECASE)
# Results the controller adds on top of a node's own checks: kept as results, never as figures
# (a comparison with a baseline is not itself a figure to compare next time).
DERIVED_PREFIXES = ("baseline.", "fleet.")
INSERT_RESULT = "INSERT INTO results VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
INSERT_FIGURE = "INSERT INTO figures VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"


@dataclass
class NodeRun:
    """One node's part of a run, as the history stores it."""

    node: str
    status: str
    started: str = ""
    report: dict[str, Any] = field(default_factory=dict)

    @property
    def results(self) -> list[dict[str, Any]]:
        return [r for r in self.report.get("results") or [] if isinstance(r, dict) and r.get("id")]


def new_run_id(started: datetime) -> str:
    """Sortable and unique: 20261202T133440Z-3fa9c1."""
    return f"{started.astimezone(timezone.utc):%Y%m%dT%H%M%SZ}-{secrets.token_hex(3)}"


def serial_of(gpu: Mapping[str, Any]) -> str:
    serial = str(gpu.get("serial") or "").strip()
    return "" if _NO_SERIAL.match(serial or "0") else serial


def gpu_keys(report: Mapping[str, Any]) -> dict[int, str]:
    """torch index -> the GPU's lasting name: serial, else PCI address, else gpuN (said so)."""
    keys: dict[int, str] = {}
    for gpu in report.get("gpus") or []:
        if not isinstance(gpu, Mapping) or not isinstance(gpu.get("index"), int):
            continue
        serial = serial_of(gpu)
        address = str(gpu.get("pci_address") or "")
        keys[gpu["index"]] = f"sn:{serial}" if serial else address or f"gpu{gpu['index']}"
    return keys


def identity_subject(subject: str, keys: Mapping[int, str]) -> str:
    """'gpu0->gpu1' -> '0000:03:00.0->0000:04:00.0'; 'node' -> '' (a node-wide figure)."""
    if not GPU_TOKEN.search(subject):
        return ""
    return GPU_TOKEN.sub(lambda m: keys.get(int(m.group(1)), m.group(0)), subject)


def gpu_table(report: Mapping[str, Any]) -> list[dict[str, Any]]:
    keys = gpu_keys(report)
    return [
        {
            "index": g.get("index"),
            "key": keys.get(g.get("index"), ""),
            "pci_address": g.get("pci_address"),
            "serial": serial_of(g) or None,
            "model": g.get("model"),
        }
        for g in report.get("gpus") or []
        if isinstance(g, Mapping)
    ]


def nodes_of(document: Mapping[str, Any]) -> list[NodeRun]:
    """Either validate schema as the nodes that reported (a node without a report has no figures)."""
    schema = document.get("schema")
    if schema == NODE_SCHEMA:
        return [_node_run(str(document.get("node") or "localhost"), document)]
    if schema != FLEET_SCHEMA:
        raise ValueError(f"not a validate report (schema {schema!r})")
    runs = []
    for entry in document.get("nodes") or []:
        if not isinstance(entry, Mapping):
            continue
        host = str(entry.get("host") or "?")
        report = entry.get("report")
        if isinstance(report, dict):
            runs.append(_node_run(host, report))
        else:
            runs.append(NodeRun(host, ERROR if entry.get("status") not in STATUSES else entry["status"]))
    return runs


def _node_run(node: str, report: dict[str, Any]) -> NodeRun:
    status = report.get("status") if report.get("status") in STATUSES else ERROR
    started = parse_time(report.get("started"))
    return NodeRun(node, str(status), utc_text(started) if started else "", report)


def runtime_of(document: Mapping[str, Any], nodes: Iterable[NodeRun]) -> str:
    """Where the agent ran: the report's `runtime` when it says (host or an image), else host."""
    for candidate in [document, *(n.report for n in nodes)]:
        value = candidate.get("runtime")
        if isinstance(value, str) and value:
            return value
        if isinstance(value, Mapping) and value.get("image"):
            return str(value["image"])
    return "host"


def figure_rows(run_id: str, node: NodeRun) -> list[tuple]:
    keys = gpu_keys(node.report)
    rows = []
    for result in node.results:
        if str(result["id"]).startswith(DERIVED_PREFIXES):
            continue
        for figure in baseline.figures_of(result):
            rows.append(
                (
                    run_id,
                    node.node,
                    figure.check,
                    figure.subject,
                    identity_subject(figure.subject, keys),
                    figure.metric,
                    figure.kind,
                    figure.value,
                    figure.unit,
                    figure.size_bytes,
                    json.dumps(list(figure.samples)),
                )
            )
    return rows


def _result_row(
    run_id: str, node: str, result: Mapping[str, Any], subject: str, keys: Mapping[int, str]
) -> tuple:
    value = result.get("value")
    number = float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
    if number is not None and number != number:  # NaN is no figure
        number = None
    return (
        run_id,
        node,
        str(result["id"]),
        subject,
        identity_subject(subject, keys),
        str(result.get("metric") or ""),
        number,
        None if number is not None or value is None else str(value),
        str(result.get("unit") or ""),
        str(result.get("status") or ""),
    )


def result_rows(run_id: str, node: NodeRun) -> list[tuple]:
    keys = gpu_keys(node.report)
    return [_result_row(run_id, node.node, r, str(r.get("subject") or ""), keys) for r in node.results]


def record(
    history: History,
    document: Mapping[str, Any],
    *,
    scope: str,
    source: str = "",
    run_id: str | None = None,
) -> str:
    """Store one validate run (either schema) in one transaction; returns its run id."""
    from r9700ctl import __version__

    nodes = nodes_of(document)
    started = parse_time(document.get("started")) or next(
        (parse_time(n.report.get("started")) for n in nodes if n.report.get("started")), None
    )
    started = started or datetime.now(timezone.utc)
    run_id = run_id or new_run_id(started)
    status = document.get("status") if document.get("status") in STATUSES else ERROR
    with history.write() as db:
        db.execute(
            "INSERT INTO runs (id, started, toolkit_version, level, runtime, scope, status, source) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (
                run_id,
                utc_text(started),
                str(document.get("toolkit_version") or __version__),
                str(document.get("level") or ""),
                runtime_of(document, nodes),
                scope,
                str(status),
                source,
            ),
        )
        for node in nodes:
            environment = node.report.get("environment")
            db.execute(
                "INSERT INTO run_nodes (run_id, node, status, started, gpus, environment) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (
                    run_id,
                    node.node,
                    node.status,
                    node.started,
                    json.dumps(gpu_table(node.report)),
                    json.dumps(environment if isinstance(environment, dict) else {}, default=str),
                ),
            )
            db.executemany(
                "INSERT INTO results VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", result_rows(run_id, node)
            )
            db.executemany(INSERT_FIGURE, figure_rows(run_id, node))
        db.executemany(
            "INSERT INTO results VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", fleet_rows(run_id, document)
        )
    return run_id


def fleet_rows(run_id: str, document: Mapping[str, Any]) -> list[tuple]:
    """The fleet's verdicts on each node (fleet.*), stored under the node they are about."""
    fleet = document.get("fleet") if isinstance(document.get("fleet"), Mapping) else {}
    rows = []
    for result in fleet.get("results") or []:
        if not isinstance(result, Mapping) or not result.get("id"):
            continue
        evidence = result.get("evidence") if isinstance(result.get("evidence"), Mapping) else {}
        node = str(evidence.get("node") or "")
        subject = str(result.get("subject") or "")
        subject = subject[len(node) + 1 :] if node and subject.startswith(f"{node}:") else subject
        report = next((n.report for n in nodes_of(document) if n.node == node), {})
        rows.append(_result_row(run_id, node, result, subject, gpu_keys(report)))
    return rows
