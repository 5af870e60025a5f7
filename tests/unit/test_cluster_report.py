"""validate --cluster's report in every format: table and culprit, JSON, HTML heatmap, JUnit, history."""

from __future__ import annotations

import json

from r9700ctl.cluster.facts import NodeNet
from r9700ctl.cluster.history import as_fleet_document, record_history
from r9700ctl.cluster.model import ClusterReport, Matrix, PhaseReport
from r9700ctl.cluster.verdicts import verdict
from r9700ctl.history.runs import HistoryPlan
from r9700ctl.report.cluster import culprit_lines, matrix_lines
from r9700ctl.report.cluster_formats import render_html
from r9700ctl.report.formats import render_junit

NODES = ["node1", "node2", "node3"]


def pair(a: str, b: str, gbs: float, status: str = "PASS", code: str = ""):
    return verdict(
        "cluster.network.pair",
        f"{a}<->{b}",
        status,
        code=code,
        metric="tcp_bandwidth",
        value=gbs,
        unit="GB/s",
        said=f"{gbs} GB/s",
        evidence={"windows_gbs": [gbs, gbs * 1.01, gbs * 0.99]},
    )


def report(slow: bool = False) -> ClusterReport:
    figure = 0.012 if slow else 0.117
    status, code = ("FAIL", "CLUSTER_BANDWIDTH_LOW") if slow else ("PASS", "")
    network = [
        pair("node1", "node2", 0.117),
        pair("node1", "node3", figure, status, code),
        pair("node2", "node3", figure, status, code),
    ]
    if slow:
        network.append(
            verdict(
                "cluster.isolation.node",
                "node3",
                "FAIL",
                code="CLUSTER_NODE_BLAMED",
                said="node3 failed the network phase with node1, node2",
            )
        )
    values = {
        "node1": {"node2": 0.117, "node3": figure},
        "node2": {"node1": 0.117, "node3": figure},
        "node3": {"node1": figure, "node2": figure},
    }
    facts = [verdict("cluster.facts.mtu", n, "PASS", said="MTU 1500") for n in NODES]
    return ClusterReport(
        group="r9700_nodes",
        network="10.214.1.0/24",
        nodes=NODES,
        started="2026-12-03T18:00:00+00:00",
        phases=[PhaseReport("facts", facts), PhaseReport("network", network, matrix=Matrix("GB/s", values))],
        nets={n: NodeNet(n, "eth1", f"10.214.1.{11 + i}", 1500, 10000, 1000) for i, n in enumerate(NODES)},
    )


def test_the_culprit_line_names_the_blamed_node_the_phase_and_the_next_step():
    lines = culprit_lines(report(slow=True))
    assert lines[0].startswith("culprit: node node3, found by the network phase: FAIL CLUSTER_NODE_BLAMED")
    assert lines[1].startswith("next: take the node out of the job's host list")


def test_the_json_carries_the_schema_culprit_and_matrix():
    document = json.loads(json.dumps(report(slow=True).to_dict()))
    assert document["schema"] == "r9700ctl.validate-cluster/1" and document["exit_code"] == 2
    assert document["culprit"]["subject"] == "node3"
    assert document["phases"][1]["matrix"]["values"]["node1"]["node3"] == 0.012


def test_the_html_page_draws_a_heatmap_per_pairwise_phase_and_junit_has_a_suite_per_node():
    page = render_html(report(slow=True))
    assert page.count("<svg") == 1 and "CLUSTER_NODE_BLAMED" in page and "Next:" in page
    junit = render_junit(as_fleet_document(report(slow=True)))
    assert 'name="cluster@r9700_nodes"' in junit and 'name="node3"' in junit and "<failure" in junit
    assert "code: CLUSTER_NODE_BLAMED" in junit


def test_matrix_text_leaves_unmeasured_cells_empty():
    rows = matrix_lines(Matrix("GB/s", {"a": {"b": 0.1}, "b": {"a": 0.1}, "c": {}}), "network")
    assert rows[0] == "network (GB/s)" and rows[-1].split() == ["c", "-", "-", "-"]


def test_a_run_is_recorded_and_the_next_one_compares_pair_figures_with_it(tmp_path):
    """--compare works on cluster figures: the pairs live under the pseudo-node cluster@GROUP."""
    path = tmp_path / "history.db"
    first = HistoryPlan(path=path)
    record_history(report(), first)
    assert first.run_id is not None
    again = report(slow=True)
    added = record_history(again, HistoryPlan(path=path, compare_with="last"))
    compared = [r for r in added if r.id != "baseline.coverage"]
    assert {r.subject for r in compared} >= {"node1<->node3", "node2<->node3"}
    # Bug pinned: each node's facts (no figures) got an INCONCLUSIVE "nothing compared", which made
    # every compared cluster run inconclusive; only cluster@GROUP holds figures.
    assert [r.status for r in added if r.id == "baseline.coverage"] == ["PASS"]
    assert again.phases[-1].name == "baseline"


def ten_gbe(node1_node3: float) -> ClusterReport:
    """A 10 GbE cluster (1.25 GB/s line rate; pairs at ~1.15 GB/s, above the history's 0.5 GB/s
    bandwidth floor, under which no relative change is judged)."""
    network = [
        pair("node1", "node2", 1.15),
        pair("node1", "node3", node1_node3),
        pair("node2", "node3", 1.16),
    ]
    return ClusterReport(
        group="r9700_nodes",
        network="10.214.1.0/24",
        nodes=NODES,
        started="2026-12-03T18:00:00+00:00",
        phases=[PhaseReport("network", network)],
        nets={n: NodeNet(n, "eth1", f"10.214.1.{11 + i}", 9000, 10000, 10000) for i, n in enumerate(NODES)},
    )


def test_compare_flags_the_pair_that_got_slower_and_only_that_one(tmp_path):
    """The history's three-gate rule on a pair's figure: node1<->node3 from 1.15 to 0.92 GB/s is a
    regression (FAIL BASELINE_REGRESSION) though the network phase alone still calls it PASS/WARN."""
    path = tmp_path / "history.db"
    record_history(ten_gbe(1.15), HistoryPlan(path=path, save_as="golden"))
    again = ten_gbe(0.92)
    added = record_history(again, HistoryPlan(path=path, compare_with="golden"))
    by_pair = {r.subject: (r.status, r.code) for r in added if r.id == "baseline.tcp_bandwidth"}
    assert by_pair == {
        "node1<->node2": ("PASS", ""),
        "node1<->node3": ("FAIL", "BASELINE_REGRESSION"),
        "node2<->node3": ("PASS", ""),
    }
    assert again.status == "FAIL" and again.culprit()["subject"] == "node1<->node3"
