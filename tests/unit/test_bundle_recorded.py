"""doctor --bundle on the recorded bundles of real nodes (r9700ctl/data/recorded/): the GPUs each
recording shows, and the findings (or their absence) a support engineer should get from them.

Every assertion here is a value visible in the recorded files (first line names the public
source), so a change in GPU discovery or in a rule shows up as a wrong model, address or count."""

from __future__ import annotations

from pathlib import Path

import pytest

from r9700ctl.bundle import diagnose_bundle
from r9700ctl.bundle import lines as evidence_of
from r9700ctl.bundle import severity as severity_of

RECORDED = Path(__file__).resolve().parents[2] / "r9700ctl" / "data" / "recorded"


def gpus_of(report):
    return [(g.bdf, g.pci_id, g.gfx, g.discrete) for g in report.gpus]


def findings_of(report):
    return {f.id: f for f in report.findings}


def test_three_r9700s_in_rocminfo_are_named_with_target_address_and_32_gib():
    """Pins discovery from rocminfo alone: BDFID -> address, Chip ID 0x7551 -> the manifest's R9700."""
    report = diagnose_bundle(RECORDED / "r9700-3x")

    assert gpus_of(report) == [
        ("0000:0a:00.0", "1002:7551", "gfx1201", True),
        ("0000:0d:00.0", "1002:7551", "gfx1201", True),
        ("0000:45:00.0", "1002:7551", "gfx1201", True),
    ]
    assert {g.name for g in report.gpus} == {"AMD Radeon AI PRO R9700"}
    assert all(31 < g.vram_mib / 1024 <= 32 for g in report.gpus)
    assert report.versions["amdgpu"] == "6.12.12"  # "ROCk module version 6.12.12 is loaded"
    assert report.findings == []
    # Nothing wrong in rocminfo.txt, but it answers too few checks to call the node healthy.
    assert report.status == "INCONCLUSIVE"
    assert len(report.unjudged) >= len(report.judged)


def test_the_2x_r9700_bundle_names_truncated_amd_smi_rows_and_passes_dkms_and_iommu():
    """Plain amd-smi prints "...Radeon AI PRO R9700": the manifest must still name the model.
    The dkms entry for the running kernel 6.8.0-90 is installed and iommu=pt is set: no finding of
    those. ROCm 7.2.0 on two gfx1201 cards is the RCCL deadlock of the known issues (the owner's
    GPUs were "stuck busy"): the one finding, a warning (tests/unit/test_bundle_known_issues.py)."""
    report = diagnose_bundle(RECORDED / "r9700-2x")

    assert gpus_of(report) == [
        ("0000:03:00.0", "1002:7551", "gfx1201", True),
        ("0000:43:00.0", "1002:7551", "gfx1201", True),
    ]
    assert report.versions == {
        "kernel": "6.8.0-90-generic",
        "amdgpu": "6.16.6",
        "rocm": "7.2.0",
        "iommu": "passthrough",
    }
    # 7.2.0 is not a release of the manifest (7.2.3 is): said as INFO, neither judged nor a warning.
    # It is in the range of the RCCL deadlock on two gfx1201 cards (a known issue): a warning.
    assert [(f.id, severity_of(f)) for f in report.findings] == [
        ("known_issue.r9700-rccl-72-hang", "WARN"),
        ("rocm.not_in_manifest", "INFO"),
    ]
    judged_missing = {n.evidence["topic"] for n in report.not_judged}
    assert "HSA_OVERRIDE_GFX_VERSION" in judged_missing
    assert "the IOMMU mode" not in judged_missing


def test_an_r9700_beside_the_ryzen_igpu_gets_the_integrated_gpu_warning_with_its_amd_smi_row():
    report = diagnose_bundle(RECORDED / "r9700-igpu")

    assert [(g.bdf, g.discrete) for g in report.gpus] == [("0000:03:00.0", True), ("0000:0d:00.0", False)]
    igpu = findings_of(report)["gpu.integrated_beside_discrete"]
    assert severity_of(igpu) == "WARN"
    assert [(e.file, e.line) for e in evidence_of(igpu)] == [("amd-smi.txt", 13)]
    assert "ROCR_VISIBLE_DEVICES" in igpu.hint
    assert igpu.hint.startswith("disable the integrated GPU in the BIOS")  # AMD's advice first
    assert report.exit_code == 1


