"""Phases 3 and 4's judges: joined or not, right answers, the interface really used, busbw vs network."""

from pathlib import Path

from r9700ctl.agentpack import data_document
from r9700ctl.cluster.collective import judge_step, steps_for
from r9700ctl.cluster.facts import NodeNet
from r9700ctl.cluster.limits import limits
from r9700ctl.cluster.rendezvous import judge, judge_node, nccl_interfaces

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "cluster"
LIMITS = limits(data_document("thresholds"))
NET = NodeNet("node1", "ens1f0", "10.10.0.11", 1500, 25000, None, gpus=4)


def smoke_document(connections=("10.10.0.11:40000",), wrong=0, gpu=None, lines=()):
    rank = {
        "rank": 0,
        "world_size": 3,
        "gloo": {
            "wrong": wrong,
            "expected": 6.0,
            "connections": [{"local": c, "remote": "10.10.0.12:1"} for c in connections],
        },
        "gpu": gpu or {"ran": False, "reason": "torch sees no GPU"},
    }
    return {"torchrun": {"rc": 0, "nccl_lines": list(lines), "tail": []}, "ranks": [rank]}


def test_nccl_debug_lines_as_posted_name_the_interface_rccl_took():
    lines = (FIXTURES / "rccl-nccl-debug-7900xtx.txt").read_text().splitlines()[1:]
    assert nccl_interfaces(lines) == {"Bootstrap": ["eth0"], "NET/Socket": ["eth0"]}


def test_nccl_on_a_node_without_rdma_names_no_ib_device():
    """Recorded on the H200: NET/IB says "Using [RO]; OOB eth0:..." with no device; it was read as
    an IB device named "RO];"."""
    lines = (FIXTURES / "nccl-debug-h200-no-ib.txt").read_text().splitlines()[1:]
    assert nccl_interfaces(lines) == {"NET/IB": ["eth0"], "NET/Socket": ["eth0"]}
    assert nccl_interfaces(["x NCCL INFO NET/IB : Using [0]mlx5_0:1/RoCE [RO]; OOB ens1f0:10.0.0.1<0>"]) == {
        "NET/IB": ["mlx5_0", "ens1f0"]
    }


def test_rccl_on_another_interface_than_the_cluster_nic_fails():
    """ROCm/legacy-rocm-build#6074: RCCL picked a Docker bridge; the same shape as the posted log."""
    lines = (FIXTURES / "rccl-nccl-debug-7900xtx.txt").read_text().splitlines()[1:]
    results = judge_node("node1", smoke_document(gpu={"ran": True, "wrong": 0}, lines=lines), NET)
    rccl = next(r for r in results if r.id == "cluster.rendezvous.rccl")
    assert (rccl.status, rccl.code) == ("FAIL", "CLUSTER_WRONG_INTERFACE") and "eth0" in rccl.hint


def test_gloo_connections_from_another_address_fail_the_node():
    """A host name on 127.0.1.1 without GLOO_SOCKET_IFNAME: gloo binds to loopback (pytorch/gloo#70)."""
    results = judge_node("node1", smoke_document(connections=("127.0.1.1:40000",)), NET)
    gloo = next(r for r in results if r.id == "cluster.rendezvous.gloo")
    assert (gloo.status, gloo.code) == ("FAIL", "CLUSTER_WRONG_INTERFACE")


def test_a_healthy_cpu_only_node_passes_gloo_and_skips_rccl_saying_why():
    statuses = {r.id: (r.status, r.code) for r in judge_node("node1", smoke_document(), NET)}
    assert statuses == {
        "cluster.rendezvous.join": ("PASS", ""),
        "cluster.rendezvous.gloo": ("PASS", ""),
        "cluster.rendezvous.rccl": ("SKIP", "CLUSTER_NO_GPU"),
    }


def test_an_rccl_error_after_gloo_worked_fails_the_rccl_step_and_never_says_no_gpu():
    """The worker records the exception of the one-element NCCL all-reduce and writes no 'gpu' entry;
    the judge said SKIP CLUSTER_NO_GPU ("no GPU") for it, passing a node whose RCCL could not start."""
    document = smoke_document()
    del document["ranks"][0]["gpu"]
    document["ranks"][0]["error"] = (
        "DistBackendError: NCCL error: internal error - Bootstrap : no socket interface found"
    )
    rccl = next(r for r in judge_node("node1", document, NET) if r.id == "cluster.rendezvous.rccl")
    assert (rccl.status, rccl.code) == ("FAIL", "CLUSTER_RCCL_FAILED")
    assert "no socket interface found" in rccl.hint


