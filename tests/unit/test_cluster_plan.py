"""validate --cluster's schedule: every pair once, in rounds where no node meets two partners."""

from itertools import combinations

import pytest

from r9700ctl.cluster.plan import Measure, disjoint_rounds, pair_key, pair_plans, rounds


@pytest.mark.parametrize("count", [2, 3, 4, 5, 8, 9])
def test_rounds_cover_every_pair_exactly_once_and_no_node_twice_in_a_round(count):
    """The issue's promise: disjoint pairs in round-robin rounds, n-1 rounds covering every pair."""
    nodes = [f"node{i}" for i in range(1, count + 1)]
    schedule = rounds(nodes)
    seen = [pair_key(a, b) for pairs in schedule for a, b in pairs]
    assert sorted(seen) == sorted(pair_key(a, b) for a, b in combinations(nodes, 2))
    for pairs in schedule:
        members = [n for pair in pairs for n in pair]
        assert len(members) == len(set(members))
    assert len(schedule) == (count - 1 if count % 2 == 0 else count)


def test_retests_are_grouped_into_rounds_of_disjoint_pairs():
    schedule = disjoint_rounds([("a", "b"), ("a", "c"), ("d", "e"), ("b", "c")])
    assert schedule == [[("a", "b"), ("d", "e")], [("a", "c")], [("b", "c")]]


def test_each_node_gets_its_role_partner_and_the_smaller_mtu_of_the_pair():
    plans = pair_plans(
        [[("n1", "n2")]], {"n1": "10.0.0.1", "n2": "10.0.0.2"}, {"n1": 9000, "n2": 1500}, Measure()
    )
    assert plans["n1"]["rounds"] == [{"role": "server", "partner": "n2", "address": "10.0.0.2"}]
    assert plans["n2"]["rounds"] == [{"role": "client", "partner": "n1", "address": "10.0.0.1", "mtu": 1500}]
    assert plans["n2"]["port"] == 29400 and plans["n2"]["address"] == "10.0.0.2"


# -- phase 4: the pairwise collective's plan ------------------------------------------------------

from r9700ctl.cluster import collective  # noqa: E402


@pytest.mark.parametrize(("count", "gpus"), [(2, 1), (3, 0), (4, 4), (5, 2)])
def test_phase_4_meets_every_pair_in_rounds_one_gpu_then_all_gpus_then_the_cluster(count, gpus):
    """Issue 21: "across each pair of nodes, first one GPU per node, then all GPUs; then the full
    cluster". Before, phase 4 ran one round of disjoint pairs (plus retests), not every pair."""
    nodes = [f"node{i}" for i in range(1, count + 1)]
    steps = collective.schedule(nodes, gpus, "run")
    every_pair = sorted(pair_key(a, b) for a, b in combinations(nodes, 2))
    one = [s for s in steps if s["name"].endswith(" x1") and not s["name"].startswith("cluster")]
    assert sorted(pair_key(*s["members"]) for s in one) == every_pair
    assert [pair_key(*s["members"]) for s in one] == [pair_key(a, b) for r in rounds(nodes) for a, b in r]
    every = [s for s in steps if s["name"].endswith(" xall") and not s["name"].startswith("cluster")]
    if gpus > 1:  # the same pairs, in the same rounds, with every GPU of each node
        assert [s["members"] for s in every] == [s["members"] for s in one]
        assert {s["nproc_per_node"] for s in every} == {gpus}
    else:
        assert every == []
    assert {s["nproc_per_node"] for s in one} == {1}
    if count == 2:  # the cluster of two is their pair, measured already
        assert steps == [*one, *every]
        return
    last = steps[-1]
    assert last["members"] == nodes and last["name"] == f"cluster x{'all' if gpus > 1 else '1'}"
    assert steps == [*one, *every, last]


def test_each_node_runs_its_steps_in_the_one_global_order_under_one_wall_clock():
    nodes = ["a", "b", "c", "d"]
    steps = collective.schedule(nodes, 1, "run")
    addresses = {n: f"10.0.0.{i}" for i, n in enumerate(nodes, start=1)}
    wall = collective.wall_clock_s(steps)
    plans = collective.plans(steps, addresses, wall)
    order = [s["name"] for s in steps]
    for plan in plans.values():
        names = [s["name"] for s in plan["steps"]]
        assert names == [n for n in order if n in names]  # no node waits on a step another skipped
        assert len(names) == len(nodes)  # n-1 partners, then the cluster
        assert plan["timeout_s"] == wall
    assert wall == collective.JOIN_TIMEOUT_S + collective.STEP_BUDGET_S * len(nodes)


def test_phase_4_runs_every_step_in_one_playbook_run_and_judges_every_pair():
    from r9700ctl.agentpack import data_document
    from r9700ctl.cluster.facts import NodeNet
    from r9700ctl.cluster.launch import NodeOutput
    from r9700ctl.cluster.limits import limits
    from r9700ctl.cluster.model import ClusterReport, Matrix, PhaseReport
    from r9700ctl.cluster.service import ClusterSettings, _Run

    nodes = ["node1", "node2", "node3", "node4"]
    calls = []

    class Launcher:
        def run(self, label, phase, plans, timeout_s):
            calls.append((label, phase, plans, timeout_s))
            documents = {}
            for node, plan in plans.items():
                steps = []
                for step in plan["steps"]:
                    slow = "node3" in step["members"] and "node4" in step["members"]
                    busbw = 0.01 if slow else 0.05
                    row = {"size_bytes": 8 << 20, "busbw_gbs": busbw}
                    sweep = {"sizes": [row], "wrong_total": 0, "world_size": len(step["members"])}
                    steps.append({"step": step["name"], "torchrun": {}, "ranks": [{"sweep": sweep}]})
                documents[node] = NodeOutput(node, document={"node": node, "steps": steps})
            return documents

    report = ClusterReport(group="g", network="10.0.0.0/24", nodes=nodes, reports_dir=None)
    report.nets = {n: NodeNet(n, "eth1", f"10.0.0.{i}", 1500, 500, 500) for i, n in enumerate(nodes, 1)}
    figures = {a: {b: 0.06 for b in nodes if b != a} for a in nodes}
    report.phases.append(PhaseReport("network", [], matrix=Matrix("GB/s", figures)))
    settings = ClusterSettings(network="10.0.0.0/24", line_rate_mbps={}, rdma={"mode": "off"})
    run = _Run(report, Launcher(), settings, limits(data_document("thresholds")), Measure())
    phase = run.collective()
    ((label, kind, plans, timeout),) = calls
    assert (label, kind, sorted(plans)) == ("4-collective", "collective", nodes)
    assert timeout == collective.wall_clock_s(collective.schedule(nodes, 0, "x")) + 60
    pairs = {r.subject: r for r in phase.results if r.id == "cluster.collective.pair"}
    assert sorted(pairs) == [f"{a}<->{b}" for a, b in combinations(nodes, 2)]
    assert pairs["node3<->node4"].status == "FAIL" and pairs["node1<->node2"].status == "PASS"
    link = [r for r in phase.results if r.id == "cluster.isolation.link"]
    assert [r.subject for r in link] == ["node3<->node4"]
    assert phase.matrix.values["node1"]["node4"] == 0.05
