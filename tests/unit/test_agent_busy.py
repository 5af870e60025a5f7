"""A busy GPU is not a broken GPU: other processes found on fake /sys/class/kfd and /proc trees.

Bug pinned (issue 10): an H200 sharing its GPU with another process measured 310 TFLOPS and was
judged as hardware; with the absolute floor it would FAIL with a reseat hint. Figures measured
on a GPU that another process uses are INCONCLUSIVE "GPU busy: pid N (command)", unless
--allow-busy asks for a verdict anyway.
"""

from __future__ import annotations

import stat

import pytest
from agent_fake_node import FakeNode, r9700_node

from r9700ctl.agent import busy, gpus, report
from r9700ctl.agent.check_run import judge_busy
from r9700ctl.agent.result import FAIL, INCONCLUSIVE, PASS, WARN, WRONG_DATA, CheckResult

OWN = 999_000  # the agent's pid in the fake tree
IGNORED = ["amd-smi", "rocm-smi", "nvidia-smi", "nvidia-persistenced"]


def _scan(root, found, **kw):
    return busy.scan(root, found, ignored_commands=IGNORED, own_pid=OWN, tool_timeout_s=5, **kw)


@pytest.fixture
def two_r9700(tmp_path):
    node = r9700_node(tmp_path, 2)
    found = gpus.discover(tmp_path, {}, use_tools=False).gpus
    return node, found


def test_a_foreign_process_with_a_kfd_context_makes_only_its_gpu_busy(tmp_path, two_r9700):
    node, found = two_r9700
    node.add_process(4242, ["python3", "train.py", "--gpus", "1"])
    node.add_kfd_process(4242, [40129])  # gpu1: render minor 129
    scan = _scan(tmp_path, found)
    by_gpu = scan.by_gpu()
    assert list(by_gpu) == [1]
    (holder,) = by_gpu[1]
    assert holder.text() == "pid 4242 (python3 train.py --gpus 1)"
    assert holder.sources == ["kfd"]


def test_holders_of_the_render_node_and_of_dev_kfd_are_found_in_proc_fd(tmp_path, two_r9700):
    node, found = two_r9700
    node.add_process(300, ["/usr/bin/llama-server", "-m", "model.gguf"], fds={3: "/dev/dri/renderD128"})
    node.add_process(301, ["python3", "bench.py"], fds={5: "/dev/kfd", 6: "/dev/null"})
    by_gpu = _scan(tmp_path, found).by_gpu()
    assert [h.pid for h in by_gpu[0]] == [300, 301]  # /dev/kfd: every AMD GPU
    assert [h.pid for h in by_gpu[1]] == [301]


def test_the_agent_its_children_monitoring_tools_and_ended_processes_are_not_others(tmp_path, two_r9700):
    node, found = two_r9700
    node.add_process(OWN, ["python3", "-m", "r9700ctl.agent"], fds={3: "/dev/kfd"})
    node.add_process(OWN + 1, ["python3", "-c", "step"], ppid=OWN, fds={3: "/dev/kfd"})
    node.add_kfd_process(OWN + 1, [40128])
    node.add_process(555, ["/opt/rocm/bin/amd-smi", "monitor"], fds={3: "/dev/dri/renderD128"})
    node.add_kfd_process(777, [40128])  # a KFD entry whose process /proc no longer shows
    scan = _scan(tmp_path, found)
    assert scan.holders == []
    assert any("pid 777" in why and "not in /proc" in why for why in scan.not_counted)
    assert any("amd-smi" in why and "monitoring tool" in why for why in scan.not_counted)


