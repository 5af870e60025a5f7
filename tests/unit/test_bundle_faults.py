"""doctor --bundle on planted faults: real recorded bundles copied to tmp_path with one thing
broken, the way customers' nodes break. Each test pins the finding, its severity, its evidence
line and the fix a support engineer would send back."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from r9700ctl.bundle import diagnose_bundle
from r9700ctl.bundle import lines as evidence_of
from r9700ctl.bundle import severity as severity_of

ROOT = Path(__file__).resolve().parents[2]
RECORDED = ROOT / "r9700ctl" / "data" / "recorded"
FIXTURES = ROOT / "tests" / "fixtures"


def bundle_from(tmp_path: Path, recorded: str, files: dict[str, str] | None = None) -> Path:
    """A copy of a recorded bundle, with `files` (name -> text) added or replaced."""
    target = tmp_path / recorded
    shutil.copytree(RECORDED / recorded, target)
    for name, text in (files or {}).items():
        (target / name).write_text(text)
    return target


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"{old!r} not in {path.name}"
    path.write_text(text.replace(old, new))


def only(report, finding_id):
    found = [f for f in report.findings if f.id == finding_id]
    assert len(found) == 1, [f.id for f in report.findings]
    return found[0]


def line_of(path: Path, needle: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if needle in line)


# ---- HSA_OVERRIDE_GFX_VERSION


def test_the_articles_override_9_4_2_on_gfx1201_cards_fails_and_names_mi300s_target(tmp_path):
    """The magazine article's HSA_OVERRIDE_GFX_VERSION=9.4.2 is gfx942 (MI300X, CDNA3): on RDNA4
    cards it crashes the driver. It must be a FAIL pointing at env.txt's line."""
    env = "PATH=/usr/bin\nHSA_OVERRIDE_GFX_VERSION=9.4.2\nUSER=ai\n"
    bundle = bundle_from(tmp_path, "r9700-3x", {"env.txt": env})

    finding = only(diagnose_bundle(bundle), "env.hsa_override")

    assert severity_of(finding) == "FAIL"
    assert "gfx942 (CDNA3)" in finding.detail and "gfx1201" in finding.detail
    assert (evidence_of(finding)[0].file, evidence_of(finding)[0].line) == ("env.txt", 2)
    assert finding.hint.startswith("remove HSA_OVERRIDE_GFX_VERSION")


def test_an_override_naming_the_cards_own_target_is_only_a_warning(tmp_path):
    bundle = bundle_from(tmp_path, "r9700-3x", {"env.txt": "HSA_OVERRIDE_GFX_VERSION=12.0.1\n"})

    finding = only(diagnose_bundle(bundle), "env.hsa_override")

    assert severity_of(finding) == "WARN"
    assert "own target gfx1201" in finding.detail


def test_an_rdna3_override_on_an_rx_9070_xt_fails_as_cross_family(tmp_path):
    """11.0.0 is gfx1100 (RDNA3); the RX 9070 XT is gfx1201 (RDNA4): another family."""
    bundle = bundle_from(tmp_path, "rx9070xt-igpu", {"env.txt": "HSA_OVERRIDE_GFX_VERSION=11.0.0\n"})

    finding = only(diagnose_bundle(bundle), "env.hsa_override")

    assert severity_of(finding) == "FAIL"
    assert (
        "gfx1100 (RDNA3) code on gfx1201 (RDNA4: AMD Radeon RX 9070 XT)"
        in finding.detail  # rocminfo names it
    )


def test_the_mi300x_override_on_an_mi300x_is_its_own_target_so_only_a_warning(tmp_path):
    """9.4.2 is wrong on an R9700 but it is the MI300X's own target: harmless there, and unneeded."""
    bundle = bundle_from(tmp_path, "mi300x-vf-1x", {"env.txt": "HSA_OVERRIDE_GFX_VERSION=9.4.2\n"})

    finding = only(diagnose_bundle(bundle), "env.hsa_override")

    assert severity_of(finding) == "WARN"
    assert "own target gfx942" in finding.detail


def test_an_env_txt_without_an_override_is_judged_and_gives_no_finding(tmp_path):
    bundle = bundle_from(tmp_path, "r9700-3x", {"env.txt": "# env of ai\nHSA_FORCE_FINE_GRAIN_PCIE=1\n"})

    report = diagnose_bundle(bundle)

    assert report.findings == []
    assert "HSA_OVERRIDE_GFX_VERSION" not in {n.evidence["topic"] for n in report.not_judged}


# ---- kernel command line


def test_two_gpus_without_iommu_pt_warn_with_the_cmdline_as_evidence(tmp_path):
    bundle = bundle_from(tmp_path, "r9700-2x")
    edit(bundle / "cmdline.txt", " amd_iommu=on iommu=pt", "")

    finding = only(diagnose_bundle(bundle), "kernel.iommu_not_passthrough")

    assert severity_of(finding) == "WARN"
    assert evidence_of(finding)[0].file == "cmdline.txt" and evidence_of(finding)[0].line == 2
    assert "iommu=pt" in finding.hint


# ---- dkms


def test_a_broken_dkms_entry_for_amdgpu_fails(tmp_path):
    bundle = bundle_from(tmp_path, "r9700-2x")
    edit(bundle / "dkms-status.txt", "6.8.0-90-generic, x86_64: installed (Original modules exist)",
         "6.8.0-90-generic, x86_64: broken")  # fmt: skip

    finding = only(diagnose_bundle(bundle), "dkms.broken")

    assert severity_of(finding) == "FAIL"
    assert evidence_of(finding)[0].line == 3
    assert "dkms remove amdgpu/6.16.6-2255209.24.04 --all" in finding.hint


def test_amdgpu_dkms_built_only_for_an_older_kernel_than_the_running_one_fails(tmp_path):
    """The classic after an unattended kernel upgrade: headers missing, DKMS did not rebuild."""
    bundle = bundle_from(tmp_path, "r9700-2x")
    edit(bundle / "uname.txt", "6.8.0-90-generic", "6.8.0-94-generic")

    finding = only(diagnose_bundle(bundle), "dkms.not_for_running_kernel")

    assert severity_of(finding) == "FAIL"
    assert "built for 6.8.0-88-generic, 6.8.0-90-generic, not for the running kernel 6.8.0-94-generic" in (
        finding.detail
    )
    assert "linux-headers-6.8.0-94-generic" in finding.hint
    assert [(e.file, e.line) for e in evidence_of(finding)] == [
        ("dkms-status.txt", 2),
        ("dkms-status.txt", 3),
        ("uname.txt", 2),
    ]


