"""Phase 2's judge: each pair's reachability, MTU path, clocks and TCP bandwidth.

One pair, one verdict (`cluster.network.pair`), from its first step that went wrong, in the order
they ran: the rendezvous port, an ephemeral port, small pings, pings at the MTU, then bandwidth
(iperf3 both ways at once; the slower way against the slower NIC's line rate). The client's record
is the pair's (it measured); the server's says what happened when no client record came back.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from r9700ctl.agent import stats
from r9700ctl.agent.result import FAIL, INCONCLUSIVE, PASS, WARN, CheckResult
from r9700ctl.cluster.facts import NodeNet
from r9700ctl.cluster.limits import ClusterLimits
from r9700ctl.cluster.plan import pair_key, pair_subject
from r9700ctl.cluster.verdicts import floor_verdict, verdict

MBPS_PER_GBS = 8000  # 1 GB/s (base 10) = 8000 Mb/s


@dataclass
class PairRecord:
    server: str
    client: str
    measured: dict[str, Any] | None = None  # the client's record (or the one it sent the server)
    server_side: dict[str, Any] | None = None


@dataclass
class NetworkJudgement:
    results: list[CheckResult] = field(default_factory=list)
    failed: dict[tuple[str, str], bool] = field(default_factory=dict)  # pair_key -> FAILed
    matrix: dict[str, dict[str, float | None]] = field(default_factory=dict)  # GB/s, the slower way


def records(documents: dict[str, dict[str, Any] | None]) -> dict[tuple[str, str], PairRecord]:
    """Every pair the nodes' documents mention, keyed by pair_key."""
    found: dict[tuple[str, str], PairRecord] = {}
    for node, document in documents.items():
        for step in (document or {}).get("rounds") or []:
            partner = step.get("partner")
            if not partner or step.get("idle"):
                continue
            server, client = (node, partner) if step.get("role") == "server" else (partner, node)
            record = found.setdefault(pair_key(server, client), PairRecord(server, client))
            if step.get("role") == "client":
                record.measured = step
            else:
                record.server_side = step
    for record in found.values():
        if record.measured is None and isinstance((record.server_side or {}).get("client"), dict):
            record.measured = {"control": {"outcome": "ok"}, **record.server_side["client"]}
    return found


def judge(
    pairs: dict[tuple[str, str], PairRecord], nets: dict[str, NodeNet], limits: ClusterLimits
) -> NetworkJudgement:
    out = NetworkJudgement()
    for node in nets:
        out.matrix[node] = {other: None for other in nets if other != node}
    for key, record in sorted(pairs.items()):
        result = judge_pair(record, nets, limits)
        out.results.append(result)
        out.failed[key] = result.status == FAIL
        if isinstance(result.value, float):
            a, b = key
            out.matrix.setdefault(a, {})[b] = result.value
            out.matrix.setdefault(b, {})[a] = result.value
        clock = _clock(record, limits)
        if clock is not None:
            out.results.append(clock)
    return out


def _line_gbs(record: PairRecord, nets: dict[str, NodeNet]) -> float | None:
    rates = [nets[n].line_rate_mbps for n in (record.server, record.client) if n in nets]
    known = [r for r in rates if isinstance(r, (int, float)) and r > 0]
    return min(known) / MBPS_PER_GBS if len(known) == 2 else None


def judge_pair(record: PairRecord, nets: dict[str, NodeNet], limits: ClusterLimits) -> CheckResult:
    subject = pair_subject(record.server, record.client)
    check = "cluster.network.pair"
    measured = record.measured
    server_side = record.server_side or {}
    evidence: dict[str, Any] = {
        "server": record.server,
        "client": record.client,
        "client_record": measured,
        "server_record": server_side,
    }
    if "cannot listen" in str(server_side.get("error") or ""):
        return verdict(
            check,
            subject,
            FAIL,
            code="CLUSTER_RENDEZVOUS_PORT_IN_USE",
            said=f"{record.server}: {server_side['error']}",
            evidence=evidence,
        )
    if measured is None:
        said = server_side.get("error") or f"{record.client} reported nothing for this pair"
        return verdict(
            check, subject, FAIL, code="CLUSTER_RENDEZVOUS_PORT_BLOCKED", said=str(said), evidence=evidence
        )
    control = measured.get("control") or {}
    if control.get("outcome") != "ok":
        said = (
            f"{record.client} -> {record.server}:{control.get('port')} (the rendezvous port): "
            f"{control.get('outcome') or 'no answer'}"
        )
        return verdict(
            check, subject, FAIL, code="CLUSTER_RENDEZVOUS_PORT_BLOCKED", said=said, evidence=evidence
        )
    probe = measured.get("probe") or {}
    if probe.get("outcome") != "ok":
        said = (
            f"{record.client} -> {record.server}:{probe.get('port')} (an ephemeral port, where the "
            f"collectives' sockets live): {probe.get('outcome')}; the rendezvous port answered"
        )
        return verdict(check, subject, FAIL, code="CLUSTER_PORTS_BLOCKED", said=said, evidence=evidence)
    ping = measured.get("ping") or {}
    if ping.get("ran") and ping.get("received", 0) < ping.get("sent", 0):
        status = FAIL if ping.get("received", 0) == 0 else WARN
        said = f"{ping.get('received')} of {ping.get('sent')} pings answered"
        return verdict(check, subject, status, code="CLUSTER_PING_LOST", said=said, evidence=evidence)
    big = measured.get("ping_mtu") or {}
    if big.get("ran") and big.get("received", 0) < big.get("sent", 0):
        size = int(big.get("size") or 0)
        said = (
            f"{big.get('received')} of {big.get('sent')} pings of {size} bytes with don't-fragment answered "
            f"(a {size + 28}-byte packet: the MTU), small ones all"
        )
        return verdict(check, subject, FAIL, code="CLUSTER_MTU_BLACKHOLE", said=said, evidence=evidence)
    return _bandwidth(check, subject, record, measured.get("iperf") or {}, nets, limits, evidence)