def test_an_rx_9070_xt_with_a_raphael_igpu_and_page_faults_in_dmesg():
    """The RX 9070 XT is gfx1201 too (1002:7550); the Raphael iGPU is gfx1036 with APU memory."""
    report = diagnose_bundle(RECORDED / "rx9070xt-igpu")

    assert gpus_of(report) == [
        ("0000:03:00.0", "1002:7550", "gfx1201", True),
        ("0000:76:00.0", "1002:13c0", "gfx1036", False),
    ]
    found = findings_of(report)
    assert set(found) == {"gpu.integrated_beside_discrete", "dmesg.amdgpu_page_fault"}
    faults = found["dmesg.amdgpu_page_fault"]
    assert severity_of(faults) == "WARN"
    assert "0000:03:00.0" in faults.detail
    assert (evidence_of(faults)[0].file, evidence_of(faults)[0].line) == ("dmesg.txt", 2)
    assert "[gfxhub] page fault" in evidence_of(faults)[0].text


def test_an_mi300x_vf_is_found_as_gfx942_with_its_192_gib_and_judged_without_r9700_rules():
    """A data-centre GPU in a VM: rocminfo alone names target, address and VRAM; nothing in the
    R9700-specific rules may fire on it (its model may or may not be in the manifest: notes only)."""
    report = diagnose_bundle(RECORDED / "mi300x-vf-1x")

    assert [(g.bdf, g.pci_id, g.gfx, g.discrete) for g in report.gpus] == [
        ("0000:05:00.0", "1002:74b5", "gfx942", True)
    ]
    assert round(report.gpus[0].vram_mib / 1024) == 192
    assert report.versions["amdgpu"] == "6.12.12"
    assert {severity_of(f) for f in report.findings} <= {"INFO"}
    assert (report.status, report.exit_code) == ("INCONCLUSIVE", 4)  # rocminfo.txt alone: too little


def test_a_vm_where_amdgpu_failed_to_initialise_fails_with_the_dmesg_lines():
    report = diagnose_bundle(RECORDED / "r9700-vm-initfail")

    found = findings_of(report)
    assert severity_of(found["dmesg.amdgpu_probe_failed"]) == "FAIL"
    assert [e.line for e in evidence_of(found["dmesg.amdgpu_probe_failed"])] == [10]
    assert [e.line for e in evidence_of(found["dmesg.amdgpu_init_failed"])] == [8]
    assert report.exit_code == 2


def test_an_nvidia_only_bundle_is_not_asked_amd_questions():
    """An A100 node has no ROCm, no amdgpu DKMS and no render group to judge: the 'could not
    judge' list must not fill up with AMD topics."""
    report = diagnose_bundle(RECORDED / "nvidia-a100-1x")

    assert [(g.vendor, g.bdf, g.name) for g in report.gpus] == [
        ("10de", "0000:01:00.0", "NVIDIA A100-SXM4-80GB")
    ]
    assert report.versions == {"nvidia_driver": "535.54.03", "cuda": "12.2"}
    assert [n.evidence["topic"] for n in report.not_judged] == ["the IOMMU mode"]
    assert report.findings == []


def test_rocm_smi_amd_smi_static_and_metric_describe_one_gpu_not_three():
    """Pins the merge: amd-smi metric has no address; it is the same GPU as static's 0000:0b:00.0."""
    report = diagnose_bundle(RECORDED / "rx6600-1x")

    assert [(g.bdf, g.pci_id, g.gfx) for g in report.gpus] == [("0000:0b:00.0", "1002:73ff", "gfx1032")]
    assert set(report.gpus[0].seen_in) == {"amd-smi-static.json", "amd-smi-metric.json", "rocm-smi.json"}
    found = findings_of(report)
    assert severity_of(found["gpu.unknown_model"]) == "INFO"
    link = found["pcie.link_below_max"]
    assert evidence_of(link)[0].file == "amd-smi-metric.json"


