"""doctor --bundle and the manifest's known issues and kernel-log signatures, on recorded bundles and
recorded log lines: affected nodes get the issue named with its source and workaround, an
environment that re-creates an issue is flagged, an unaffected healthy node gets nothing, and
amdgpu's trouble in dmesg is counted per GPU and explained."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from r9700ctl.agent.parsers import dmesg
from r9700ctl.bundle import diagnose_bundle
from r9700ctl.bundle import lines as evidence_of
from r9700ctl.bundle import severity as severity_of

ROOT = Path(__file__).resolve().parents[2]
RECORDED = ROOT / "r9700ctl" / "data" / "recorded"
FIXTURES = ROOT / "tests" / "fixtures"


def bundle_from(tmp_path: Path, recorded: str, files: dict[str, str] | None = None) -> Path:
    target = tmp_path / recorded
    shutil.copytree(RECORDED / recorded, target)
    for name, text in (files or {}).items():
        (target / name).write_text(text)
    return target


def fixture(path: str) -> str:
    return (FIXTURES / path).read_text()


def known(report) -> dict:
    return {f.id: f for f in report.findings if f.id.startswith("known_issue.")}


def listed(report) -> dict:
    return {item["id"]: item for item in report.known_issues}


# ---------------------------------------------------------------- unaffected nodes


@pytest.mark.parametrize("recorded", ["rx6600-1x", "mi300x-vf-1x", "nvidia-a100-1x"])
def test_an_unaffected_healthy_node_gets_no_known_issue_at_all(recorded):
    """No R9700/gfx1201 on the node: nothing listed, no finding, the exit code untouched."""
    report = diagnose_bundle(RECORDED / recorded)

    assert report.known_issues == []
    assert known(report) == {}
    # 3: a one-file recording answers too few checks for a PASS (INCONCLUSIVE); never a known issue's.
    assert report.exit_code in (0, 1, 4) and not any(f.id.startswith("known_issue") for f in report.findings)


def test_a_healthy_r9700_node_lists_its_issues_but_gets_no_finding():
    """3x R9700 (rocminfo names no ROCm version): the hang may apply; the card's own issues are listed."""
    report = diagnose_bundle(RECORDED / "r9700-3x")

    assert report.findings == []
    items = listed(report)
    assert items["r9700-rccl-72-hang"]["release_known"] is False
    assert items["r9700-hotspot-throttle-bit"]["false_signal"] is True
    assert "r9700-p2p-host-hang" not in items  # 3 cards: the host hang was seen on 4
    lines = report.overview_lines()
    assert (
        "known issue r9700-rccl-72-hang: may apply (the bundle names no ROCm version); workaround "
        "NCCL_PROTO=Simple or ROCm 7.1.1" in lines
    )


# ---------------------------------------------------------------- affected nodes


def test_two_r9700s_on_rocm_7_2_0_are_warned_of_the_rccl_hang_with_the_amd_smi_line():
    """ROCm/ROCm#5706's node: 2x R9700 on ROCm 7.2.0, the release family that deadlocks RCCL."""
    report = diagnose_bundle(RECORDED / "r9700-2x")

    finding = known(report)["known_issue.r9700-rccl-72-hang"]
    assert severity_of(finding) == "WARN"
    assert finding.detail.startswith(
        "known issue r9700-rccl-72-hang applies to this node (2 or more gfx1201, ROCm 7.2.0)"
    )
    assert "env.txt is missing" in finding.detail
    assert (evidence_of(finding)[0].file, evidence_of(finding)[0].line) == ("amd-smi.txt", 3)
    assert "ROCm version: 7.2.0" in evidence_of(finding)[0].text
    assert finding.hint.startswith("Use ROCm 7.1.1")
    assert "https://github.com/vllm-project/vllm/issues/40980" in finding.hint
    assert report.exit_code == 1


def test_the_workaround_in_env_txt_clears_the_finding_and_is_listed_as_in_force(tmp_path):
    env = "NCCL_PROTO=Simple\nHSA_FORCE_FINE_GRAIN_PCIE=1\n"
    report = diagnose_bundle(bundle_from(tmp_path, "r9700-2x", {"env.txt": env}))

    assert known(report) == {}
    assert listed(report)["r9700-rccl-72-hang"]["mitigated"] is True
    line = (
        "known issue r9700-rccl-72-hang: applies, workaround in force; "
        "workaround NCCL_PROTO=Simple or ROCm 7.1.1"
    )
    assert line in report.overview_lines()


