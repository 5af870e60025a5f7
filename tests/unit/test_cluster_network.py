"""Phase 2's judge: one verdict per pair from its first failing step; bandwidth against line rate."""

from pathlib import Path

import pytest

from r9700ctl.agent.cluster.probes import parse_iperf, parse_ping
from r9700ctl.agentpack import data_document
from r9700ctl.cluster.facts import NodeNet
from r9700ctl.cluster.limits import limits
from r9700ctl.cluster.network import PairRecord, judge, judge_pair, records

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "cluster"
LIMITS = limits(data_document("thresholds"))
NETS = {n: NodeNet(n, "eth1", f"10.0.0.{i}", 1500, 10000, 1000) for i, n in enumerate(["a", "b", "c"], 1)}


def recorded(name: str) -> str:
    return (FIXTURES / name).read_text().split("\n", 1)[1]  # the first line names the source


def healthy(gbs: float = 0.117) -> dict:
    ok = {"ran": True, "sent": 3, "received": 3, "local_too_long": False}
    return {
        "control": {"port": 29400, "outcome": "ok"},
        "probe": {"port": 40000, "outcome": "ok"},
        "ping": ok,
        "ping_mtu": {**ok, "size": 1472},
        "iperf": {
            "ran": True,
            "forward_gbs": gbs,
            "reverse_gbs": gbs + 0.001,
            "windows_forward_gbs": [gbs] * 3,
            "windows_reverse_gbs": [gbs] * 3,
        },
        "clock": {"offset_s": 0.0002, "rtt_s": 0.0004},
    }


def test_iperf3_bidir_json_as_recorded_gives_both_ways_and_their_windows():
    parsed = parse_iperf(recorded("iperf3-bidir-lab.json"))
    assert parsed["ran"] is True
    assert parsed["forward_gbs"] == pytest.approx(0.1169, abs=1e-3)  # 935 Mbit/s received
    assert parsed["reverse_gbs"] == pytest.approx(0.1170, abs=1e-3)
    assert len(parsed["windows_forward_gbs"]) == len(parsed["windows_reverse_gbs"]) >= 3


def test_an_iperf3_that_could_not_connect_is_no_figure_with_its_reason():
    parsed = parse_iperf(
        '{"start": {}, "intervals": [], "end": {}, "error": "unable to connect to server"}', 1
    )
    assert parsed == {"ran": False, "error": "iperf3: unable to connect to server"}


def test_a_df_ping_too_large_for_the_local_mtu_counts_as_lost_and_says_why():
    parsed = parse_ping(recorded("ping-df-too-long-lab.txt"), 2)
    assert parsed == {"sent": 2, "received": 0, "local_too_long": True}


@pytest.mark.parametrize(
    ("change", "status", "code"),
    [
        ({"control": {"port": 29400, "outcome": "timeout"}}, "FAIL", "CLUSTER_RENDEZVOUS_PORT_BLOCKED"),
        ({"probe": {"port": 40000, "outcome": "timeout"}}, "FAIL", "CLUSTER_PORTS_BLOCKED"),
        ({"ping": {"ran": True, "sent": 3, "received": 0}}, "FAIL", "CLUSTER_PING_LOST"),
        ({"ping": {"ran": True, "sent": 3, "received": 2}}, "WARN", "CLUSTER_PING_LOST"),
        (
            {"ping_mtu": {"ran": True, "sent": 3, "received": 0, "size": 8972}},
            "FAIL",
            "CLUSTER_MTU_BLACKHOLE",
        ),
        (
            {"iperf": {"ran": False, "error": "iperf3 is not installed"}},
            "INCONCLUSIVE",
            "CLUSTER_IPERF_MISSING",
        ),
        ({}, "PASS", ""),
    ],
    ids=[
        "rendezvous-dropped",
        "ephemeral-dropped",
        "ping-lost",
        "ping-loss",
        "mtu-blackhole",
        "no-iperf",
        "healthy",
    ],
)
def test_the_first_failing_step_decides_the_pair(change, status, code):
    result = judge_pair(PairRecord("a", "b", {**healthy(), **change}), NETS, LIMITS)
    assert (result.status, result.code) == (status, code)
    assert result.subject == "a<->b"


@pytest.mark.parametrize(
    ("gbs", "status"),
    [(0.117, "PASS"), (0.09, "WARN"), (0.0119, "FAIL")],
    ids=["0.94-of-line", "0.72-of-line", "0.10-of-line (slow-link)"],
)
def test_bandwidth_is_judged_against_the_slower_nics_line_rate(gbs, status):
    result = judge_pair(PairRecord("a", "b", healthy(gbs)), NETS, LIMITS)
    assert result.status == status and result.unit == "GB/s" and result.value == pytest.approx(gbs)
    assert "0.125 GB/s" in result.threshold  # 1000 Mb/s = 0.125 GB/s
    if status != "PASS":
        assert result.code == "CLUSTER_BANDWIDTH_LOW"


def test_no_line_rate_known_is_inconclusive_not_a_pass():
    nets = {**NETS, "b": NodeNet("b", "eth1", "10.0.0.2", 1500, None, None)}
    result = judge_pair(PairRecord("a", "b", healthy()), nets, LIMITS)
    assert (result.status, result.code) == ("INCONCLUSIVE", "CLUSTER_LINE_RATE_UNKNOWN")


def test_a_pair_whose_client_wrote_nothing_is_judged_from_the_servers_side():
    server = {
        "round": 0,
        "role": "server",
        "partner": "b",
        "error": "b did not connect to 10.0.0.1:29400 within 60 s",
    }
    pairs = records({"a": {"rounds": [server]}, "b": None})
    result = judge_pair(pairs[("a", "b")], NETS, LIMITS)
    assert result.status == "FAIL" and "did not connect" in result.hint


def test_clocks_far_apart_are_found_per_pair():
    """torch's rendezvous drops a node whose heartbeats look 15 s old: 12 s apart FAILs."""
    slow = {**healthy(), "clock": {"offset_s": 12.0, "rtt_s": 0.001}}
    judged = judge({("a", "b"): PairRecord("a", "b", slow)}, NETS, LIMITS)
    (clock,) = [r for r in judged.results if r.id == "cluster.network.clock"]
    assert (clock.status, clock.code) == ("FAIL", "CLUSTER_CLOCK_SKEW")


def test_the_matrix_holds_each_pairs_figure_both_ways():
    judged = judge({("a", "b"): PairRecord("a", "b", healthy(0.1))}, NETS, LIMITS)
    assert judged.matrix["a"]["b"] == judged.matrix["b"]["a"] == pytest.approx(0.1)
    assert judged.matrix["a"]["c"] is None  # not measured, not zero