def _bandwidth(
    check: str,
    subject: str,
    record: PairRecord,
    iperf: dict[str, Any],
    nets: dict[str, NodeNet],
    limits: ClusterLimits,
    evidence: dict[str, Any],
) -> CheckResult:
    if not iperf.get("ran"):
        return verdict(
            check,
            subject,
            INCONCLUSIVE,
            code="CLUSTER_IPERF_MISSING",
            said=f"reachable; bandwidth not measured: {iperf.get('error')}",
            evidence=evidence,
        )
    forward, reverse = iperf.get("forward_gbs"), iperf.get("reverse_gbs")
    ways = [w for w in (forward, reverse) if isinstance(w, (int, float))]
    value = round(min(ways), 4) if ways else None
    windows = [
        min(pair)
        for pair in zip(
            iperf.get("windows_forward_gbs") or [], iperf.get("windows_reverse_gbs") or [], strict=False
        )
    ]
    evidence.update(
        forward_gbs=forward,
        reverse_gbs=reverse,
        windows_gbs=windows,
        directions={
            f"{record.client}->{record.server}": forward,
            f"{record.server}->{record.client}": reverse,
        },
    )
    line = _line_gbs(record, nets)
    common = {"metric": "tcp_bandwidth", "value": value, "unit": "GB/s", "evidence": evidence}
    if value is None:
        return verdict(
            check,
            subject,
            INCONCLUSIVE,
            code="CLUSTER_IPERF_MISSING",
            said="iperf3 reported no figure",
            **common,
        )
    if line is None:
        return verdict(
            check,
            subject,
            INCONCLUSIVE,
            code="CLUSTER_LINE_RATE_UNKNOWN",
            said=f"{value:.3g} GB/s; no line rate known for {record.server} or {record.client}",
            **common,
        )
    evidence["line_rate_gbs"] = line
    return floor_verdict(
        check,
        subject,
        value,
        line,
        (limits.bandwidth_warn_fraction_of_line, limits.bandwidth_fail_fraction_of_line),
        code="CLUSTER_BANDWIDTH_LOW",
        said=f"{value:.3g} GB/s the slower way",
        of=f"the {line:.4g} GB/s line rate",
        fraction_key="fraction_of_line",
        **common,
    )


def _clock(record: PairRecord, limits: ClusterLimits) -> CheckResult | None:
    clock = (record.measured or {}).get("clock")
    if not isinstance(clock, dict) or not isinstance(clock.get("offset_s"), (int, float)):
        return None
    offset, rtt = float(clock["offset_s"]), float(clock.get("rtt_s") or 0.0)
    subject = pair_subject(record.server, record.client)
    skew = max(0.0, abs(offset) - rtt / 2)  # what is left beyond the sample's own uncertainty
    said = (
        f"{record.server}'s clock is {offset:+.4f} s from {record.client}'s (round trip {rtt * 1000:.1f} ms)"
    )
    threshold = f"|offset| <= {limits.clock_skew_warn_s:g} s (FAIL beyond {limits.clock_skew_fail_s:g} s)"
    common = {
        "metric": "clock_offset",
        "value": round(offset, 4),
        "unit": "s",
        "threshold": threshold,
        "evidence": {"clock": clock},
    }
    if skew > limits.clock_skew_fail_s:
        return verdict("cluster.network.clock", subject, FAIL, code="CLUSTER_CLOCK_SKEW", said=said, **common)
    if skew > limits.clock_skew_warn_s:
        return verdict("cluster.network.clock", subject, WARN, code="CLUSTER_CLOCK_SKEW", said=said, **common)
    return verdict("cluster.network.clock", subject, PASS, said=said, **common)


def median_pair(judgement: NetworkJudgement) -> float | None:
    """The median pair figure (GB/s): the summary line's 'typical' pair."""
    figures = [
        r.value for r in judgement.results if r.id == "cluster.network.pair" and isinstance(r.value, float)
    ]
    return stats.median(figures) if figures else None