def test_an_environment_with_ipc_legacy_mode_is_flagged_at_its_env_txt_line(tmp_path):
    """vLLM's ROCm images set HSA_ENABLE_IPC_MODE_LEGACY=1 (ROCm/rocm-systems#2209): on two R9700s
    every peer mapping fails, so it is a FAIL naming the line."""
    env = "PATH=/usr/bin\nNCCL_PROTO=Simple\nHSA_ENABLE_IPC_MODE_LEGACY=1\n"
    report = diagnose_bundle(bundle_from(tmp_path, "r9700-2x", {"env.txt": env}))

    finding = known(report)["known_issue.hsa-ipc-mode-legacy"]
    assert severity_of(finding) == "FAIL"
    assert finding.detail.startswith("the environment re-creates known issue hsa-ipc-mode-legacy")
    assert [(e.file, e.line, e.text) for e in evidence_of(finding)] == [
        ("env.txt", 3, "HSA_ENABLE_IPC_MODE_LEGACY=1")
    ]
    assert finding.hint.startswith("Unset HSA_ENABLE_IPC_MODE_LEGACY or set it to 0")
    assert report.exit_code == 2


def test_ipc_legacy_mode_set_to_0_is_no_finding(tmp_path):
    env = "NCCL_PROTO=Simple\nHSA_ENABLE_IPC_MODE_LEGACY=0\n"
    report = diagnose_bundle(bundle_from(tmp_path, "r9700-2x", {"env.txt": env}))

    assert known(report) == {}
    assert listed(report)["hsa-ipc-mode-legacy"]["triggered"] is False


def test_the_runtimes_ipc_error_in_a_saved_job_log_names_the_issue(tmp_path):
    log = fixture("rccl/r9700-ipc-legacy-mode.log")
    report = diagnose_bundle(
        bundle_from(tmp_path, "r9700-2x", {"rccl.log": log, "env.txt": "NCCL_PROTO=Simple\n"})
    )

    finding = known(report)["known_issue.hsa-ipc-mode-legacy"]
    assert severity_of(finding) == "WARN"
    assert [(e.file, e.line) for e in evidence_of(finding)] == [("rccl.log", 2), ("rccl.log", 4)]


def test_the_four_card_p2p_failure_needs_four_cards(tmp_path):
    """rccl-tests#162's warning on a 2-card node is RCCL's own finding, not the 4-card known issue."""
    log = fixture("rccl/r9700-4x-ipc-invalid.log")
    report = diagnose_bundle(
        bundle_from(tmp_path, "r9700-2x", {"rccl.log": log, "env.txt": "NCCL_PROTO=Simple\n"})
    )

    assert "known_issue.r9700-4x-p2p-ipc-invalid" not in known(report)
    ipc = next(f for f in report.findings if f.id == "rccl.ipc_failure")
    assert [e.line for e in evidence_of(ipc)] == [2, 7]


def test_a_stopped_fan_under_load_is_a_fail_naming_the_known_issue(tmp_path):
    """A planted fault on a recorded metric: the RX 6600's amd-smi metric with its hotspot at 104 C
    and 280 W drawn while the fan reads 0 rpm, in the 2x R9700 bundle."""
    metric = json.loads((RECORDED / "rx6600-1x" / "amd-smi-metric.json").read_text().split("\n", 1)[1])
    metric[0]["temperature"]["hotspot"]["value"] = 104
    metric[0]["power"]["socket_power"]["value"] = 280
    text = "# planted: rx6600-1x/amd-smi-metric.json with hotspot 104 C and 280 W\n" + json.dumps(metric)
    report = diagnose_bundle(bundle_from(tmp_path, "r9700-2x", {"amd-smi-metric.json": text}))

    finding = known(report)["known_issue.r9700-fan-stopped"]
    assert severity_of(finding) == "FAIL"
    assert evidence_of(finding)[0].text == "GPU 0: fan 0 rpm at hotspot 104 C and 280 W"


def test_a_fan_at_0_rpm_on_an_idle_cool_card_is_zero_rpm_mode_not_a_fault(tmp_path):
    """The recorded RX 6600 metric is an idle card with its fan stopped: normal, never a finding."""
    metric = (RECORDED / "rx6600-1x" / "amd-smi-metric.json").read_text()
    report = diagnose_bundle(bundle_from(tmp_path, "r9700-2x", {"amd-smi-metric.json": metric}))

    assert "known_issue.r9700-fan-stopped" not in known(report)


# ---------------------------------------------------------------- kernel-log signatures


def findings_for(tmp_path, log_fixture: str) -> dict:
    report = diagnose_bundle(bundle_from(tmp_path, "r9700-2x", {"dmesg.txt": fixture(log_fixture)}))
    return {f.id: f for f in report.findings if f.id.startswith("dmesg.")}