def test_the_old_comma_format_with_a_module_only_built_for_the_running_kernel_fails(tmp_path):
    """dkms 2.x: 'amdgpu, 2.0-89, 4.15.0-43-generic, x86_64: built' -- built, never installed."""
    old = (FIXTURES / "dkms" / "old-format-built.txt").read_text()
    uname = "# planted\nLinux node 4.15.0-43-generic #46-Ubuntu SMP x86_64 GNU/Linux\n"
    bundle = bundle_from(tmp_path, "r9700-3x", {"dkms-status.txt": old, "uname.txt": uname})

    finding = only(diagnose_bundle(bundle), "dkms.not_installed")

    assert "amdgpu/2.0-89 for the running kernel 4.15.0-43-generic is 'built'" in finding.detail
    assert evidence_of(finding)[0].line == 2


def test_no_amdgpu_dkms_entry_means_the_inbox_driver_a_supported_choice(tmp_path):
    """Issue 9 item 6: the kernel's own amdgpu is a supported choice (r9700_driver_source: inbox): INFO."""
    bundle = bundle_from(tmp_path, "r9700-2x", {"dkms-status.txt": ""})

    finding = only(diagnose_bundle(bundle), "dkms.no_amdgpu")
    assert severity_of(finding) == "INFO" and "a supported choice" in finding.detail


# ---- PCIe


def _two_gpus_behind_acs_bridges(tmp_path: Path) -> Path:
    """The recorded RX 5500 lspci -vvv plus a second downstream port and GPU, copied from the
    first with new addresses: two cards below bridges that redirect peer requests (ACS)."""
    bundle = bundle_from(tmp_path, "rx5500-switch-acs")
    lines = (bundle / "lspci.txt").read_text().splitlines()
    start = line_of(bundle / "lspci.txt", "00:01.0/01:00.0/02:00.0 PCI bridge") - 1
    copy = "\n".join(lines[start:]).replace("02:00.0", "02:01.0").replace("03:00.0", "04:00.0")
    copy = copy.replace("secondary=03, subordinate=03", "secondary=04, subordinate=04")
    (bundle / "lspci.txt").write_text("\n".join(lines) + "\n" + copy + "\n")
    return bundle


def test_acs_redirect_on_the_bridges_above_two_gpus_warns_per_bridge(tmp_path):
    bundle = _two_gpus_behind_acs_bridges(tmp_path)

    report = diagnose_bundle(bundle)
    acs = [f for f in report.findings if f.id == "pcie.acs_redirect"]

    assert [f.detail.split(" redirects")[0] for f in acs] == [
        "ACS on switch port 0000:02:00.0",
        "ACS on switch port 0000:02:01.0",
    ]
    assert "between GPUs 0000:03:00.0 <-> 0000:04:00.0" in acs[0].detail
    assert evidence_of(acs[0])[0].text.startswith("ACSCtl:\tSrcValid+ TransBlk- ReqRedir+ CmpltRedir+")
    assert "setpci -s 0000:02:00.0 ECAP_ACS+6.w=0000" in acs[0].hint


def test_acs_between_gpus_that_do_not_talk_p2p_is_a_note(tmp_path):
    """Issue 9 item 6: ACS matters only between GPUs expected to talk P2P; with r9700_p2p's "off"
    (NCCL_P2P_DISABLE=1 in the login environment, no HSA_FORCE_FINE_GRAIN_PCIE=1) it is a note."""
    bundle = _two_gpus_behind_acs_bridges(tmp_path)
    (bundle / "env.txt").write_text("PATH=/usr/bin\nNCCL_P2P_DISABLE=1\n")

    acs = [f for f in diagnose_bundle(bundle).findings if f.id == "pcie.acs_redirect"]

    assert [severity_of(f) for f in acs] == ["INFO", "INFO"]
    assert acs[0].detail.endswith(
        "P2P is off on this node (NCCL_P2P_DISABLE=1 in env.txt), so only if it is turned on"
    )
    assert (evidence_of(acs[0])[-1].file, evidence_of(acs[0])[-1].line) == ("env.txt", 2)
    (bundle / "env.txt").write_text(
        "NCCL_P2P_DISABLE=1\nHSA_FORCE_FINE_GRAIN_PCIE=1\n"
    )  # contradictory: P2P asked
    assert {severity_of(f) for f in diagnose_bundle(bundle).findings if f.id == "pcie.acs_redirect"} == {
        "WARN"
    }


def test_pci_noacs_on_the_command_line_silences_the_acs_warning(tmp_path):
    bundle = _two_gpus_behind_acs_bridges(tmp_path)
    (bundle / "cmdline.txt").write_text("BOOT_IMAGE=/vmlinuz ro iommu=pt pci=noacs\n")

    assert "pcie.acs_redirect" not in {f.id for f in diagnose_bundle(bundle).findings}


def _card_link_status(tmp_path: Path, status: str) -> tuple[Path, int]:
    """The recorded RX 5500 bundle with its card's upstream port (01:00.0, the card's real link) edited."""
    bundle = bundle_from(tmp_path, "rx5500-switch-acs")
    lspci = bundle / "lspci.txt"
    port = line_of(lspci, "00:01.0/01:00.0 PCI bridge")
    text = lspci.read_text().splitlines()
    number = next(i for i in range(port, len(text)) if "LnkSta:" in text[i]) + 1
    text[number - 1] = f"\t\tLnkSta:\t{status}"
    lspci.write_text("\n".join(text) + "\n")
    return bundle, number