def test_amd_smis_link_below_the_maximum_it_lists_is_a_note_not_a_warning():
    """Bug pinned (issue 10, both-ends rule): amd-smi's maximum is the GPU function's, not the card's
    or the slot's; this healthy RX 6600 is an x8 card that amd-smi lists as x16, and it got a WARN."""
    report = diagnose_bundle(RECORDED / "rx6600-1x")

    link = findings_of(report)["pcie.link_below_max"]
    assert severity_of(link) == "INFO"
    assert "16 GT/s x8, below the 16 GT/s x16 amd-smi lists as its maximum: not judged" in link.detail
    assert any("PCIe link training" in n.detail for n in report.not_judged)


# Recordings of nodes with nothing wrong in what was published: each WARN or FAIL on them would be
# a false alarm (issue 9 item 6). The others carry a real problem (an iGPU beside the card, page
# faults, a failed init, ROCm 7.2.0's RCCL deadlock on 2 gfx1201), tested above.
HEALTHY = [
    "amd-4x-pcie",
    "mi300x-vf-1x",
    "nvidia-a100-1x",
    "r9700-1x",
    "r9700-1x-gigabyte",
    "r9700-3x",
    "rx5500-switch-acs",
    "rx6600-1x",
]


@pytest.mark.parametrize("name", HEALTHY)
def test_a_healthy_recorded_node_gets_no_warning_and_no_failure(name):
    report = diagnose_bundle(RECORDED / name)

    assert [(f.id, severity_of(f)) for f in report.findings if severity_of(f) in ("WARN", "FAIL")] == []
    assert report.status in ("PASS", "INCONCLUSIVE")  # INCONCLUSIVE: no file of it lists the GPUs


def test_lspci_run_without_root_says_link_and_acs_could_not_be_judged():
    """lspci -vnn as a user prints 'Capabilities: <access denied>': no link or ACS verdict, and
    the reason is that, not a missing file. The 32G BAR is read all the same (no small-BAR finding)."""
    report = diagnose_bundle(RECORDED / "r9700-1x-gigabyte")

    texts = [n.detail for n in report.not_judged]
    assert any("PCIe link training and ACS: lspci ran without root" in t for t in texts)
    assert "pcie.small_bar" not in findings_of(report)


@pytest.mark.parametrize("name", sorted(p.name for p in RECORDED.iterdir() if p.is_dir()))
def test_every_recorded_bundle_is_diagnosed_without_a_rule_error_or_unreadable_file(name):
    """Real recordings must parse: an 'unreadable' or 'rule_error' finding on one is a bug."""
    report = diagnose_bundle(RECORDED / name)

    assert {f.id for f in report.findings} & {"bundle.unreadable", "bundle.rule_error"} == set()
    assert report.to_dict()["node"] == name


# ---- issue 22 items 11, 13, 14: owners' real bundles as they posted them


def test_rocminfos_invalid_argument_on_dev_kfd_is_the_drivers_state_not_the_render_group():
    """Bug pinned (issue 22 item 11): ROCm/legacy-rocm-build#6166, an RX 9070 XT whose /dev/kfd was
    0666 and whose user was in render, got "add the user to the render and video groups" for
    rocminfo's "Invalid argument", plus "no GPU found, check the cards are seated" because rocminfo
    listed no agent, plus "could not read rocminfo.txt"."""
    report = diagnose_bundle(RECORDED / "rx9070xt-kfd-einval")

    found = findings_of(report)
    runtime = found["rocm.runtime_error"]
    assert severity_of(runtime) == "FAIL"
    assert "(Invalid argument): not a permission problem" in runtime.detail
    assert "x1unix is in the render group" in runtime.detail
    assert "usermod" not in runtime.hint and "unbind" in runtime.hint
    assert [(e.file, e.line) for e in evidence_of(runtime)] == [("rocminfo.txt", 3), ("rocminfo.txt", 4)]
    assert set(found) == {"rocm.runtime_error"}  # no gpu.none, no not_visible_to_rocm, no unreadable
    assert report.exit_code == 2