def test_mes_failure_then_mode1_reset_is_counted_per_gpu_and_explained(tmp_path):
    found = findings_for(tmp_path, "dmesg/rx9070xt-mes-mode1-reset.txt")

    assert set(found) == {"dmesg.amdgpu_mes", "dmesg.amdgpu_gpu_reset"}
    mes, reset = found["dmesg.amdgpu_mes"], found["dmesg.amdgpu_gpu_reset"]
    assert severity_of(mes) == severity_of(reset) == "FAIL"
    assert mes.detail.endswith("2 line(s) on 0000:03:00.0 (2)")
    assert [e.line for e in evidence_of(mes)] == [3, 5]  # "MES(0) failed to respond", "MES might be ..."
    assert reset.detail.endswith("3 line(s) on 0000:03:00.0 (3)")
    assert "https://github.com/ROCm/legacy-rocm-build/issues/6630" in mes.hint


def test_an_r9700_page_fault_says_that_aer_saw_nothing(tmp_path):
    found = findings_for(tmp_path, "dmesg/r9700-page-fault-no-aer.txt")

    fault = found["dmesg.amdgpu_page_fault"]
    assert severity_of(fault) == "WARN"
    assert "1 line(s) on 0000:07:00.0 (1)" in fault.detail
    assert fault.detail.endswith("no PCIe AER line in the log, so not a link error")


def test_a_page_fault_next_to_aer_errors_points_at_the_link(tmp_path):
    """AER lines recorded from ellyq/coreboot#4 placed after the fault excerpt."""
    aer = (
        "[    4.921244] pcieport 0000:00:01.0: AER: Corrected error message received from 0000:01:00.0\n"
        "[    4.921251] pcieport 0000:01:00.0: PCIe Bus Error: severity=Corrected, type=Data Link Layer, "
        "(Receiver ID)\n"
    )
    log = fixture("dmesg/r9700-page-fault-no-aer.txt") + aer
    report = diagnose_bundle(bundle_from(tmp_path, "r9700-2x", {"dmesg.txt": log}))

    fault = next(f for f in report.findings if f.id == "dmesg.amdgpu_page_fault")
    assert fault.detail.endswith("PCIe AER logged 2 line(s) too (0000:00:01.0, 0000:01:00.0): check the link")


def test_a_failed_reset_is_its_own_fail(tmp_path):
    found = findings_for(tmp_path, "dmesg/psp-reset-failed.txt")

    failed = found["dmesg.amdgpu_reset_failed"]
    assert severity_of(failed) == "FAIL"
    assert [e.line for e in evidence_of(failed)] == [7, 8]
    assert "no GPU named (1)" in failed.detail and "0000:0b:00.0 (1)" in failed.detail
    assert failed.hint.startswith("reboot")


def test_a_card_gone_from_the_bus_is_a_fail(tmp_path):
    found = findings_for(tmp_path, "dmesg/rx7600-device-lost.txt")

    lost = found["dmesg.amdgpu_bus_lost"]
    assert severity_of(lost) == "FAIL"
    assert [e.line for e in evidence_of(lost)] == [4, 7]
    assert "power-cycle" in lost.hint


@pytest.mark.parametrize("log", ["dmesg/r9700-smu-mismatch.txt", "dmesg/r9700-smu-mismatch-fan-stopped.txt"])
def test_the_smu_version_line_alone_is_never_a_finding(tmp_path, log):
    """Healthy machines print it too and Linux dropped it (commit a3ffaa5b397f): even on the card whose
    fan stopped (ROCm #6078) the line alone says nothing; the fan reading does."""
    assert findings_for(tmp_path, log) == {}
    assert dmesg.parse(fixture(log)).kinds == {"smu_mismatch": 1}


def test_the_smu_hang_message_of_6101_is_recognised():
    """ROCm/legacy-rocm-build#6101 (lobo235) quotes the message 5,262 times over; no full line was posted."""
    line = "[ 1234.567890] amdgpu 0000:03:00.0: amdgpu: SMU is in hanged state, failed to send smu message!"
    assert dmesg.parse(line).kinds == {"smu_hang": 1}


def test_doctor_bundle_prints_the_known_issues_with_source_and_workaround():
    from click.testing import CliRunner

    from r9700ctl.cli import cli

    result = CliRunner().invoke(
        cli, ["doctor", "--bundle", str(RECORDED / "r9700-2x")], catch_exceptions=False
    )

    assert result.exit_code == 1, result.output
    lines = result.output.splitlines()
    head = lines.index(
        "  known issue r9700-rccl-72-hang: applies (env.txt missing: workaround unknown); "
        "workaround NCCL_PROTO=Simple or ROCm 7.1.1"
    )
    assert lines[head + 1] == (
        "    RCCL collectives deadlock on two or more gfx1201 GPUs with ROCm 7.2.x "
        "(https://github.com/vllm-project/vllm/issues/40980)"
    )
    assert any(
        line.startswith("  WARN  known issue r9700-rccl-72-hang applies to this node") for line in lines
    )
    assert "        evidence: amd-smi.txt:3: | AMD-SMI 26.2.1+fc0010cf6a" in result.output