def test_a_link_downtrained_at_idle_is_a_note_as_the_agent_judges_it(tmp_path):
    """Issue 9 item 6: idle links downtrain to save power; the agent says so at idle (PASS with a note)."""
    bundle, number = _card_link_status(tmp_path, "Speed 2.5GT/s, Width x8 (downgraded)")

    finding = only(diagnose_bundle(bundle), "pcie.link_below_max")

    assert severity_of(finding) == "INFO"
    assert "idle: link at Gen1 x8 of Gen3 x8; idle GPUs downtrain" in finding.detail
    assert "read at 0000:01:00.0" in finding.detail
    assert (evidence_of(finding)[0].file, evidence_of(finding)[0].line) == ("lspci.txt", number)


def test_the_gpu_functions_own_internal_link_is_not_the_cards_link(tmp_path):
    """A Radeon's GPU function sits behind the card's own switch: its LnkSta is internal (the recorded
    GPU shows x16 behind an x8 card link), so only the card's upstream port is judged."""
    bundle = bundle_from(tmp_path, "rx5500-switch-acs")
    assert "pcie.link_below_max" not in {f.id for f in diagnose_bundle(bundle).findings}


def test_an_r9700_whose_bar_is_256m_warns_that_large_bar_is_off(tmp_path):
    bundle = bundle_from(tmp_path, "r9700-1x-gigabyte")
    edit(bundle / "lspci.txt", "[size=32G]", "[size=256M]")

    finding = only(diagnose_bundle(bundle), "pcie.small_bar")

    assert "largest BAR is 256 MiB, less than its 32 GiB" in finding.detail
    assert evidence_of(finding)[0].line == 5
    assert "Resizable BAR" in finding.hint or "Re-Size BAR" in finding.hint


# ---- access, driver, ROCm


def test_a_user_missing_from_render_fails_and_from_video_warns(tmp_path):
    ids = "uid=1000(ai) gid=1000(ai) groups=1000(ai),27(sudo)\n"
    bundle = bundle_from(tmp_path, "r9700-3x", {"id.txt": ids})

    report = diagnose_bundle(bundle)

    render = only(report, "access.not_in_render")
    assert severity_of(render) == "FAIL"
    assert "usermod -aG render,video ai" in render.hint
    assert (evidence_of(render)[0].file, evidence_of(render)[0].line) == ("id.txt", 1)
    assert severity_of(only(report, "access.not_in_video")) == "WARN"


def test_a_user_in_render_and_video_gives_no_access_finding(tmp_path):
    ids = "uid=1000(ai) gid=1000(ai) groups=1000(ai),44(video),992(render)\n"
    report = diagnose_bundle(bundle_from(tmp_path, "r9700-3x", {"id.txt": ids}))

    assert report.findings == []


def test_root_needs_no_render_group(tmp_path):
    ids = "uid=0(root) gid=0(root) groups=0(root)\n"
    report = diagnose_bundle(bundle_from(tmp_path, "r9700-3x", {"id.txt": ids}))

    assert report.findings == []


def test_rocm_6_3_2_on_r9700s_fails_naming_the_releases_that_support_gfx1201(tmp_path):
    """ROCm 6.3.x has no gfx1201: the article's 6.3.2 cannot drive an R9700."""
    bundle = bundle_from(tmp_path, "r9700-2x")
    edit(bundle / "amd-smi.txt", "ROCm version: 7.2.0", "ROCm version: 6.3.2")

    finding = only(diagnose_bundle(bundle), "rocm.unsupported_gpu")

    assert severity_of(finding) == "FAIL"
    assert finding.detail.startswith("ROCm 6.3.2 does not support gfx1201 (AMD Radeon AI PRO R9700)")
    assert "6.4.1" in finding.detail
    assert evidence_of(finding)[0].file == "amd-smi.txt" and evidence_of(finding)[0].line == 3


def test_amdgpu_missing_from_lsmod_fails(tmp_path):
    lsmod = "Module                  Size  Used by\nnvme                   61440  2\n"
    bundle = bundle_from(tmp_path, "r9700-3x", {"lsmod.txt": lsmod})

    assert severity_of(only(diagnose_bundle(bundle), "driver.not_loaded")) == "FAIL"


def test_rocminfo_saying_rock_is_not_loaded_fails(tmp_path):
    text = (
        "ROCk module is NOT loaded, possibly no GPU devices\n"
        "Unable to open /dev/kfd read-write: No such file\n"
    )
    bundle = bundle_from(tmp_path, "r9700-2x", {"rocminfo.txt": text})

    report = diagnose_bundle(bundle)

    assert evidence_of(only(report, "rocm.kfd_not_loaded"))[0].line == 1
    ids = {f.id for f in report.findings}
    assert "rocm.runtime_error" in ids
    # rocminfo's own failure report was read: the file is not also "could not read" (issue 22 item 11)
    assert "bundle.unreadable" not in ids


# ---- dmesg and RCCL


def test_a_gpu_reset_after_mes_failure_in_dmesg_fails(tmp_path):
    dmesg = (FIXTURES / "dmesg" / "rx7900-mes-reset.txt").read_text()
    report = diagnose_bundle(bundle_from(tmp_path, "r9700-2x", {"dmesg.txt": dmesg}))

    found = {f.id: f for f in report.findings}
    assert severity_of(found["dmesg.amdgpu_gpu_reset"]) == "FAIL"
    assert severity_of(found["dmesg.amdgpu_mes"]) == "FAIL"
    assert evidence_of(found["dmesg.amdgpu_mes"])[0].line == 2


def test_rccl_start_up_warnings_in_rccl_log_are_findings(tmp_path):
    log = (FIXTURES / "rccl" / "mi250x-startup-warnings.log").read_text()
    report = diagnose_bundle(bundle_from(tmp_path, "r9700-2x", {"rccl.log": log}))

    finding = only(report, "rccl.missing_fine_grain_pcie")
    assert severity_of(finding) == "WARN"
    assert evidence_of(finding)[0].file == "rccl.log" and evidence_of(finding)[0].line == 2
    assert "RCCL start-up warnings" not in " ".join(n.evidence["topic"] for n in report.not_judged)