def test_lspci_without_nn_still_names_the_gpu_it_lists():
    """Bug pinned (issue 22 item 14): `lspci | grep VGA` as most owners post it has no [1002:7550]
    ids; the card was not recognised at all. "Navi 48" is the RX 9070 family's and the R9700's
    chip: both gfx1201, so the target is known and the PCI id is left unknown, not guessed."""
    report = diagnose_bundle(RECORDED / "rx9070xt-kfd-einval")

    assert [(g.bdf, g.vendor, g.pci_id, g.name, g.gfx, g.discrete) for g in report.gpus] == [
        ("0000:03:00.0", "1002", None, "Navi 48", "gfx1201", True)
    ]


def test_a_kernel_log_pasted_without_timestamps_or_pci_prefixes_is_read_not_unreadable():
    """Bug pinned (issue 22 item 13): ublue-os/bazzite#4164's "amdgpu: ..." lines (no timestamps, no
    "amdgpu 0000:03:00.0:" prefix) were called "could not read dmesg.txt: no kernel log lines". The
    SMU version line alone is benign: nothing to report."""
    report = diagnose_bundle(RECORDED / "rx9070xt-untimed-dmesg")

    assert report.findings == []
    assert "amdgpu errors in the kernel log" not in {n.evidence["topic"] for n in report.not_judged}


def test_the_smu_not_answering_the_previous_command_is_a_failure_counted_on_its_gpu():
    """Issue 22 item 13: "SMU: I'm not done with your previous command" (ROCm/legacy-rocm-build#2196)
    is a failure signature of the manifest, with its source."""
    report = diagnose_bundle(RECORDED / "amd-smu-busy")

    busy = findings_of(report)["dmesg.amdgpu_smu_busy"]
    assert severity_of(busy) == "FAIL"
    assert "3 line(s) on 0000:0d:00.0 (3)" in busy.detail
    assert [e.line for e in evidence_of(busy)] == [2, 5, 7]
    assert "https://github.com/ROCm/legacy-rocm-build/issues/2196" in busy.hint


def test_permission_denied_in_a_container_without_a_login_name_asks_for_the_render_group_there():
    """ROCm/ROCm-docker#116: rocminfo in a container could not open /dev/kfd (Permission denied) and,
    with no login name, could not check any group: the fix is the container's --group-add render,
    the group that owns /dev/kfd, not a usermod of a user the container does not have; and a
    rocminfo that listed no agent is no "no GPU found"."""
    report = diagnose_bundle(RECORDED / "mi100-container-kfd-denied")

    runtime = findings_of(report)["rocm.runtime_error"]
    assert "could not check the groups: the process has no login name" in runtime.detail
    assert "--group-add render" in runtime.hint and "usermod" not in runtime.hint
    assert [e.line for e in evidence_of(runtime)] == [3, 4]
    assert set(findings_of(report)) == {"rocm.runtime_error"}


def test_doctors_json_keeps_its_fields_and_adds_status_and_code_beside_them():
    """Issue 20: findings are CheckResults now; r9700ctl.doctor/1 keeps id, severity, detail, fix and
    evidence (a note's severity stays INFO, its status is SKIP) and only gains status and code; a
    question left open keeps topic, files, reason and text, and gains its code."""
    document = diagnose_bundle(RECORDED / "rx9070xt-igpu").to_dict()
    findings = document["findings"]
    assert findings and all(
        list(f) == ["id", "severity", "detail", "fix", "evidence", "status", "code"] for f in findings
    )
    for finding in findings:
        assert finding["severity"] == ("INFO" if finding["status"] == "SKIP" else finding["status"])
        assert finding["code"] and finding["status"] in ("FAIL", "WARN", "SKIP")
    assert all(list(n) == ["topic", "files", "reason", "text", "code"] for n in document["not_judged"])
    assert {n["code"] for n in document["not_judged"]} <= {"BUNDLE_FILE_MISSING", "BUNDLE_FILE_CANNOT_ANSWER"}