def test_a_wrong_sum_fails_and_a_rank_that_never_joined_names_the_reason():
    wrong = judge_node("node1", smoke_document(wrong=3), NET)
    assert any(r.code == "CLUSTER_WRONG_RESULT" for r in wrong)
    stuck = {
        "torchrun": {"rc": 1, "timed_out": False, "tail": []},
        "ranks": [{"rank": 0, "error": "RendezvousTimeoutError: the rendezvous timed out"}],
    }
    (result,) = judge_node("node1", stuck, NET)
    assert (result.status, result.code) == (
        "FAIL",
        "CLUSTER_RENDEZVOUS_FAILED",
    ) and "timed out" in result.hint
    (missing,) = judge({"node1": None}, {"node1": "unreachable"}, {"node1": NET})
    assert (missing.status, missing.code) == ("ERROR", "CLUSTER_UNREACHABLE")


def sweep(busbw, wrong=0):
    size = 8 << 20
    return {
        "ranks": [
            {
                "rank": 0,
                "world_size": 2,
                "sweep": {
                    "backend": "gloo",
                    "world_size": 2,
                    "wrong_total": wrong,
                    "sizes": [{"size_bytes": size, "busbw_gbs": busbw, "windows_busbw_gbs": [busbw] * 3}],
                },
            }
        ],
        "torchrun": {},
    }


def test_busbw_is_held_to_the_pairs_network_figure():
    assert judge_step("a<->b x1", ["a", "b"], sweep(0.08), 0.117, LIMITS).status == "PASS"
    assert judge_step("a<->b x1", ["a", "b"], sweep(0.04), 0.117, LIMITS).status == "WARN"
    low = judge_step("a<->b x1", ["a", "b"], sweep(0.02), 0.117, LIMITS)
    assert (low.status, low.code, low.unit) == ("FAIL", "CLUSTER_BUSBW_LOW", "GB/s")
    assert (
        judge_step("a<->b x1", ["a", "b"], sweep(0.08, wrong=1), 0.117, LIMITS).code == "CLUSTER_WRONG_RESULT"
    )
    assert judge_step("cluster x1", ["a", "b", "c"], None, 0.1, LIMITS).status == "FAIL"


def test_steps_pair_first_then_all_gpus_then_the_cluster():
    names = [s["name"] for s in steps_for([("a", "b"), ("c", "d")], ["a", "b", "c", "d"], 4, "run", True)]
    assert names == ["a<->b x1", "c<->d x1", "a<->b xall", "c<->d xall", "cluster xall"]
    cpu = [s["name"] for s in steps_for([("a", "b")], ["a", "b", "c"], 0, "run", True)]
    assert cpu == ["a<->b x1", "cluster x1"]


def test_every_step_has_a_store_port_of_its_own():
    """Bug pinned: with three nodes, node2 (done with its pair) joined the cluster step through node1's
    port 29400 while node1 still hosted its pair's store there, and failed when that store closed."""
    steps = steps_for([("c", "b"), ("a", "c")], ["a", "b", "c"], 0, "run", True)
    ports = [s["port"] for s in steps]
    assert len(set(ports)) == len(ports) and 29400 not in ports


# -- the transport RCCL took, with r9700_cluster_rdma=roce (issue 21: NCCL_IB_HCA, RoCE v2) ----------

ROCE = {"mode": "roce", "hca": "mlx5_10:1", "gid_index": 3}
ROCE_NET = NodeNet("node1", "enp220s0np0", "11.1.128.136", 1500, 100000, None, gpus=8)


def rccl(lines, net=NET, rdma=None):
    document = smoke_document(gpu={"ran": True, "wrong": 0}, lines=lines)
    return next(r for r in judge_node("node1", document, net, rdma) if r.id == "cluster.rendezvous.rccl")


def fixture_lines(name):
    return (FIXTURES / name).read_text().splitlines()[1:]


def test_with_roce_configured_a_fallback_to_sockets_fails_naming_it():
    """RCCL's own lines (ROCm/rccl#1055): NET/IB found no device, NCCL took NET/Socket without an error
    (NVIDIA/nccl#958). Before, the judge passed it: the interface was the cluster NIC."""
    lines = fixture_lines("rccl-nccl-debug-7900xtx.txt")
    net = NodeNet("node1", "eth0", "172.17.0.2", 1500, 10000, None, gpus=2)
    assert rccl(lines, net).status == "PASS"  # without RDMA configured, sockets on the cluster NIC are right
    fallback = rccl(lines, net, ROCE)
    assert (fallback.status, fallback.code) == ("FAIL", "CLUSTER_RDMA_FALLBACK")
    assert "NET/Socket over eth0" in fallback.hint and "No device found" in fallback.hint
    assert fallback.evidence["network"] == "Socket"