def test_rccl_missing_fine_grain_warning_on_a_node_whose_p2p_is_off_is_a_note_not_advice_to_set_it(tmp_path):
    """Issue 22 item 9: on a node whose P2P policy decided off (NCCL_P2P_DISABLE=1 in env.txt), doctor
    told the operator to set HSA_FORCE_FINE_GRAIN_PCIE=1, "r9700ctl's r9700_env does": our own policy
    contradicted. The variable makes ROCr expose VRAM as a fine-grained pool over PCIe; RCCL warns
    whenever it is unset (ROCm/rccl src/init.cc, ROCm/rccl#1026): with P2P off that is expected."""
    log = (FIXTURES / "rccl" / "mi250x-startup-warnings.log").read_text()
    env = "PATH=/usr/bin\nNCCL_P2P_DISABLE=1\n"
    report = diagnose_bundle(bundle_from(tmp_path, "r9700-2x", {"rccl.log": log, "env.txt": env}))

    finding = only(report, "rccl.missing_fine_grain_pcie")
    assert severity_of(finding) == "INFO"
    assert "set HSA_FORCE_FINE_GRAIN_PCIE" not in finding.hint and "r9700_env" not in finding.hint
    assert "expected: P2P is off on this node (NCCL_P2P_DISABLE=1 in env.txt)" in finding.detail
    assert (evidence_of(finding)[-1].file, evidence_of(finding)[-1].line) == ("env.txt", 2)


def test_rccl_missing_fine_grain_warning_names_what_the_variable_does_not_a_p2p_switch(tmp_path):
    log = (FIXTURES / "rccl" / "mi250x-startup-warnings.log").read_text()
    report = diagnose_bundle(bundle_from(tmp_path, "r9700-2x", {"rccl.log": log}))
    finding = only(report, "rccl.missing_fine_grain_pcie")

    assert severity_of(finding) == "WARN"
    assert "no peer-to-peer over PCIe" not in finding.detail
    assert "fine-grained" in finding.detail


# ---- what could not be judged, and why


def test_missing_txt_from_collect_explains_why_a_file_is_missing(tmp_path):
    missing = "# what collect could not record\nrocminfo.txt: rocminfo: command not found\n"
    bundle = bundle_from(tmp_path, "r9700-2x", {"MISSING.txt": missing})

    texts = [n.detail for n in diagnose_bundle(bundle).not_judged]

    assert (
        "could not judge whether the ROCm runtime sees the GPUs because rocminfo.txt is missing "
        "(rocminfo.txt: rocminfo: command not found)"
    ) in texts


# ---- healthy machines: no false alarms (issue 9 item 6)


def test_drm_error_lines_of_other_drivers_are_not_amdgpu_errors(tmp_path):
    """A BMC's ast driver logs "[drm] *ERROR*" lines (recorded): a line is attributed by its driver
    prefix and PCI address, not by "[drm]", so none of them is an amdgpu error."""
    from r9700ctl.agent.parsers import dmesg

    text = (FIXTURES / "dmesg" / "ast-bmc-drm-errors.txt").read_text()
    report = dmesg.parse(text)
    # none of the lines is amdgpu's: not even DRM core's "[drm] Initialized ast 0.1.0 for 0000:0a:00.0"
    assert (report.findings, report.amdgpu_lines) == ([], 0)
    amdgpu = "[    5.1] [drm] Initialized amdgpu 3.57.0 for 0000:03:00.0 on minor 1\n"
    assert dmesg.parse(amdgpu).amdgpu_lines == 1
    bundle = bundle_from(tmp_path, "r9700-2x", {"dmesg.txt": text})
    assert not [f for f in diagnose_bundle(bundle).findings if f.id.startswith("dmesg.")]


def test_an_amdgpu_error_beside_them_is_still_found_and_attributed_to_its_card(tmp_path):
    text = (FIXTURES / "dmesg" / "ast-bmc-drm-errors.txt").read_text()
    # ROCm/legacy-rocm-build#2196, as posted
    text += "[31327.729436] [drm:amdgpu_job_timedout [amdgpu]] *ERROR* ring gfx_0.0.0 timeout, signaled seq=613206\n"  # noqa: E501
    bundle = bundle_from(tmp_path, "r9700-2x", {"dmesg.txt": text})
    assert severity_of(only(diagnose_bundle(bundle), "dmesg.amdgpu_ring_timeout")) == "FAIL"


def _two_cards_on_their_own_root_ports(tmp_path: Path) -> Path:
    """The recorded RX 5500 tree (root port, the card's own switch with Linux's ACS redirect, GPU)
    and a copy of it under a second root port with new bus numbers: two cards that meet only in the
    root complex, as R9700s in separate slots do."""
    bundle = bundle_from(tmp_path, "rx5500-switch-acs")
    text = (bundle / "lspci.txt").read_text()
    copy = "\n".join(text.splitlines()[1:])
    for old, new in (
        ("03:00.0", "07:00.0"),
        ("02:00.0", "06:00.0"),
        ("01:00.0", "05:00.0"),
        ("00:01.0", "00:02.0"),
    ):
        copy = copy.replace(old, new)
    for old, new in (
        ("primary=00, secondary=01, subordinate=03", "primary=00, secondary=05, subordinate=07"),
        ("primary=01, secondary=02, subordinate=03", "primary=05, secondary=06, subordinate=07"),
        ("primary=02, secondary=03, subordinate=03", "primary=06, secondary=07, subordinate=07"),
    ):
        copy = copy.replace(old, new)
    (bundle / "lspci.txt").write_text(text.rstrip("\n") + "\n" + copy + "\n")
    return bundle


def test_linux_own_acs_redirect_on_each_cards_switch_is_no_finding(tmp_path):
    """With the IOMMU on, Linux sets ACS redirect on root ports and on each card's own switch
    (pci_request_acs): between two cards on separate root ports there is no switch to judge."""
    bundle = _two_cards_on_their_own_root_ports(tmp_path)
    report = diagnose_bundle(bundle)
    assert len([g for g in report.gpus if g.vendor == "1002"]) == 2
    assert "pcie.acs_redirect" not in {f.id for f in report.findings}


