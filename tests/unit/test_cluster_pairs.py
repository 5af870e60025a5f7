"""The node side of phase 2, with real sockets: three "nodes" on loopback addresses run their rounds.

Pings and iperf3 are faked (a pause, no iperf3), the control protocol and the TCP probes are real.
"""

import socket
import threading
import time

import pytest

from r9700ctl.agent.cluster import pairs, probes
from r9700ctl.agentpack import data_document
from r9700ctl.cluster.facts import NodeNet
from r9700ctl.cluster.limits import limits
from r9700ctl.cluster.network import judge, records
from r9700ctl.cluster.plan import Measure, pair_plans, rounds

ADDRESSES = {"node1": "127.0.0.11", "node2": "127.0.0.12", "node3": "127.0.0.13"}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def slow_ping(monkeypatch):
    """Each ping takes 0.5 s: a server stays busy in its round while an idle node moves on."""

    def ping(address, size, count, source=None):
        time.sleep(0.5)
        return {"ran": True, "size": size, "sent": count, "received": count, "local_too_long": False}

    monkeypatch.setattr(probes, "ping", ping)
    monkeypatch.setattr(probes, "iperf_server", lambda address, port: None)


def run_all(plans):
    out = {}
    threads = [threading.Thread(target=lambda n=n: out.__setitem__(n, pairs.run(plans[n]))) for n in plans]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    return out


def test_a_node_that_reaches_its_next_partner_early_waits_for_it_instead_of_failing(slow_ping):
    """Bug pinned: node1 (idle in round 0) connected to node3 while node3 still served node2; the
    kernel queued the connection, node3 closed it on leaving round 0, and node1 reported 'the server
    accepted but did not answer' for a healthy pair."""
    measure = Measure(wait_s=20, connect_timeout_s=2, iperf_seconds=1)
    plans = pair_plans(
        rounds(list(ADDRESSES)), ADDRESSES, {n: 1500 for n in ADDRESSES}, measure, port=free_port()
    )
    documents = run_all(plans)
    found = records(documents)
    assert sorted(found) == [("node1", "node2"), ("node1", "node3"), ("node2", "node3")]
    for record in found.values():
        assert record.measured["control"]["outcome"] == "ok", record
        assert record.measured["probe"]["outcome"] == "ok", record
        assert abs(record.measured["clock"]["offset_s"]) < 0.5
    nets = {n: NodeNet(n, "lo", a, 1500, None, 1000) for n, a in ADDRESSES.items()}
    verdicts = judge(found, nets, limits(data_document("thresholds"))).results
    statuses = {r.subject: r.status for r in verdicts if r.id == "cluster.network.pair"}
    assert statuses == dict.fromkeys(["node1<->node2", "node1<->node3", "node2<->node3"], "INCONCLUSIVE")


def test_a_partner_that_never_comes_is_reported_after_the_wait(slow_ping):
    measure = Measure(wait_s=1.5, connect_timeout_s=1, iperf_seconds=1)
    plans = pair_plans([[("node1", "node2")]], ADDRESSES, {}, measure, port=free_port())
    (record,) = pairs.run(plans["node1"])["rounds"]
    assert "did not connect" in record["error"]
    (record,) = pairs.run(plans["node2"])["rounds"]
    assert record["control"]["outcome"] == "refused"