def test_with_roce_configured_rdma_over_the_named_hca_passes_and_another_hca_fails():
    lines = fixture_lines("nccl-debug-roce-ib.txt")
    ok = rccl(lines, ROCE_NET, ROCE)
    assert ok.status == "PASS" and "network IB" in ok.hint, ok.hint
    other = rccl(lines, ROCE_NET, {**ROCE, "hca": "mlx5_0:1"})
    assert (other.status, other.code) == ("FAIL", "CLUSTER_WRONG_INTERFACE") and "mlx5_10" in other.hint
    elsewhere = rccl(lines, NET, ROCE)  # the OOB sockets on another NIC than the cluster's
    assert (elsewhere.status, elsewhere.code) == ("FAIL", "CLUSTER_WRONG_INTERFACE")


def test_a_run_whose_output_names_no_transport_is_inconclusive_never_a_pass():
    """Bug pinned: no NCCL interface line at all (NCCL_DEBUG=WARN in the node's environment wins over
    the agent's default) was a PASS "every rank on one node?"; a validator never passes what it did
    not judge."""
    for rdma in (None, ROCE):
        unseen = rccl([], rdma=rdma)
        assert (unseen.status, unseen.code) == ("INCONCLUSIVE", "CLUSTER_TRANSPORT_UNSEEN")
    # Interfaces named, but not the network: with RoCE configured whether RDMA was taken is unknown.
    posted = fixture_lines("rccl-nccl-debug-7900xtx.txt")
    socket_only = [line for line in posted if "Using network" not in line]
    net = NodeNet("node1", "eth0", "172.17.0.2", 1500, 10000, None, gpus=2)
    assert rccl(socket_only, net).status == "PASS"
    assert rccl(socket_only, net, ROCE).code == "CLUSTER_TRANSPORT_UNSEEN"


def test_the_h200_run_took_sockets_on_its_own_nic():
    lines = fixture_lines("nccl-debug-h200-no-ib.txt")
    net = NodeNet("node1", "eth0", "192.0.2.2", 1500, 10000, None, gpus=1)
    assert rccl(lines, net).status == "PASS"
    assert rccl(lines, net, ROCE).code == "CLUSTER_RDMA_FALLBACK"


# -- the phase's wall clock: CLUSTER_PHASE_TIMEOUT where it ran out --------------------------------


def test_a_step_its_deadline_stopped_is_a_phase_timeout_naming_the_deadline():
    """Before, a step killed at the wall clock read as a failed rendezvous; the catalogue's
    CLUSTER_PHASE_TIMEOUT was given by no judge."""
    torchrun = {"rc": -9, "timed_out": True, "deadline_s": 220.0, "killed": 4, "tail": []}
    step = judge_step("a<->b x1", ["a", "b"], {"torchrun": torchrun, "ranks": []}, 0.1, LIMITS)
    assert (step.status, step.code) == ("FAIL", "CLUSTER_PHASE_TIMEOUT")
    assert "deadline of 220.0 s" in step.hint and "4 process(es)" in step.hint
    late = {"torchrun": {"timed_out": True, "not_started": True, "deadline_s": 2.0}, "ranks": []}
    assert "not started" in judge_step("cluster x1", ["a", "b", "c"], late, 0.1, LIMITS).hint
    (smoke,) = judge_node("node1", {"torchrun": torchrun, "ranks": []}, NET)
    assert (smoke.status, smoke.code) == ("FAIL", "CLUSTER_PHASE_TIMEOUT")
    # A rank that said why keeps its own reason.
    said = {"torchrun": torchrun, "ranks": [{"rank": 0, "error": "RendezvousTimeoutError: timed out"}]}
    assert judge_node("node1", said, NET)[0].code == "CLUSTER_RENDEZVOUS_FAILED"


def test_a_node_whose_phase_program_the_outer_timeout_stopped_is_an_error_phase_timeout():
    (stopped,) = judge({"node1": None}, {"node1": "ran past its wall clock"}, {"node1": NET}, None, {"node1"})
    assert (stopped.status, stopped.code) == ("ERROR", "CLUSTER_PHASE_TIMEOUT")
    from r9700ctl.cluster.facts import NodeInput
    from r9700ctl.cluster.facts import judge as facts

    found = facts([NodeInput("node1", error="stopped", timed_out=True)], "10.0.0.0/24", LIMITS, {})
    assert [(r.status, r.code) for r in found.results] == [("ERROR", "CLUSTER_PHASE_TIMEOUT")]