@pytest.mark.parametrize(
    ("version", "severity"),
    [("7.2.0", "INFO")],
    ids=["7.2.0-unknown-patch"],
)
def test_a_rocm_version_is_matched_exactly_and_an_unknown_one_is_not_in_the_manifest(
    tmp_path, version, severity
):
    """6.4.0 was judged as 6.4.1 (the same minor) and so called supported, but 6.4.0 has no gfx1201
    (now a FAIL, test_a_rocm_older_than_the_first_release_with_gfx1201_fails_naming_those_that_work);
    a newer patch release the manifest lacks is a note, neither judged nor a warning."""
    bundle = bundle_from(tmp_path, "r9700-2x")
    edit(bundle / "amd-smi.txt", "ROCm version: 7.2.0", f"ROCm version: {version}")
    finding = only(diagnose_bundle(bundle), "rocm.not_in_manifest")
    assert severity_of(finding) == severity
    assert finding.detail.startswith(f"ROCm {version} is not in the manifest")
    assert "rocm.unsupported_gpu" not in {f.id for f in diagnose_bundle(bundle).findings}


@pytest.mark.parametrize(
    ("files", "version", "finding"),
    [
        ({"rocm-version.txt": "6.4.0-47\n"}, "6.4.0", "rocm.unsupported_gpu"),
        (
            {"packages.txt": "rocm-core\t7.1.1.70101-38~24.04\tii \nrocminfo\t1.0.0.70101-38~24.04\tii \n"},
            "7.1.1",
            None,
        ),
        ({"packages.txt": "rocm-core\t6.3.2.60302-66~22.04\tii \n"}, "6.3.2", "rocm.unsupported_gpu"),
    ],
    ids=["info-version-file", "rocm-core-package", "rocm-core-6.3.2"],
)
def test_the_rocm_release_is_judged_from_collects_package_versions_without_amd_smi(
    tmp_path, files, version, finding
):
    """Issue 9 item 6: collect records /opt/rocm/.info/version and dpkg-query's versions, so a node
    whose amd-smi is missing or broken still gets its ROCm release judged."""
    bundle = bundle_from(tmp_path, "r9700-3x", files)  # rocminfo only: no amd-smi in this recording
    report = diagnose_bundle(bundle)
    assert report.versions["rocm"] == version
    ids = {f.id for f in report.findings}
    assert (finding in ids) if finding else not ids & {"rocm.not_in_manifest", "rocm.unsupported_gpu"}


def test_a_bundle_that_lists_no_gpu_is_inconclusive_never_pass(tmp_path):
    """Issue 9 item 7's sweep: "0 checks, PASS" was printed for a bundle holding only os-release."""
    bundle = tmp_path / "node1"
    bundle.mkdir()
    (bundle / "os-release").write_text((FIXTURES / "osrelease" / "debian-12.txt").read_text())
    report = diagnose_bundle(bundle)
    assert (report.status, report.exit_code) == ("INCONCLUSIVE", 4)
    assert report.summary().endswith("no file in it lists the node's GPUs, so nothing about them was judged")


# ---- PCIe AER counters (aer.txt, `grep -H .` of /sys/devices/**/aer_dev_*)


def aer_lines(path: str, kind: str, counts: dict[str, int]) -> list[str]:
    total = {"correctable": "TOTAL_ERR_COR", "nonfatal": "TOTAL_ERR_NONFATAL", "fatal": "TOTAL_ERR_FATAL"}[
        kind
    ]
    lines = [f"{path}/aer_dev_{kind}:{name} {n}" for name, n in counts.items()]
    return [*lines, f"{path}/aer_dev_{kind}:{total} {sum(counts.values())}"]


ROOT_PORT = "/sys/devices/pci0000:00/0000:00:01.1"
GPU_03 = f"{ROOT_PORT}/0000:01:00.0/0000:02:00.0/0000:03:00.0"
GPU_43 = "/sys/devices/pci0000:40/0000:40:01.1/0000:41:00.0/0000:42:00.0/0000:43:00.0"


def test_uncorrectable_aer_errors_at_a_gpus_root_port_fail_with_the_riser_hint(tmp_path):
    """The r9700-2x node's first card (0000:03:00.0) with a completion timeout counted at its root port."""
    text = "\n".join(
        aer_lines(ROOT_PORT, "correctable", {"RxErr": 0})
        + aer_lines(ROOT_PORT, "nonfatal", {"CmpltTO": 2})
        + aer_lines(GPU_03, "correctable", {"RxErr": 0})
        + aer_lines(GPU_43, "correctable", {"RxErr": 0})
    )
    bundle = bundle_from(tmp_path, "r9700-2x", {"aer.txt": text + "\n"})

    finding = only(diagnose_bundle(bundle), "pcie.aer")

    assert severity_of(finding) == "FAIL"
    assert finding.detail == "0000:03:00.0: 2 nonfatal at root port 0000:00:01.1 (CmpltTO 2) since boot"
    assert "reseat the card" in finding.hint and "riser" in finding.hint
    assert [(e.file, e.line) for e in evidence_of(finding)] == [("aer.txt", 4)]


def test_corrected_aer_errors_on_a_gpu_warn_and_a_clean_gpu_says_nothing(tmp_path):
    text = "\n".join(aer_lines(GPU_03, "correctable", {"BadTLP": 7}) + aer_lines(GPU_43, "fatal", {"DLP": 0}))
    bundle = bundle_from(tmp_path, "r9700-2x", {"aer.txt": text + "\n"})

    finding = only(diagnose_bundle(bundle), "pcie.aer")

    assert severity_of(finding) == "WARN"
    assert finding.detail.startswith("0000:03:00.0: 7 correctable at GPU 0000:03:00.0 (BadTLP 7)")


def test_a_bundle_without_aer_txt_says_the_pcie_errors_were_not_judged(tmp_path):
    report = diagnose_bundle(bundle_from(tmp_path, "r9700-2x"))

    assert any(n.evidence["topic"] == "PCIe errors (AER counters)" for n in report.not_judged)


# ---- Debian 12 (issue 9 item 9)