def test_nvidia_compute_processes_come_from_nvml_through_nvidia_smi(tmp_path, monkeypatch):
    node = FakeNode(tmp_path)
    node.add_nvidia("0000:01:00.0", node.add_root_port("0000:00:01.0"))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    tool = bin_dir / "nvidia-smi"
    tool.write_text("#!/bin/sh\necho '31337, python3, 00000000:01:00.0'\n")
    tool.chmod(tool.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", str(bin_dir))
    probe = {
        "importable": True,
        "device_count": 1,
        "devices": [{"index": 0, "name": "NVIDIA H200", "pci": "0000:01:00.0"}],
    }
    found = gpus.discover(tmp_path, probe, use_tools=False).gpus
    (holder,) = _scan(tmp_path, found).holders
    assert (holder.pid, holder.command, holder.gpus) == (31337, "python3", [0])
    assert holder.sources == ["nvml compute processes"]
    # Without NVML's answer, holders of /dev/nvidia<minor> count too (persistenced is ignored).
    tool.write_text("#!/bin/sh\nexit 9\n")
    node._write("proc/driver/nvidia/gpus/0000:01:00.0/information", "Model: NVIDIA H200\nDevice Minor: 0\n")
    node.add_process(400, ["python3", "infer.py"], fds={3: "/dev/nvidiactl", 4: "/dev/nvidia0"})
    node.add_process(401, ["/usr/bin/nvidia-persistenced"], fds={3: "/dev/nvidia0"})
    (holder,) = _scan(tmp_path, found).holders
    assert (holder.pid, holder.gpus, holder.sources) == (400, [0], ["/dev/nvidia0"])


def _figures() -> list[CheckResult]:
    return [
        CheckResult(
            id="compute.tflops_bf16",
            subject="gpu0",
            status=PASS,
            metric="gemm_bf16_tflops",
            value=660.0,
            unit="TFLOPS",
        ),
        CheckResult(
            id="compute.tflops_bf16",
            subject="gpu1",
            status=FAIL,
            metric="gemm_bf16_tflops",
            value=310.0,
            unit="TFLOPS",
            hint="reseat",
            code="COMPUTE_BELOW_PEERS",
        ),
        CheckResult(
            id="collective.allreduce", subject="p2p_on", status=PASS, metric="busbw", value=30.0, unit="GB/s"
        ),
        CheckResult(
            id="p2p.bandwidth", subject="gpu0->gpu1", status=PASS, metric="p2p", value=40.0, unit="GB/s"
        ),
    ]


def test_figures_of_a_busy_gpu_are_inconclusive_and_the_run_says_so_on_top(tmp_path, two_r9700):
    node, found = two_r9700
    node.add_process(4242, ["python3", "train.py"])
    node.add_kfd_process(4242, [40129])
    scan = _scan(tmp_path, found)
    figures = _figures()
    results, banners = judge_busy(found, scan, busy.Scan(), figures, allow_busy=False)
    statuses = {(r.id, r.subject): r.status for r in figures}
    assert statuses[("compute.tflops_bf16", "gpu0")] == PASS  # gpu0 was alone
    assert statuses[("compute.tflops_bf16", "gpu1")] == INCONCLUSIVE  # not a hardware FAIL
    assert statuses[("collective.allreduce", "p2p_on")] == INCONCLUSIVE  # spans every GPU
    assert statuses[("p2p.bandwidth", "gpu0->gpu1")] == INCONCLUSIVE
    slow = next(r for r in figures if r.subject == "gpu1")
    assert slow.hint.startswith("GPU busy: pid 4242 (python3 train.py)")
    assert slow.evidence["if_judged"] == {"status": FAIL, "hint": "reseat", "code": "COMPUTE_BELOW_PEERS"}
    assert slow.code == "GPU_BUSY"
    (gpu_busy,) = results
    assert (gpu_busy.id, gpu_busy.subject, gpu_busy.status, gpu_busy.value) == (
        "gpu.busy",
        "gpu1",
        INCONCLUSIVE,
        1,
    )
    assert banners == [
        "GPU busy: gpu1 is used by pid 4242 (python3 train.py): its figures are INCONCLUSIVE "
        "(--allow-busy judges them)"
    ]
    doc = report.build(
        node="n",
        level="quick",
        started="",
        duration_s=1.0,
        environment={},
        gpus=[],
        results=figures + results,
        banners=banners,
    )
    assert doc["exit_code"] == 4
    table = report.render_table(doc).splitlines()
    assert table[1].startswith("!! GPU busy: gpu1 is used by pid 4242")


def test_wrong_data_on_a_busy_gpu_still_fails(tmp_path, two_r9700):
    """Another process slows a GPU down; it does not make its copies deliver wrong bytes: a failed
    verification keeps its FAIL (with the note), while the slow figure beside it is INCONCLUSIVE."""
    node, found = two_r9700
    node.add_process(4242, ["python3", "train.py"])
    node.add_kfd_process(4242, [40129])
    corrupt = CheckResult(
        id="hostbw.h2d",
        subject="gpu1",
        status=FAIL,
        metric="h2d",
        value=55.0,
        unit="GB/s",
        hint="a copy delivered wrong data",
        evidence={WRONG_DATA: True},
        code="HOSTBW_CORRUPTION",
    )
    figures = [*_figures(), corrupt]
    judge_busy(found, _scan(tmp_path, found), busy.Scan(), figures, allow_busy=False)
    assert corrupt.status == FAIL
    assert (
        corrupt.hint == "a copy delivered wrong data; measured while shared with pid 4242 (python3 train.py)"
    )
    assert corrupt.code == "HOSTBW_CORRUPTION"
    assert (
        next(r for r in figures if r.id == "compute.tflops_bf16" and r.subject == "gpu1").status
        == INCONCLUSIVE
    )


def test_allow_busy_judges_the_figures_and_notes_the_sharing(tmp_path, two_r9700):
    node, found = two_r9700
    node.add_process(4242, ["python3", "train.py"])
    node.add_kfd_process(4242, [40129])
    figures = _figures()
    results, banners = judge_busy(found, busy.Scan(), _scan(tmp_path, found), figures, allow_busy=True)
    slow = next(r for r in figures if r.subject == "gpu1")
    assert slow.status == FAIL
    assert "measured while shared with pid 4242 (python3 train.py) (--allow-busy)" in slow.hint
    assert results[0].status == WARN
    assert "judged anyway" in banners[0]
