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