def test_an_r9700_on_debian_12_is_best_effort_and_on_ubuntu_24_04_says_nothing(tmp_path):
    """AMD lists Debian 12 for Instinct GPUs only (every matrix, manifest gfx_os): a Radeon node on it
    is best effort, said as preflight says it; Ubuntu 24.04 is listed and gets no finding."""
    debian = (FIXTURES / "osrelease" / "debian-12.txt").read_text()
    packages = "rocm-core\t7.1.1.70101-38~24.04\tii \n"
    bundle = bundle_from(tmp_path, "r9700-3x", {"os-release": debian, "packages.txt": packages})

    finding = only(diagnose_bundle(bundle), "rocm.os_listed")

    assert severity_of(finding) == "WARN"
    assert finding.detail.startswith(
        "AMD lists gfx1201 for ROCm 7.1.1 only on ubuntu-22.04, ubuntu-24.04; Debian GNU/Linux 12 (bookworm) "
        "is best effort. AMD lists Debian 12 for Instinct GPUs only, never for a Radeon"
    )
    assert (evidence_of(finding)[0].file, evidence_of(finding)[0].line) == (
        "os-release",
        line_of(bundle / "os-release", "VERSION_ID"),
    )
    ubuntu = debian.replace('VERSION_ID="12"', 'VERSION_ID="24.04"').replace("ID=debian", "ID=ubuntu")
    (bundle / "os-release").write_text(ubuntu)
    assert "rocm.os_listed" not in {f.id for f in diagnose_bundle(bundle).findings}


# ---- how much was judged


def test_rocminfo_alone_is_inconclusive_never_pass(tmp_path):
    """Nothing wrong in it, but it answers 6 of 15 checks: "PASS, 9 not judged" vouched for nothing."""
    bundle = tmp_path / "node1"
    bundle.mkdir()
    shutil.copy(RECORDED / "r9700-3x" / "rocminfo.txt", bundle / "rocminfo.txt")
    report = diagnose_bundle(bundle)
    assert report.findings == [] and len(report.gpus) == 3
    assert (report.status, report.exit_code) == ("INCONCLUSIVE", 4)
    assert report.summary() == (
        f"node1: INCONCLUSIVE (0 failed, 0 warnings, 0 notes, {len(report.not_judged)} not judged): "
        f"its files answer {len(report.judged)} of {len(report.judged) + len(report.unjudged)} checks, "
        "too few to call the node healthy (`r9700ctl collect` records a full bundle)"
    )
    assert report.to_dict()["checks"] == {"judged": report.judged, "not_judged": report.unjudged}


def test_a_healthy_bundle_that_answers_most_checks_passes(tmp_path):
    files = {
        "env.txt": "PATH=/usr/bin\nUSER=ai\n",
        "id.txt": "uid=1000(ai) gid=1000(ai) groups=1000(ai),44(video),992(render)\n",
        "cmdline.txt": "BOOT_IMAGE=/boot/vmlinuz-6.8.0-90-generic root=/dev/sda1 ro iommu=pt\n",
        "rocm-version.txt": "7.1.1-38\n",
        "dmesg.txt": "[    5.123456] amdgpu 0000:0a:00.0: amdgpu: SE 4, SH per SE 2, CU per SH 8\n",
    }
    report = diagnose_bundle(bundle_from(tmp_path, "r9700-3x", files))
    assert [f for f in report.findings if severity_of(f) != "INFO"] == [], report.findings
    assert len(report.judged) > len(report.unjudged), (report.judged, report.unjudged)
    assert report.status == "PASS"


# ---- issue 22 item 10: a ROCm release older than the first one with the GPU's target


@pytest.mark.parametrize("version", ["6.4.0", "6.3.0", "6.2.4"])
def test_a_rocm_older_than_the_first_release_with_gfx1201_fails_naming_those_that_work(tmp_path, version):
    """Bug pinned (issue 22 item 10): 6.4.0 (no gfx1201: support starts with 6.4.1) was a WARN "not in
    the manifest", and so would be any older release the manifest does not list."""
    bundle = bundle_from(tmp_path, "r9700-2x")
    edit(bundle / "amd-smi.txt", "ROCm version: 7.2.0", f"ROCm version: {version}")

    report = diagnose_bundle(bundle)

    finding = only(report, "rocm.unsupported_gpu")
    assert severity_of(finding) == "FAIL"
    assert finding.detail.startswith(f"ROCm {version} does not support gfx1201 (AMD Radeon AI PRO R9700)")
    assert "support starts with ROCm 6.4.1; releases that do: 6.4.1, 7.0.2, 7.1.1, 7.2.3" in finding.detail
    assert "rocm.not_in_manifest" not in {f.id for f in report.findings}
    assert report.exit_code == 2


# ---- issue 22 item 11: why rocminfo could not open /dev/kfd, by its errno and its own group line

KFD_DENIED = "ROCk module is loaded\nUnable to open /dev/kfd read-write: Permission denied\n"
# rocminfo.cc CheckInitialState's wording when the user is not in the group owning /dev/kfd
NOT_MEMBER = (
    'ai is not member of "render" group, the default DRM access group. Users must be a member of the '
    '"render" group or another DRM access group in order for ROCm applications to run successfully.\n'
)


def test_permission_denied_with_the_user_outside_render_asks_for_usermod(tmp_path):
    bundle = bundle_from(tmp_path, "r9700-3x", {"rocminfo.txt": KFD_DENIED + NOT_MEMBER})

    finding = only(diagnose_bundle(bundle), "rocm.runtime_error")

    assert finding.detail == (
        "rocminfo could not open /dev/kfd (Permission denied): ai is not in the render group that owns it"
    )
    assert finding.hint.startswith("usermod -aG render,video ai, then log in again")


def test_permission_denied_with_the_user_in_render_is_a_stale_session_not_usermod(tmp_path):
    """rocminfo checks the user database (getgrouplist), not the session's groups: listed in render
    yet refused means the login predates the usermod (rocminfo.cc CheckInitialState)."""
    bundle = bundle_from(
        tmp_path, "r9700-3x", {"rocminfo.txt": KFD_DENIED + "ai is member of render group\n"}
    )

    finding = only(diagnose_bundle(bundle), "rocm.runtime_error")

    assert "although ai is listed in the render group" in finding.detail
    assert finding.hint.startswith("log out and in again") and "No usermod is needed" in finding.hint


def test_the_session_without_render_that_rocminfo_finds_in_render_is_told_to_log_in_again(tmp_path):
    """id.txt (the session) lacks render; rocminfo's line says the user database has it: usermod
    was already run, so the advice is a new login, not another usermod."""
    files = {
        "rocminfo.txt": KFD_DENIED + "ai is member of render group\n",
        "id.txt": "uid=1000(ai) gid=1000(ai) groups=1000(ai),44(video)\n",
    }
    report = diagnose_bundle(bundle_from(tmp_path, "r9700-3x", files))

    access = only(report, "access.not_in_render")
    assert "the membership was added after this login" in access.detail
    assert "usermod" not in access.hint.replace("no usermod is needed", "")


@pytest.mark.parametrize(
    ("errno", "meaning"),
    [
        ("No such file or directory", "/dev/kfd does not exist"),
        ("Cannot allocate memory", "KFD has no GPU to hand out"),
        ("Operation not permitted", "refused by policy, not by the file's group"),
    ],
)
def test_other_errnos_of_dev_kfd_name_the_drivers_state_and_never_usermod(tmp_path, errno, meaning):
    text = (
        f"ROCk module is loaded\nUnable to open /dev/kfd read-write: {errno}\n"
        + "root is member of render group\n"
    )
    report = diagnose_bundle(bundle_from(tmp_path, "r9700-3x", {"rocminfo.txt": text}))

    finding = only(report, "rocm.runtime_error")
    assert f"({errno}): not a permission problem" in finding.detail and meaning in finding.detail
    assert "usermod" not in finding.hint


def test_a_rocminfo_that_stopped_before_any_agent_is_not_no_gpu_found(tmp_path):
    """Bug pinned (issue 22 item 11): rocminfo alone, failed at /dev/kfd, gave "no GPU found in
    rocminfo.txt, check that the cards are seated"; nothing says which GPUs the node has."""
    bundle = tmp_path / "node"
    bundle.mkdir()
    (bundle / "rocminfo.txt").write_text((RECORDED / "rx9070xt-kfd-einval" / "rocminfo.txt").read_text())

    report = diagnose_bundle(bundle)

    assert {f.id for f in report.findings} == {"rocm.runtime_error"}
    unjudged = next(n for n in report.not_judged if n.evidence["topic"] == "which GPUs the node has")
    assert "rocminfo stopped before listing any agent" in str(unjudged)


# ---- issue 22 item 12: HSA_OVERRIDE_GFX_VERSION rewrites the names rocminfo prints


def rocminfo_under_override(path: Path, names: dict[str, str]) -> None:
    """The recorded rocminfo as the runtime prints it under an override: each agent's gfx name and
    ISA rewritten (ROCm/ROCm#5696: a Radeon 8060S listed as gfx1201 under 12.0.1), chip ids kept."""
    lines = []
    for line in path.read_text().splitlines(keepends=True):
        for old, new in names.items():
            if line.lstrip().startswith("Name:") and old in line:
                line = line.replace(old, new)
        lines.append(line)
    path.write_text("".join(lines))


def test_an_override_judged_by_the_chip_ids_not_by_the_names_it_made_rocminfo_print(tmp_path):
    """Bug pinned (issue 22 item 12): under HSA_OVERRIDE_GFX_VERSION=11.0.0 rocminfo lists the RX 9070
    XT (chip 0x7550) and the iGPU (0x13c0) as gfx1100: the doctor took gfx1100 for the cards' own
    target and called the override harmless; the iGPU was not judged at all."""
    bundle = bundle_from(tmp_path, "rx9070xt-igpu", {"env.txt": "HSA_OVERRIDE_GFX_VERSION=11.0.0\n"})
    rocminfo_under_override(bundle / "rocminfo.txt", {"gfx1201": "gfx1100", "gfx1036": "gfx1100"})

    report = diagnose_bundle(bundle)

    assert [(g.pci_id, g.gfx, g.reported_gfx, g.discrete) for g in report.gpus] == [
        ("1002:7550", "gfx1201", "gfx1100", True),
        ("1002:13c0", "gfx1036", "gfx1100", False),
    ]
    finding = only(report, "env.hsa_override")
    assert severity_of(finding) == "FAIL"
    assert "gfx1100 (RDNA3) code on gfx1201 (RDNA4: AMD Radeon RX 9070 XT)" in finding.detail
    assert "on gfx1036 (RDNA2: AMD Granite Ridge integrated graphics)" in finding.detail
    assert "ROCR_VISIBLE_DEVICES" in finding.hint


def test_an_override_seen_only_in_rocminfos_names_is_found_without_env_txt(tmp_path):
    """No env.txt (the owner posted rocminfo only): a known chip listed under another target still
    shows the override was set where rocminfo ran."""
    bundle = bundle_from(tmp_path, "rx9070xt-igpu")
    rocminfo_under_override(bundle / "rocminfo.txt", {"gfx1201": "gfx1100", "gfx1036": "gfx1100"})

    finding = only(diagnose_bundle(bundle), "env.hsa_override")

    assert severity_of(finding) == "FAIL"
    assert finding.detail.startswith("rocminfo lists ")
    assert "AMD Radeon RX 9070 XT (1002:7550, gfx1201)" in finding.detail
    assert "HSA_OVERRIDE_GFX_VERSION=11.0.0 was set where rocminfo ran" in finding.detail
    assert evidence_of(finding)[0].file == "rocminfo.txt"


def test_the_cards_own_override_still_fails_for_the_igpu_it_relabels(tmp_path):
    """ROCm/ROCm#5696: HSA_OVERRIDE_GFX_VERSION=12.0.1 in .bashrc made the iGPU list as gfx1201. Own
    target of the card (a warning), RDNA4 code on the RDNA2 iGPU (a failure); the iGPU is never
    presented as gfx1201."""
    bundle = bundle_from(tmp_path, "rx9070xt-igpu", {"env.txt": "HSA_OVERRIDE_GFX_VERSION=12.0.1\n"})
    rocminfo_under_override(bundle / "rocminfo.txt", {"gfx1036": "gfx1201"})

    report = diagnose_bundle(bundle)

    igpu = next(g for g in report.gpus if g.discrete is False)
    assert (igpu.gfx, igpu.reported_gfx) == ("gfx1036", "gfx1201")
    finding = only(report, "env.hsa_override")
    assert severity_of(finding) == "FAIL"
    assert "gfx1201 (RDNA4) code on gfx1036" in finding.detail
    assert "is the GPUs' own target gfx1201" in finding.detail
    assert "gfx1036" in only(report, "gpu.integrated_beside_discrete").detail


def test_an_igpu_of_unknown_chip_under_the_override_has_no_target_rather_than_the_cards(tmp_path):
    """Without a chip id the manifest knows, the iGPU's printed gfx1201 is the override's doing: its
    target is unknown (never the discrete card's), and the override is not called right for it."""
    bundle = bundle_from(tmp_path, "rx9070xt-igpu", {"env.txt": "HSA_OVERRIDE_GFX_VERSION=12.0.1\n"})
    rocminfo_under_override(bundle / "rocminfo.txt", {"gfx1036": "gfx1201"})
    edit(bundle / "rocminfo.txt", "  Chip ID:                 5056(0x13c0)                       \n", "")

    report = diagnose_bundle(bundle)

    igpu = next(g for g in report.gpus if g.discrete is False)
    assert (igpu.pci_id, igpu.gfx, igpu.reported_gfx) == (None, None, "gfx1201")
    assert {g.gfx for g in report.gpus if g.discrete} == {"gfx1201"}
    finding = only(report, "env.hsa_override")
    assert "also rewrites AMD Radeon Graphics (integrated), which rocminfo lists as gfx1201" in finding.detail
    assert "true target is unknown" in finding.detail
    assert "gfx1201" not in only(report, "gpu.integrated_beside_discrete").detail


# ---- issue 22 items 13, 14: a kernel log without prefixes, lspci without -nn


def test_smu_lines_pasted_without_timestamps_or_pci_prefixes_are_found_and_not_unreadable(tmp_path):
    """Bug pinned (issue 22 item 13): the same SMU failure (ROCm/legacy-rocm-build#2196) pasted as
    "amdgpu: SMU: ..." lines was "could not read dmesg.txt" and nothing was found in it."""
    lines = (RECORDED / "amd-smu-busy" / "dmesg.txt").read_text().splitlines()
    pasted = [re.sub(r"^\[[^\]]*\] amdgpu 0000:0d:00\.0: ", "", line) for line in lines[1:]]
    bundle = bundle_from(tmp_path, "r9700-3x", {"dmesg.txt": "\n".join(pasted) + "\n"})

    report = diagnose_bundle(bundle)

    ids = {f.id for f in report.findings}
    assert severity_of(only(report, "dmesg.amdgpu_smu_busy")) == "FAIL"
    assert "bundle.unreadable" not in ids


# The Gigabyte R9700's title line as `lspci -vnn` printed it (clbr/radeontop#184)
NN_TITLE = (
    "VGA compatible controller [0300]: Advanced Micro Devices, Inc. [AMD/ATI] Navi 48 [Radeon AI PRO R9700] "
    "[1002:7551] (rev c0)"
)


def test_lspci_without_nn_of_an_r9700_names_it_and_still_reads_its_bar(tmp_path):
    """Bug pinned (issue 22 item 14): the Gigabyte R9700's block printed by `lspci -v` (no -nn) gave
    "no GPU found"."""
    bundle = bundle_from(tmp_path, "r9700-1x-gigabyte")
    edit(
        bundle / "lspci.txt",
        NN_TITLE,
        NN_TITLE.replace(" [0300]", "").replace(" [1002:7551]", ""),
    )

    report = diagnose_bundle(bundle)

    assert [(g.bdf, g.pci_id, g.name, g.gfx) for g in report.gpus] == [
        ("0000:0a:00.0", "1002:7551", "AMD Radeon AI PRO R9700", "gfx1201")
    ]
    assert [(f.id, severity_of(f)) for f in report.findings if severity_of(f) in ("WARN", "FAIL")] == []
    assert any("lspci ran without root" in n.detail for n in report.not_judged)  # its links, as with -nn


def test_lspci_from_a_pci_ids_that_predates_the_card_gives_its_device_id(tmp_path):
    """An older pci.ids prints "Device 7551" for a chip it does not name: the id is there."""
    bundle = bundle_from(tmp_path, "r9700-1x-gigabyte")
    edit(
        bundle / "lspci.txt",
        NN_TITLE,
        "VGA compatible controller: Advanced Micro Devices, Inc. [AMD/ATI] Device 7551 (rev c0)",
    )

    report = diagnose_bundle(bundle)

    assert [(g.pci_id, g.name, g.gfx) for g in report.gpus] == [
        ("1002:7551", "AMD Radeon AI PRO R9700", "gfx1201")
    ]


def test_a_gpu_of_unknown_chip_is_judged_by_the_gfx_ip_block_amdgpu_logged(tmp_path):
    """Issue 22 item 12, dmesg's IP block names: with no chip id to look up, amdgpu's "detected ip
    block ... <gfx_v12_0>" (the RX 9070 XT's, freebsd/drm-kmod#462) at the card's address shows an
    11.0.0 override crosses the GFX major version. Planted: the W7900 start-up lines of
    tests/fixtures/dmesg/w7900-ip-blocks.txt with the RDNA4 block, beside the RX 9070 XT's rocminfo
    without its Chip ID line, both at 0000:03:00.0."""
    log = (FIXTURES / "dmesg" / "w7900-ip-blocks.txt").read_text().replace("<gfx_v11_0>", "<gfx_v12_0>")
    files = {"env.txt": "HSA_OVERRIDE_GFX_VERSION=11.0.0\n", "dmesg.txt": log}
    bundle = bundle_from(tmp_path, "rx9070xt-igpu", files)
    rocminfo_under_override(bundle / "rocminfo.txt", {"gfx1201": "gfx1100"})
    edit(bundle / "rocminfo.txt", "  Chip ID:                 30032(0x7550)                      \n", "")

    report = diagnose_bundle(bundle)

    card = next(g for g in report.gpus if g.discrete)
    assert (card.pci_id, card.gfx, card.reported_gfx, card.gfx_ip) == (None, None, "gfx1100", "gfx_v12_0")
    finding = only(report, "env.hsa_override")
    assert severity_of(finding) == "FAIL"
    assert "whose GFX IP is gfx_v12_0 in dmesg: another major version" in finding.detail
