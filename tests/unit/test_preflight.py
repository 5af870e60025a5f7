"""Preflight: the facts gathered on a node (nodefacts.py) and the judge on the controller.

The judge is pure, so every case is a table row of facts and host variables; the fact
gatherer reads a fake root built in tmp_path (sysfs, /proc, /etc) and, once, runs as a
real child process the way the role and the doctor run it (`python3 - ARGS` on stdin).
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from r9700ctl import manifest as manifest_module
from r9700ctl import preflight
from r9700ctl.agent import nodefacts
from r9700ctl.agent.result import FAIL, PASS, SKIP, WARN, CheckResult, one_line

MANIFEST = manifest_module.load()
NEWEST = MANIFEST.release_names()[-1]
R9700_RELEASES = MANIFEST.releases_supporting({"gfx1201"})

# Recorded on a Debian 12 machine (this project's build host), `LC_ALL=C apt-cache policy
# linux-headers-amd64 ca-certificates`: a package with only a candidate, one installed.
APT_POLICY_RECORDED = """\
linux-headers-amd64:
  Installed: (none)
  Candidate: 6.1.192-3
  Version table:
     6.1.192-3 500
        500 http://deb.debian.org/debian-security bookworm-security/main amd64 Packages
     6.1.176-1 500
        500 http://deb.debian.org/debian bookworm/main amd64 Packages
ca-certificates:
  Installed: 20230311+deb12u1
  Candidate: 20250419~deb12u2
  Version table:
     20250419~deb12u2 500
        500 http://deb.debian.org/debian-security bookworm-security/main amd64 Packages
 *** 20230311+deb12u1 500
        500 http://deb.debian.org/debian bookworm/main amd64 Packages
        500 http://deb.debian.org/debian bookworm-updates/main amd64 Packages
        100 /var/lib/dpkg/status
"""


def r9700(n: int, first_bus: int = 3) -> list[dict[str, Any]]:
    return [
        {
            "address": f"0000:{first_bus + i:02x}:00.0",
            "vendor": "0x1002",
            "device": "0x7551",
            "class": "0x030000",
            "revision": "0xc0",  # as sysfs reports a real R9700 (lspci "(rev c0)")
        }
        for i in range(n)
    ]


def facts(os_key: str = "debian-12", gpus: list[dict[str, Any]] | None = None, **over: Any) -> dict[str, Any]:
    """Facts shaped like nodefacts.gather() output for a healthy node; `over` replaces top-level keys."""
    os_id, version = os_key.split("-")
    kernel = "6.8.0-31-generic" if os_id == "ubuntu" else "6.1.0-18-amd64"
    base = {
        "schema": nodefacts.SCHEMA,
        "os": {"id": os_id, "version_id": version, "codename": "x", "key": os_key, "pretty_name": os_key},
        "kernel": kernel,
        "service_manager": "systemd",
        "pci": {"source": "sysfs", "devices": r9700(4) if gpus is None else gpus},
        "apt_lock": {"holders": [], "seen_holders": [], "waited_s": 0.0, "timeout_s": 600},
        "apt_update": {"ran": True, "ok": True, "detail": ""},
        "apt": {
            "available": True,
            "error": "",
            "headers_package": f"linux-headers-{kernel}",
            "modules_extra_package": f"linux-modules-extra-{kernel}",
            "packages": {
                f"linux-headers-{kernel}": {"installed": None, "candidate": "6.8.0-31.31"},
                f"linux-modules-extra-{kernel}": {"installed": None, "candidate": "6.8.0-31.31"},
            },
        },
        "disk": {"/": 200 * 10**9, "/var": 200 * 10**9},
        "secure_boot": {"state": "disabled", "source": "mokutil", "detail": "SecureBoot disabled"},
        "dkms_signing": {"configured": False, "detail": ""},
        "amdgpu": {"loaded": False, "version": None, "dkms": False},
        "packages": {"amdgpu-dkms": None, "rocm-core": None},
        "errors": [],
    }
    base.update(over)
    return base


def judge(f: dict[str, Any], **host_vars: Any) -> preflight.Verdict:
    return preflight.judge(f, {f"r9700_{k}": v for k, v in host_vars.items()}, MANIFEST)


def check(verdict: preflight.Verdict, check_id: str) -> CheckResult:
    matches = [c for c in verdict.checks if c.id == check_id]
    assert matches, f"no check {check_id}: {[c.id for c in verdict.checks]}"
    return matches[0]


# -- ROCm release resolution -------------------------------------------------------------


def test_auto_resolves_to_the_newest_release_supporting_the_r9700_on_ubuntu_2404():
    """`auto` must pick per host the newest manifest release for its GPUs and OS (noble suite); one
    card has no RCCL collective to hang, so no known issue holds it back."""
    v = judge(facts("ubuntu-24.04", gpus=r9700(1)))
    assert v.ok, [one_line(c) for c in v.failures]
    assert v.resolved.rocm_version == NEWEST
    assert v.resolved.suite == "noble"
    assert v.resolved.gfx_targets == ["gfx1201"]
    assert v.resolved.amdgpu_repo_path == f"amdgpu/{MANIFEST.release(NEWEST).amdgpu}/ubuntu"
    assert v.resolved.rocm_repo_path == f"rocm/apt/{MANIFEST.release(NEWEST).rocm_path}"
    assert all(c.status != WARN for c in v.checks), [one_line(c) for c in v.warnings]


def test_auto_skips_a_release_with_a_blocking_known_issue_for_the_nodes_gpus_and_says_why():
    """4x R9700: the RCCL of ROCm 7.2.x deadlocks on gfx1201 (vllm-project/vllm#40980), so `auto`
    takes 7.1.1 and the check says which release it skipped and why."""
    v = judge(facts("ubuntu-24.04"))
    assert v.resolved.rocm_version == "7.1.1"
    c = check(v, "rocm.version")
    assert c.status == PASS
    assert c.detail == (
        "auto -> ROCm 7.1.1 (newest supporting gfx1201; skipped 7.2.3: known issue r9700-rccl-72-hang "
        "(RCCL collectives deadlock on two or more gfx1201 GPUs with ROCm 7.2.x))"
    )
    assert v.resolved.rocm_choice == c.detail
    assert not any(c.id.startswith("known_issue.") for c in v.checks)
    assert "NCCL_PROTO" not in env_of(v)  # 7.1.1 needs no NCCL_PROTO workaround


def kernel_facts(release: str, os_key: str = "ubuntu-24.04", **over: Any) -> dict[str, Any]:
    """A healthy node running this kernel (its headers and modules-extra have candidates)."""
    f = facts(os_key, **over)
    f["kernel"] = release
    f["apt"]["headers_package"] = f"linux-headers-{release}"
    f["apt"]["modules_extra_package"] = f"linux-modules-extra-{release}"
    f["apt"]["packages"] = {
        f"linux-headers-{release}": {"installed": None, "candidate": "1"},
        f"linux-modules-extra-{release}": {"installed": None, "candidate": "1"},
    }
    return f


def test_a_kernel_line_the_release_does_not_list_warns_with_the_lines_amd_lists():
    """Issue 22 item 2: ROCm 7.x lists Ubuntu 24.04 with 6.8 (GA) and 6.14 (HWE); the 6.11 HWE
    kernel of 24.04.2 is 6.4.x's. Nothing looked at the running kernel at all."""
    v = judge(kernel_facts("6.11.0-19-generic"), rocm_version="7.1.1")
    c = check(v, "kernel.line")
    assert c.status == WARN
    assert c.detail == (
        "kernel 6.11.0-19-generic (line 6.11) is not a kernel line AMD lists for ROCm 7.1.1 on "
        "ubuntu-24.04 (6.8 GA, 6.14 HWE)"
    )
    assert c.hint == (
        "boot a 6.8 (GA) or 6.14 (HWE) kernel, or use a release that lists 6.11 on ubuntu-24.04: 6.4.1"
    )


def test_a_kernel_the_releases_amdgpu_dkms_does_not_build_on_is_refused_before_any_change():
    """Issue 22 item 2: ROCm 6.4.1's amdgpu-dkms fails to build on the 6.14 HWE kernel
    (ROCm/amdgpu#192); provisioning it there ends in a failed dpkg, not in a driver."""
    v = judge(kernel_facts("6.14.0-24-generic"), rocm_version="6.4.1")
    c = check(v, "kernel.line")
    assert c.status == FAIL and not v.ok
    assert c.detail.startswith(
        "ROCm 6.4.1's amdgpu-dkms does not build on kernel 6.14.0-24-generic (line 6.14): "
        "https://github.com/ROCm/amdgpu/issues/192"
    )
    assert c.hint == (
        "boot a 6.8 (GA) or 6.11 (HWE) kernel, or use a release that lists 6.14 on ubuntu-24.04: "
        "7.0.2, 7.1.1, 7.2.3"
    )
    # The kernel's own driver is not built by DKMS: not listed, but no build to fail.
    inbox = judge(kernel_facts("6.14.0-24-generic"), rocm_version="6.4.1", driver_source="inbox")
    assert check(inbox, "kernel.line").status == WARN


def test_a_listed_kernel_line_passes_and_names_it():
    v = judge(kernel_facts("6.8.0-49-generic", os_key="ubuntu-22.04"), rocm_version="6.4.1")
    c = check(v, "kernel.line")
    assert c.status == PASS
    assert c.detail == (
        "kernel 6.8.0-49-generic: line 6.8 (HWE), which AMD lists for ROCm 6.4.1 on ubuntu-22.04"
    )


@pytest.mark.parametrize(
    ("kernel", "chosen"),
    [
        ("6.11.0-19-generic", "6.4.1"),  # only 6.x lists 24.04.2's HWE kernel
        ("6.14.0-24-generic", "7.1.1"),  # 7.x lists it; 6.4.1 cannot build there (and 7.2.3 is blocked)
        ("6.8.0-49-generic", "7.1.1"),  # every release lists the GA kernel
        ("6.17.0-5-generic", "7.1.1"),  # none lists it: the choice is as without a kernel, and it warns
    ],
)
def test_auto_prefers_a_release_that_lists_the_nodes_kernel(kernel, chosen):
    """Issue 22 item 2: `auto` took the newest release whatever the kernel; now it prefers one
    whose AMD lists the node's kernel line, and never one whose DKMS build is known to fail."""
    v = judge(kernel_facts(kernel))
    assert v.resolved.rocm_version == chosen, v.resolved.rocm_choice
    assert v.ok


def test_auto_says_when_the_kernel_decided_the_release():
    v = judge(kernel_facts("6.11.0-19-generic"))
    assert v.resolved.rocm_choice == (
        "auto -> ROCm 6.4.1 (newest supporting gfx1201 that AMD lists with kernel 6.11 on ubuntu-24.04; "
        "7.0.2, 7.1.1, 7.2.3 do not)"
    )
    assert check(v, "kernel.line").status == PASS


def test_a_pinned_release_with_a_blocking_issue_warns_and_gets_the_workaround():
    v = judge(facts("ubuntu-24.04"), rocm_version="7.2.3")
    assert v.ok and v.resolved.rocm_version == "7.2.3"
    c = check(v, "known_issue.r9700-rccl-72-hang")
    assert c.status == WARN
    assert c.detail.startswith("ROCm 7.2.3 has known issue r9700-rccl-72-hang on 4 gfx1201 GPU(s)")
    assert c.detail.endswith("workaround in force: NCCL_PROTO=Simple")
    assert c.hint.startswith("set r9700_rocm_version to 7.1.1 or auto to avoid it")
    entry = next(e for e in v.resolved.environment if e["name"] == "NCCL_PROTO")
    assert entry == {
        "name": "NCCL_PROTO",
        "value": "Simple",
        "reason": "workaround of known issue r9700-rccl-72-hang: RCCL collectives deadlock on two or more "
        "gfx1201 GPUs with ROCm 7.2.x",
        "source": "https://github.com/vllm-project/vllm/issues/40980",
    }
    assert env_of(v)["HSA_ENABLE_IPC_MODE_LEGACY"] == "0"
    found = next(k for k in v.resolved.known_issues if k["id"] == "r9700-rccl-72-hang")
    assert found["in_force"] == "in force: NCCL_PROTO=Simple"


def test_a_users_value_wins_over_a_workaround_and_the_issue_says_it_is_not_in_force():
    v = judge(facts("ubuntu-24.04"), rocm_version="7.2.3", env_extra={"NCCL_PROTO": "LL"})
    assert env_of(v)["NCCL_PROTO"] == "LL"
    found = next(k for k in v.resolved.known_issues if k["id"] == "r9700-rccl-72-hang")
    assert found["in_force"] == "not in force: the environment list has NCCL_PROTO=LL (r9700_env)"


def env_of(v: preflight.Verdict) -> dict[str, str]:
    return {e["name"]: e["value"] for e in v.resolved.environment}


def test_known_issues_list_every_issue_of_the_node_with_what_is_in_force():
    v = judge(facts("ubuntu-24.04"))
    in_force = {k["id"]: k["in_force"] for k in v.resolved.known_issues}
    assert in_force == {
        "hsa-ipc-mode-legacy": "in force: HSA_ENABLE_IPC_MODE_LEGACY=0",
        "r9700-p2p-host-hang": "in force: NCCL_P2P_DISABLE=1 (through r9700_p2p)",
        "r9700-hotspot-throttle-bit": "advice only",
        "r9700-fan-stopped": "advice only",
        "r9700-4x-p2p-ipc-invalid": "in force: NCCL_P2P_DISABLE=1 (through r9700_p2p)",
    }
    assert check(v, "known_issues").detail.startswith(
        "known issues of this node: hsa-ipc-mode-legacy (in force"
    )


def test_skipping_a_known_issue_workaround_keeps_it_recorded_but_unapplied():
    v = judge(
        facts("ubuntu-24.04"), rocm_version="7.2.3", known_issue_workarounds_skip=["r9700-rccl-72-hang"]
    )
    assert "NCCL_PROTO" not in env_of(v)
    assert check(v, "known_issue.r9700-rccl-72-hang").detail.endswith(
        "workaround not applied (r9700_known_issue_workarounds_skip)"
    )
    none = judge(facts("ubuntu-24.04"), known_issue_workarounds_skip="all")
    assert not {"NCCL_PROTO", "HSA_ENABLE_IPC_MODE_LEGACY"} & set(env_of(none))


def test_a_node_without_gfx1201_gets_no_known_issue():
    mi300x = [{"address": "0000:05:00.0", "vendor": "0x1002", "device": "0x74a1", "class": "0x038000"}]
    v = judge(facts("ubuntu-24.04", gpus=mi300x * 1))
    assert v.resolved.known_issues == []
    assert not any(e["reason"].startswith("workaround of known issue") for e in v.resolved.environment)
    assert not any(c.id.startswith("known_issue") for c in v.checks)


def test_debian_12_gets_the_jammy_suite_with_a_best_effort_warning():
    """AMD lists the R9700 only on Ubuntu; Debian 12 installs AMD's jammy packages, said as a WARN."""
    v = judge(facts("debian-12"))
    assert v.ok
    assert v.resolved.suite == "jammy"
    warning = check(v, "rocm.os_listed")
    assert warning.status == WARN
    assert "best effort" in warning.detail and "ubuntu-24.04" in warning.detail
    assert warning.detail.endswith(
        "AMD lists Debian 12 for Instinct GPUs only, never for a Radeon: Debian 12 is r9700ctl's lab OS "
        "and best effort for R9700 nodes; Ubuntu 24.04 and 22.04 are the supported systems"
    )
    assert "Instinct" not in check(judge(facts("ubuntu-24.04")), "rocm.version").detail


def test_rocm_632_on_an_r9700_is_refused_naming_the_releases_that_would_work():
    """The article's ROCm 6.3.2 has no gfx1201: refuse, and say which releases would work."""
    v = judge(facts("ubuntu-22.04"), rocm_version="6.3.2")
    assert not v.ok
    c = check(v, "rocm.version")
    assert c.status == FAIL
    assert "ROCm 6.3.2 does not support gfx1201 (AMD Radeon AI PRO R9700)" in c.detail
    assert "releases that would work: " + ", ".join(R9700_RELEASES) in c.detail
    assert "r9700_rocm_version" in c.hint
    line = v.refusal("node1")
    assert line.startswith("node1: preflight refused, nothing changed: ROCm 6.3.2 does not support gfx1201")
    assert "\n" not in line


def test_allow_unsupported_forces_a_pin_loudly():
    """r9700_allow_unsupported honours the pin but must say so as a WARN, never silently."""
    v = judge(facts("ubuntu-22.04"), rocm_version="6.3.2", allow_unsupported=True)
    assert v.ok
    assert v.resolved.rocm_version == "6.3.2" and v.resolved.forced
    c = check(v, "rocm.version")
    assert c.status == WARN and c.detail.startswith("FORCED by r9700_allow_unsupported")
    assert v.resolved.suite == "jammy"


def test_a_pin_the_manifest_supports_is_honoured():
    """An explicit supported release is installed as pinned, not replaced by the newest."""
    v = judge(facts("ubuntu-24.04"), rocm_version="6.4.1")
    assert v.ok and v.resolved.rocm_version == "6.4.1"
    assert v.resolved.amdgpu_repo_path == "amdgpu/6.4.1/ubuntu"


def test_a_pin_missing_from_the_manifest_is_refused_listing_the_known_ones():
    """A typo'd release (6.2.0) fails with the list of releases the manifest knows."""
    c = check(judge(facts(), rocm_version="6.2.0"), "rocm.version")
    assert c.status == FAIL
    assert "6.2.0 is not in the manifest (known: " + ", ".join(MANIFEST.release_names()) in c.detail


def test_an_os_no_release_supports_is_refused():
    """Ubuntu 20.04 is not a system the roles install on: both the OS and the release checks fail."""
    v = judge(facts("ubuntu-20.04"))
    assert check(v, "os.release").status == FAIL
    assert check(v, "rocm.version").status == FAIL


# -- HSA override --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "status", "accepted"),
    [
        pytest.param("9.4.2", FAIL, "", id="mi300-target-on-gfx1201-refused"),
        pytest.param("11.0.0", FAIL, "", id="rdna3-on-rdna4-refused"),
        pytest.param("12.0.1", WARN, "12.0.1", id="native-value-accepted-as-pointless"),
        pytest.param("12.0.0", WARN, "12.0.0", id="same-family-accepted-with-warning"),
        pytest.param("", PASS, "", id="unset-needs-nothing"),
    ],
)
def test_hsa_override_is_checked_against_the_detected_targets(value, status, accepted):
    """docs/hardware.md: a cross-family override (9.4.2 on gfx1201) crashes the driver; it must be refused."""
    v = judge(facts(), hsa_override_gfx_version=value)
    c = check(v, "hsa.override")
    assert c.status == status, one_line(c)
    assert v.resolved.hsa_override_gfx_version == accepted
    if value == "9.4.2":
        assert "cross-family" in c.detail and "gfx942 (CDNA3)" in c.detail and "MI300X" in c.detail


def test_an_override_that_is_not_major_minor_stepping_is_refused_by_the_variable_check():
    """The shape is judged with every other value (r9700ctl/value_rules.py, the check the inventory
    runs before any host is contacted): one FAIL naming the variable; nothing is accepted."""
    v = judge(facts(), hsa_override_gfx_version="gfx1201")
    failed = [c for c in v.checks if c.status == FAIL]
    assert [c.id for c in failed] == ["settings"], [one_line(c) for c in failed]
    assert "r9700_hsa_override_gfx_version='gfx1201' is not major.minor.stepping" in failed[0].detail
    assert v.resolved.hsa_override_gfx_version == ""


def test_an_override_beside_an_igpu_warns_that_it_mislabels_the_igpu():
    """ROCm/ROCm#5696: a global override makes an iGPU report the discrete card's target."""
    igpu = {"address": "0000:7c:00.0", "vendor": "0x1002", "device": "0x164e", "class": "0x030000"}
    gpus = [*r9700(2), igpu]
    c = check(judge(facts(gpus=gpus), hsa_override_gfx_version="12.0.1"), "hsa.override")
    assert c.status == WARN and "integrated GPU" in c.detail


# -- GPUs ------------------------------------------------------------------------------------


def test_gpus_are_found_by_vendor_and_every_display_class():
    """Omnia's grep missed "VGA compatible controller": 0x0300, 0x0302 and 0x0380 all count."""
    gpus = [
        {"address": "0000:03:00.0", "vendor": "0x1002", "device": "0x7551", "class": "0x030000"},
        {"address": "0000:04:00.0", "vendor": "0x1002", "device": "0x7551", "class": "0x038000"},
        {"address": "0000:05:00.0", "vendor": "0x1002", "device": "0x7551", "class": "0x030200"},
        {"address": "0000:06:00.0", "vendor": "0x10de", "device": "0x2335", "class": "0x030200"},
    ]
    v = judge(facts(gpus=gpus), expected_gpus=3)
    assert v.resolved.discrete_gpus == 3
    assert check(v, "gpu.count").status == PASS


@pytest.mark.parametrize(
    ("expected", "status"),
    [
        pytest.param(4, PASS, id="four-of-four"),
        pytest.param(8, FAIL, id="four-of-eight"),
        pytest.param(None, SKIP, id="unset"),
    ],
)
def test_gpu_count_is_compared_with_r9700_expected_gpus(expected, status):
    """A card that fell off the bus must stop the node before it is provisioned as healthy."""
    c = check(judge(facts(), expected_gpus=expected), "gpu.count")
    assert c.status == status
    if status == FAIL:
        assert c.detail == "found 4 discrete AMD GPU(s), r9700_expected_gpus says 8"


def test_expected_gpus_that_is_not_a_number_is_a_settings_failure():
    """Bad host variables become one FAIL line instead of a traceback in the action plugin."""
    c = check(judge(facts(), expected_gpus="four"), "settings")
    assert c.status == FAIL and "r9700_expected_gpus='four'" in c.detail


def test_a_node_without_an_amd_gpu_is_refused():
    """Nothing to drive: refuse before installing a driver for hardware that is not there."""
    v = judge(facts(gpus=[]))
    assert check(v, "gpu.detected").status == FAIL
    assert not v.ok


def test_an_igpu_beside_discrete_cards_sets_rocr_visible_devices_to_the_discrete_ones():
    """The iGPU must not become ROCm device 0: indices follow PCI order of all AMD GPUs."""
    igpu = {"address": "0000:01:00.0", "vendor": "0x1002", "device": "0x164e", "class": "0x030000"}
    gpus = [igpu, *r9700(2)]
    v = judge(facts(gpus=gpus))
    assert v.resolved.igpu_present
    assert v.resolved.rocr_visible_devices == "1,2"
    assert judge(facts()).resolved.rocr_visible_devices == ""


def test_an_igpu_is_a_warning_with_amds_advice_to_disable_it_in_the_bios():
    """Issue 9 item 5: AMD's prerequisites say to disable the iGPU; hiding it may still crash ROCm."""
    igpu = {"address": "0000:01:00.0", "vendor": "0x1002", "device": "0x164e", "class": "0x030000"}
    v = judge(facts(gpus=[igpu, *r9700(2)]))
    c = check(v, "gpu.igpu")
    assert c.status == WARN and v.ok  # a warning, not a refusal: the node still gets ROCR_VISIBLE_DEVICES
    assert c.hint == (
        "disable the integrated GPU in the BIOS/UEFI setup (AMD's ROCm installation prerequisites)"
    )
    assert "may crash the system" in c.detail
    assert c.evidence["source"].startswith("https://rocm.docs.amd.com/")


def test_an_unknown_amd_display_device_is_a_warning_not_a_guess():
    """An id the manifest lacks gets no gfx target: say so instead of assuming an R9700."""
    unknown = {"address": "0000:09:00.0", "vendor": "0x1002", "device": "0x7590", "class": "0x030000"}
    gpus = [*r9700(1), unknown]
    c = check(judge(facts(gpus=gpus)), "gpu.known")
    assert c.status == WARN and "1002:7590" in c.detail


# -- kernel packages, disk, Secure Boot, apt lock, driver ------------------------------------


def test_missing_kernel_headers_refuse_a_dkms_node_with_the_package_named():
    """DKMS cannot build without linux-headers-$(uname -r): refuse before any change (R9)."""
    f = facts("ubuntu-24.04")
    f["apt"]["packages"]["linux-headers-6.8.0-31-generic"] = {"installed": None, "candidate": None}
    v = judge(f)
    c = check(v, "kernel.headers")
    assert c.status == FAIL
    assert "linux-headers-6.8.0-31-generic has no apt candidate" in c.detail
    assert "upgrade the kernel and reboot" in c.hint
    assert check(judge(f, driver_source="inbox"), "kernel.headers").status == SKIP


def test_missing_headers_in_lists_an_earlier_preflight_refreshed_say_how_old_they_are():
    f = facts("ubuntu-24.04")
    f["apt"]["packages"]["linux-headers-6.8.0-31-generic"] = {"installed": None, "candidate": None}
    f["apt_update"] = {
        "ran": False,
        "ok": None,
        "age_s": 600,
        "detail": "apt's lists were refreshed 600 s ago",
    }
    c = check(judge(f), "kernel.headers")
    assert c.status == FAIL and c.detail.startswith(
        "linux-headers-6.8.0-31-generic has no apt candidate (in apt's lists as refreshed 600 s ago; "
        "`provision --full` refreshes them): "
    )


def test_apt_that_cannot_answer_is_a_warning_not_a_refusal():
    """A stale rocm.list with another Signed-By breaks apt-cache; r9700_repos removes it, so go on."""
    f = facts()
    f["apt"]["error"] = "E: Conflicting values set for option Signed-By regarding source http://x/ jammy"
    f["apt"]["packages"]["linux-headers-6.1.0-18-amd64"] = {"installed": None, "candidate": None}
    c = check(judge(f), "kernel.headers")
    assert c.status == WARN and "Conflicting values" in c.detail


def test_modules_extra_is_asked_for_on_ubuntu_only():
    """Debian has no linux-modules-extra; on Ubuntu a missing one is worth a warning."""
    ubuntu = facts("ubuntu-22.04")
    ubuntu["apt"]["packages"]["linux-modules-extra-6.8.0-31-generic"] = {"installed": None, "candidate": None}
    assert check(judge(ubuntu), "kernel.modules_extra").status == WARN
    assert judge(facts("ubuntu-22.04")).resolved.modules_extra is True
    assert check(judge(facts("debian-12")), "kernel.modules_extra").status == SKIP
    assert judge(facts("debian-12")).resolved.modules_extra is False


def test_too_little_disk_is_refused_with_the_threshold_named():
    """Default 30 GB on / and /var (r9700_min_free_gb)."""
    f = facts(disk={"/": 200 * 10**9, "/var": 12 * 10**9})
    c = check(judge(f), "disk.var")
    assert c.status == FAIL and c.detail == "only 12.0 GB free on /var, need 30 GB (r9700_min_free_gb)"
    assert check(judge(f, min_free_gb=10), "disk.var").status == PASS


UBUNTU_MOK = {
    "key": "/var/lib/shim-signed/mok/MOK.priv",
    "certificate": "/var/lib/shim-signed/mok/MOK.der",
    "origin": "dkms's default on Ubuntu: the MOK of shim-signed",
}
DEBIAN_MOK = {
    "key": "/var/lib/dkms/mok.key",
    "certificate": "/var/lib/dkms/mok.pub",
    "origin": "dkms's default: its own MOK in /var/lib/dkms",
}


def signing(mok: dict[str, str], exists: bool = True, enrolled: str | None = "enrolled") -> dict[str, Any]:
    said = {
        "enrolled": f"{mok['certificate']} is already enrolled",
        "not_enrolled": f"{mok['certificate']} is not enrolled",
        "pending": f"{mok['certificate']} is already in the enrollment request",
    }.get(enrolled or "", "")
    return {
        **mok,
        "key_exists": exists,
        "certificate_exists": exists,
        "enrolled": enrolled if exists else None,
        "mokutil": said,
    }


SECURE_BOOT_ON = {"state": "enabled", "source": "mokutil", "detail": "SecureBoot enabled"}


@pytest.mark.parametrize(
    ("os_key", "mok", "exists", "enrolled", "status", "fix"),
    [
        pytest.param("ubuntu-24.04", UBUNTU_MOK, True, "enrolled", PASS, "", id="ubuntu-shim-mok-enrolled"),
        pytest.param(
            "ubuntu-24.04",
            UBUNTU_MOK,
            True,
            "not_enrolled",
            FAIL,
            "enroll it: sudo update-secureboot-policy --enroll-key, reboot",
            id="ubuntu-shim-mok-not-enrolled",
        ),
        pytest.param(
            "ubuntu-22.04",
            UBUNTU_MOK,
            False,
            None,
            FAIL,
            "create the key first (sudo update-secureboot-policy --new-key), then enroll it: "
            "sudo update-secureboot-policy --enroll-key",
            id="ubuntu-no-mok-yet",
        ),
        pytest.param("debian-12", DEBIAN_MOK, True, "enrolled", PASS, "", id="debian-dkms-mok-enrolled"),
        pytest.param(
            "debian-12",
            DEBIAN_MOK,
            True,
            "not_enrolled",
            FAIL,
            "enroll it: sudo mokutil --import /var/lib/dkms/mok.pub, reboot",
            id="debian-dkms-mok-not-enrolled",
        ),
        pytest.param(
            "debian-12",
            DEBIAN_MOK,
            False,
            None,
            FAIL,
            "-keyout /var/lib/dkms/mok.key -addext extendedKeyUsage=codeSigning -outform DER -out "
            "/var/lib/dkms/mok.pub), then enroll it: sudo mokutil --import /var/lib/dkms/mok.pub",
            id="debian-no-mok-yet",
        ),
        pytest.param("debian-12", DEBIAN_MOK, True, "pending", WARN, "Enroll MOK", id="enrollment-pending"),
        pytest.param("debian-12", DEBIAN_MOK, True, "unknown", WARN, "mokutil --test-key", id="no-mokutil"),
    ],
)
def test_secure_boot_judges_the_key_dkms_really_signs_with(os_key, mok, exists, enrolled, status, fix):
    """Issue 9 item 2: an Ubuntu node whose shim-signed MOK is enrolled was refused (only /var/lib/dkms
    was looked at), and the fix enrolled a key Ubuntu's DKMS never uses."""
    f = facts(os_key, secure_boot=SECURE_BOOT_ON, dkms_signing=signing(mok, exists, enrolled))
    c = check(judge(f), "secureboot")
    assert c.status == status, one_line(c)
    assert fix in c.hint
    if status == PASS:
        assert c.detail == (
            f"Secure Boot enabled; DKMS signs amdgpu with {mok['key']} + {mok['certificate']} "
            f"({mok['origin']}), enrolled ({mok['certificate']} is already enrolled)"
        )
    if status == FAIL:
        assert "disable Secure Boot" in c.hint and "r9700_driver_source: inbox" in c.hint


@pytest.mark.parametrize(
    ("state", "source", "status"),
    [
        pytest.param("enabled", "inbox", SKIP, id="inbox-builds-nothing"),
        pytest.param("not_efi", "dkms", PASS, id="legacy-bios"),
        pytest.param("disabled", "dkms", PASS, id="secure-boot-off"),
        pytest.param("unknown", "dkms", WARN, id="unknown-state"),
    ],
)
def test_secure_boot_off_or_no_build_needs_no_key(state, source, status):
    f = facts(secure_boot={"state": state, "source": "mokutil", "detail": ""}, dkms_signing={})
    assert check(judge(f, driver_source=source), "secureboot").status == status


def test_an_apt_lock_still_held_names_the_process():
    """R11: after waiting, name the PID and command line holding the dpkg lock."""
    holder = {
        "pid": 4242,
        "command": "/usr/bin/python3 /usr/bin/unattended-upgrade",
        "file": "/var/lib/dpkg/lock-frontend",
    }
    f = facts(apt_lock={"holders": [holder], "seen_holders": [holder], "waited_s": 600.0, "timeout_s": 600})
    c = check(judge(f), "apt.lock")
    assert c.status == FAIL
    assert c.detail == (
        "dpkg/apt lock still held after waiting 600 s: pid 4242 "
        "(/usr/bin/python3 /usr/bin/unattended-upgrade) holds /var/lib/dpkg/lock-frontend"
    )


def test_a_lock_released_while_waiting_passes_and_says_who_was_waited_for():
    """Waiting is normal on a fresh cloud node; report it, do not fail it."""
    holder = {"pid": 77, "command": "apt-get update", "file": "/var/lib/apt/lists/lock"}
    f = facts(apt_lock={"holders": [], "seen_holders": [holder], "waited_s": 12.5, "timeout_s": 600})
    c = check(judge(f), "apt.lock")
    assert (
        c.status == PASS
        and c.detail == "waited 12.5 s for pid 77 (apt-get update) to release the dpkg/apt lock"
    )


@pytest.mark.parametrize(
    ("source", "amdgpu", "status", "words"),
    [
        pytest.param(
            "present", {"loaded": False}, FAIL, "no amdgpu driver is loaded", id="present-needs-a-driver"
        ),
        pytest.param(
            "present", {"loaded": True, "version": "6.16.6", "dkms": True}, PASS, "keeping", id="present-kept"
        ),
        pytest.param(
            "dkms", {"loaded": True, "version": None, "dkms": False}, PASS, "replaces it", id="inbox-replaced"
        ),
        pytest.param("dkms", {"loaded": False}, PASS, "no amdgpu loaded", id="fresh-node"),
    ],
)
def test_the_existing_driver_is_judged_under_the_driver_source_policy(source, amdgpu, status, words):
    """dkms | inbox | present (R23): present leaves a working driver alone and refuses without one."""
    c = check(judge(facts(amdgpu=amdgpu), driver_source=source), "driver.existing")
    assert c.status == status and words in c.detail


def test_inbox_with_amdgpu_dkms_installed_warns_that_dkms_wins():
    """An installed amdgpu-dkms module loads instead of the inbox one the operator asked for."""
    f = facts(packages={"amdgpu-dkms": "1:6.16.6.30200100-2255209.24.04"})
    assert check(judge(f, driver_source="inbox"), "driver.existing").status == WARN


@pytest.mark.parametrize(
    ("manager", "setting", "runtime"),
    [
        pytest.param("systemd", "auto", True, id="real-server"),
        pytest.param("sshd", "auto", False, id="lab-node"),
        pytest.param("systemd", False, False, id="forced-off"),
        pytest.param("sshd", "true", True, id="forced-on"),
    ],
)
def test_runtime_steps_follow_the_init_system_unless_told(manager, setting, runtime):
    """Lab nodes have no systemd: roles write files but skip update-grub, udevadm and reboots."""
    assert judge(facts(service_manager=manager), apply_runtime=setting).resolved.runtime is runtime


def test_a_failed_check_is_a_check_result_of_the_shared_contract_with_its_reason_code():
    """Issue 20: preflight's checks are CheckResults (the one verdict type): the role's facts and
    doctor's JSON keep id, status, detail, fix and evidence, and add the reason code."""
    from r9700ctl.agent.result import CheckResult
    from r9700ctl.preflight import check_dict

    c = check(judge(facts(), rocm_version="6.3.2"), "rocm.version")
    assert isinstance(c, CheckResult) and c.status == FAIL and c.code == "ROCM_RELEASE_UNSUPPORTED"
    assert check_dict(c) == {
        "id": "rocm.version",
        "status": FAIL,
        "detail": c.detail,
        "fix": c.hint,
        "evidence": c.evidence,
        "code": "ROCM_RELEASE_UNSUPPORTED",
    }


# -- facts gathered on the node (fake roots) ---------------------------------------------------


def write(root: Path, path: str, content: str | bytes) -> None:
    target = root / path.lstrip("/")
    target.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, bytes):
        target.write_bytes(content)
    else:
        target.write_text(content)


def pci_device(root: Path, address: str, vendor: str, device: str, pci_class: str, driver: str = "") -> None:
    base = f"/sys/bus/pci/devices/{address}"
    for name, value in (("vendor", vendor), ("device", device), ("class", pci_class), ("boot_vga", "0")):
        write(root, f"{base}/{name}", value + "\n")
    if driver:
        (root / "sys/bus/pci/drivers" / driver).mkdir(parents=True, exist_ok=True)
        os.symlink(f"../../../bus/pci/drivers/{driver}", root / base.lstrip("/") / "driver")


@pytest.fixture
def fake_root(tmp_path: Path) -> Path:
    write(
        tmp_path,
        "/etc/os-release",
        'PRETTY_NAME="Ubuntu 24.04.2 LTS"\nID=ubuntu\nVERSION_ID="24.04"\nVERSION_CODENAME=noble\n',
    )
    write(tmp_path, "/proc/sys/kernel/osrelease", "6.8.0-31-generic\n")
    (tmp_path / "var").mkdir(exist_ok=True)
    return tmp_path


def test_facts_read_os_release_and_every_display_class_device_from_sysfs(fake_root):
    """Display devices of any vendor are reported; the audio function of the card is not."""
    pci_device(fake_root, "0000:03:00.0", "0x1002", "0x7551", "0x030000", driver="amdgpu")
    pci_device(fake_root, "0000:03:00.1", "0x1002", "0xab40", "0x040300")
    pci_device(fake_root, "0000:04:00.0", "0x1002", "0x7551", "0x038000")
    f = nodefacts.gather({"root": str(fake_root)})
    assert f["os"] == {
        "id": "ubuntu",
        "version_id": "24.04",
        "codename": "noble",
        "pretty_name": "Ubuntu 24.04.2 LTS",
        "key": "ubuntu-24.04",
    }
    assert f["kernel"] == "6.8.0-31-generic"
    assert [(d["address"], d["class"], d["driver"]) for d in f["pci"]["devices"]] == [
        ("0000:03:00.0", "0x030000", "amdgpu"),
        ("0000:04:00.0", "0x038000", ""),
    ]
    assert f["apt"]["headers_package"] == "linux-headers-6.8.0-31-generic"
    assert f["secure_boot"]["state"] == "not_efi"
    assert f["errors"] == []


def test_lock_holders_are_found_through_proc_fd_links(fake_root):
    """fuser-free: a process with /var/lib/dpkg/lock-frontend open is named with its command line."""
    write(fake_root, "/proc/4242/cmdline", "/usr/bin/python3\x00/usr/bin/unattended-upgrade\x00")
    (fake_root / "proc/4242/fd").mkdir(parents=True)
    os.symlink("/var/lib/dpkg/lock-frontend", fake_root / "proc/4242/fd/7")
    os.symlink("/dev/null", fake_root / "proc/4242/fd/0")
    (fake_root / "proc/99/fd").mkdir(parents=True)
    assert nodefacts.find_lock_holders(str(fake_root), set()) == [
        {
            "pid": 4242,
            "command": "/usr/bin/python3 /usr/bin/unattended-upgrade",
            "file": "/var/lib/dpkg/lock-frontend",
        }
    ]
    assert nodefacts.find_lock_holders(str(fake_root), {4242}) == []


def test_waiting_for_the_lock_stops_when_it_is_released(fake_root):
    """Preflight waits up to the timeout, polling, and remembers who it waited for."""
    (fake_root / "proc/55/fd").mkdir(parents=True)
    write(fake_root, "/proc/55/comm", "apt-get\n")
    os.symlink("/var/lib/apt/lists/lock", fake_root / "proc/55/fd/3")
    now = [0.0]

    def sleep(seconds: float) -> None:
        now[0] += seconds
        if now[0] >= 3:
            os.unlink(fake_root / "proc/55/fd/3")

    result = nodefacts.wait_for_locks(str(fake_root), 600, set(), sleep, lambda: now[0])
    assert result["holders"] == []
    assert result["seen_holders"] == [{"pid": 55, "command": "apt-get", "file": "/var/lib/apt/lists/lock"}]
    assert result["waited_s"] == 3.0


class AptGet:
    """A recording stand-in for `apt-get update` (exit status and last line as given)."""

    def __init__(self, rc: int = 0, out: str = "") -> None:
        self.rc, self.out, self.calls = rc, out, 0

    def __call__(self, argv: list[str], timeout: float = 60.0) -> tuple[int, str]:
        assert argv == ["apt-get", "update", "-qq"]
        self.calls += 1
        return self.rc, self.out


def test_apt_lists_preflight_refreshed_recently_are_not_refreshed_again(fake_root):
    """Issue 23: a no-op provision spent most of a node's CPU in apt-get update. A refresh by
    preflight stands for r9700_preflight_apt_cache_valid_time while /etc/apt is unchanged."""
    write(fake_root, "/etc/apt/sources.list.d/rocm.sources", "Types: deb\n")
    (fake_root / "var/lib/apt/lists").mkdir(parents=True)
    base = time.time() + 10  # after the files' ctime (the kernel's: it cannot be set back)
    apt = AptGet()
    first = nodefacts.refresh_apt_lists(str(fake_root), apt, 3600, now=lambda: base)
    assert first == {"ran": True, "ok": True, "detail": ""} and apt.calls == 1
    assert os.stat(fake_root / "var/lib/apt/lists/r9700ctl-refreshed").st_mtime == base
    for path in ("etc/apt/sources.list.d/rocm.sources", "etc/apt/sources.list.d", "etc/apt"):
        os.utime(fake_root / path, (base - 60, base - 60))
    second = nodefacts.refresh_apt_lists(str(fake_root), apt, 3600, now=lambda: base + 600)
    assert apt.calls == 1 and second["ran"] is False and second["ok"] is None and second["age_s"] == 600
    assert second["detail"].startswith("apt's lists were refreshed 600 s ago and /etc/apt has not changed")


def _refreshed_at(fake_root, when: float) -> None:
    """/etc/apt with one source, older than a mark preflight left at `when` (the files' ctime is
    their creation, now: `when` must be later for them to count as older)."""
    write(fake_root, "/etc/apt/sources.list.d/rocm.sources", "Types: deb\n")
    write(fake_root, "/var/lib/apt/lists/r9700ctl-refreshed", "")
    for path in ("etc/apt/sources.list.d/rocm.sources", "etc/apt/sources.list.d", "etc/apt"):
        os.utime(fake_root / path, (when - 60, when - 60))
    os.utime(fake_root / "var/lib/apt/lists/r9700ctl-refreshed", (when, when))


@pytest.mark.parametrize(
    "why",
    ["older than the limit", "a source changed since", "a source removed since", "limit 0", "no mark"],
)
def test_apt_lists_are_refreshed_when_the_mark_is_old_apt_changed_or_there_is_no_mark(fake_root, why):
    base = time.time() + 10
    _refreshed_at(fake_root, base)
    now, limit = base + 600, 3600
    if why == "older than the limit":
        now = base + 3601
    elif why == "a source changed since":
        os.utime(fake_root / "etc/apt/sources.list.d/rocm.sources", (base + 1, base + 1))
    elif why == "a source removed since":
        # only the directory's time moves, to when the file went (after the mark)
        (fake_root / "etc/apt/sources.list.d/rocm.sources").unlink()
        os.utime(fake_root / "etc/apt/sources.list.d", (base + 1, base + 1))
    elif why == "limit 0":
        limit = 0
    else:
        (fake_root / "var/lib/apt/lists/r9700ctl-refreshed").unlink()  # another apt-get update ran
    apt = AptGet(rc=100, out="E: The repository 'x' is not signed.\n")
    result = nodefacts.refresh_apt_lists(str(fake_root), apt, limit, now=lambda: now)
    assert apt.calls == 1
    assert result == {"ran": True, "ok": False, "detail": "E: The repository 'x' is not signed."}
    # a failed refresh leaves the mark as it was (or absent): the next preflight refreshes again
    mark = fake_root / "var/lib/apt/lists/r9700ctl-refreshed"
    assert not mark.exists() if why == "no mark" else mark.stat().st_mtime == base


def test_an_update_that_exits_0_with_a_failed_index_leaves_no_mark(fake_root):
    """apt-get update exits 0 when an index failed to download (a warning only): not a refresh to
    stand on for an hour."""
    (fake_root / "var/lib/apt/lists").mkdir(parents=True)
    apt = AptGet(
        out="W: Failed to fetch http://x/dists/noble/InRelease  Connection timed out\n"
        "W: Some index files failed to download. They have been ignored, or old ones used instead.\n"
    )
    result = nodefacts.refresh_apt_lists(str(fake_root), apt, 3600, now=lambda: time.time() + 10)
    assert result["ran"] is True and result["ok"] is True
    assert not (fake_root / "var/lib/apt/lists/r9700ctl-refreshed").exists()


def test_the_mark_carries_the_time_the_update_started(fake_root):
    """A source written while apt-get update ran is newer than the mark, so the next run refreshes."""
    (fake_root / "var/lib/apt/lists").mkdir(parents=True)
    base = time.time() + 10
    clock = iter([base, base + 300])  # before the update, then after it
    nodefacts.refresh_apt_lists(str(fake_root), AptGet(), 3600, now=lambda: next(clock))
    assert os.stat(fake_root / "var/lib/apt/lists/r9700ctl-refreshed").st_mtime == base


@pytest.mark.parametrize("why", ["a mark in the future", "a source copied with its old time"])
def test_apt_lists_are_refreshed_when_the_clock_or_the_sources_cannot_be_trusted(fake_root, why):
    now = time.time()
    if why == "a mark in the future":  # the clock was set back since: the age says nothing
        _refreshed_at(fake_root, now + 3000)
    else:  # cp -p keeps the mtime, not the ctime: the file is newer than the mark all the same
        _refreshed_at(fake_root, now - 600)
        os.utime(fake_root / "etc/apt/sources.list.d/rocm.sources", (now - 7200, now - 7200))
    apt = AptGet()
    nodefacts.refresh_apt_lists(str(fake_root), apt, 3600, now=lambda: now)
    assert apt.calls == 1


def test_waiting_gives_up_at_the_timeout_with_the_holder_still_named(fake_root):
    (fake_root / "proc/56/fd").mkdir(parents=True)
    write(fake_root, "/proc/56/cmdline", "flock\x00/var/lib/dpkg/lock\x00sleep\x00600\x00")
    os.symlink("/var/lib/dpkg/lock", fake_root / "proc/56/fd/3")
    now = [0.0]
    result = nodefacts.wait_for_locks(
        str(fake_root), 5, set(), lambda s: now.__setitem__(0, now[0] + s), lambda: now[0]
    )
    assert result["waited_s"] == 5.0
    assert result["holders"][0]["command"] == "flock /var/lib/dpkg/lock sleep 600"


@pytest.mark.parametrize(
    ("efivar", "state"),
    [
        pytest.param(b"\x06\x00\x00\x00\x01", "enabled", id="enabled"),
        pytest.param(b"\x06\x00\x00\x00\x00", "disabled", id="disabled"),
    ],
)
def test_secure_boot_state_is_read_from_efivars_without_mokutil(fake_root, efivar, state):
    """The 5th byte of the SecureBoot variable is its value (the first four are attributes)."""
    write(fake_root, "/" + nodefacts.SECURE_BOOT_VAR, efivar)
    assert nodefacts.read_secure_boot(str(fake_root), nodefacts.no_commands)["state"] == state


def mokutil_says(text: str, rc: int):
    """A runner whose mokutil prints `text` (mokutil --test-key's own wording, lcp/mokutil)."""
    calls = []

    def run(argv, timeout):
        calls.append(argv)
        return (rc, text) if argv[0] == "mokutil" else None

    run.calls = calls
    return run


def test_on_ubuntu_dkms_signs_with_the_shim_signed_mok_and_its_enrollment_is_tested(fake_root):
    """dkms's prepare_mok(): Ubuntu without framework settings -> /var/lib/shim-signed/mok/MOK.priv + .der."""
    write(fake_root, "/var/lib/shim-signed/mok/MOK.priv", "key")
    write(fake_root, "/var/lib/shim-signed/mok/MOK.der", b"cert")
    run = mokutil_says("/var/lib/shim-signed/mok/MOK.der is already enrolled\n", 1)
    got = nodefacts.read_dkms_signing(str(fake_root), "ubuntu", "6.8.0-31-generic", run)
    assert (got["key"], got["certificate"], got["key_exists"], got["certificate_exists"]) == (
        "/var/lib/shim-signed/mok/MOK.priv",
        "/var/lib/shim-signed/mok/MOK.der",
        True,
        True,
    )
    assert got["enrolled"] == "enrolled"
    assert run.calls == [["mokutil", "--test-key", "/var/lib/shim-signed/mok/MOK.der"]]


def test_on_debian_dkms_signs_with_its_own_mok_in_var_lib_dkms(fake_root):
    write(fake_root, "/var/lib/dkms/mok.key", "key")
    write(fake_root, "/var/lib/dkms/mok.pub", b"cert")
    run = mokutil_says("/var/lib/dkms/mok.pub is not enrolled\n", 0)
    got = nodefacts.read_dkms_signing(str(fake_root), "debian", "6.1.0-18-amd64", run)
    assert (got["key"], got["certificate"], got["enrolled"]) == (
        "/var/lib/dkms/mok.key",
        "/var/lib/dkms/mok.pub",
        "not_enrolled",
    )


def test_framework_conf_d_settings_override_the_default_key_and_kernelver_is_expanded(fake_root):
    """/etc/dkms/framework.conf and framework.conf.d/*.conf (dkms's read_framework_conf); later wins."""
    write(fake_root, "/etc/dkms/framework.conf", '# mok_signing_key="/x"\nmok_signing_key=/root/a.key\n')
    write(
        fake_root,
        "/etc/dkms/framework.conf.d/20-site.conf",
        'mok_signing_key="/etc/keys/$kernelver.key"\nmok_certificate="/etc/keys/signing.der"\n',
    )
    write(fake_root, "/etc/dkms/framework.conf.d/30-ignored.conf.disabled", "mok_signing_key=/nope\n")
    write(fake_root, "/etc/keys/6.8.0-31-generic.key", "key")
    got = nodefacts.read_dkms_signing(str(fake_root), "ubuntu", "6.8.0-31-generic", nodefacts.no_commands)
    assert (got["key"], got["certificate"]) == ("/etc/keys/6.8.0-31-generic.key", "/etc/keys/signing.der")
    assert got["origin"].startswith("mok_signing_key in /etc/dkms/framework.conf.d/20-site.conf")
    assert (got["key_exists"], got["certificate_exists"], got["enrolled"]) == (True, False, None)


@pytest.mark.parametrize(
    ("said", "rc", "state"),
    [
        ("MOK.der is already in the enrollment request", 1, "pending"),
        ("MOK.der is already in db", 1, "enrolled"),
        ("MOK.der is blocked in dbx", 1, "blocked"),
        ("EFI variables are not supported on this system", 255, "unknown"),
    ],
)
def test_every_mokutil_answer_has_a_state(fake_root, said, rc, state):
    write(fake_root, "/var/lib/shim-signed/mok/MOK.priv", "key")
    write(fake_root, "/var/lib/shim-signed/mok/MOK.der", b"cert")
    got = nodefacts.read_dkms_signing(str(fake_root), "ubuntu", "k", mokutil_says(said, rc))
    assert got["enrolled"] == state


def test_a_loaded_amdgpu_with_a_module_version_is_amds_dkms_build(fake_root):
    """The inbox driver has no /sys/module/amdgpu/version; AMD's DKMS module does."""
    (fake_root / "sys/module/amdgpu").mkdir(parents=True)
    inbox = nodefacts.read_amdgpu(str(fake_root), nodefacts.no_commands)
    assert inbox["loaded"] and not inbox["dkms"]
    write(fake_root, "/sys/module/amdgpu/version", "6.16.6\n")
    assert nodefacts.read_amdgpu(str(fake_root), nodefacts.no_commands) == {
        "loaded": True,
        "version": "6.16.6",
        "modinfo_version": None,
        "modinfo_filename": None,
        "dkms": True,
    }


def test_apt_policy_output_is_parsed_into_installed_and_candidate():
    """Parsed from a recorded `apt-cache policy` output; an unknown package prints nothing."""
    assert nodefacts.parse_apt_policy(APT_POLICY_RECORDED) == {
        "linux-headers-amd64": {"installed": None, "candidate": "6.1.192-3"},
        "ca-certificates": {"installed": "20230311+deb12u1", "candidate": "20250419~deb12u2"},
    }
    result = nodefacts.apt_candidates(
        lambda argv, timeout: (0, APT_POLICY_RECORDED), ["linux-headers-amd64", "nope"]
    )
    assert result["packages"]["nope"] == {"installed": None, "candidate": None}
    assert result["error"] == ""


def test_nodefacts_runs_as_a_child_from_stdin_with_base64_arguments(fake_root):
    """The role and the doctor run `python3 - ARGS` with nodefacts and the package modules it imports
    on stdin (nothing of r9700ctl on the node, nothing written there); the JSON must come back whole.
    The child runs outside the checkout without site-packages: r9700ctl comes only from stdin."""
    from r9700ctl.agentpack import stdin_invocation

    pci_device(fake_root, "0000:03:00.0", "0x1002", "0x7551", "0x030000")
    args = {"root": str(fake_root), "lock_wait_s": 0}
    command, script = stdin_invocation("r9700ctl.agent.nodefacts", args, python=f"{sys.executable} -I -S")
    out = subprocess.run(
        command, shell=True, input=script, capture_output=True, timeout=60, check=False, cwd=fake_root
    )
    assert out.returncode == 0, out.stderr
    f = json.loads(out.stdout)
    assert f["schema"] == nodefacts.SCHEMA
    assert f["pci"]["devices"][0]["vendor_name"] == "AMD"
    assert f["os"]["key"] == "ubuntu-24.04"
    verdict = preflight.judge(f, {"r9700_driver_source": "inbox", "r9700_min_free_gb": 0}, MANIFEST)
    assert verdict.resolved.gfx_targets == ["gfx1201"]
    assert verdict.resolved.suite == "noble"


def test_bad_arguments_give_json_with_the_error_not_a_traceback(tmp_path):
    from r9700ctl.agentpack import stdin_invocation

    _, script = stdin_invocation("r9700ctl.agent.nodefacts", {})
    out = subprocess.run(
        [sys.executable, "-I", "-", "not-base64!"],
        input=script,
        capture_output=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert out.returncode == 0
    assert json.loads(out.stdout)["errors"][0].startswith("bad arguments:")


def test_verdict_serialises_for_the_ansible_fact_and_the_doctors_json():
    v = judge(copy.deepcopy(facts()))
    data = json.loads(json.dumps(v.to_dict()))
    assert data["ok"] is True
    assert data["resolved"]["rocm_version"] == "7.1.1"  # 4x R9700: auto skips 7.2.x (RCCL hang)
    assert data["resolved"]["known_issues"][0]["id"] == "hsa-ipc-mode-legacy"
    assert {c["id"] for c in data["checks"]} >= {
        "os.release",
        "gpu.detected",
        "rocm.version",
        "apt.lock",
        "secureboot",
    }


def test_a_shared_device_id_is_named_by_its_revision():
    """1002:7550 rev c3 is the RX 9070 (libdrm amdgpu.ids), not "RX 9070 XT / 9070 / 9070 GRE"."""
    card = {"address": "0000:03:00.0", "vendor": "0x1002", "device": "0x7550", "class": "0x030000"}
    named = judge(facts(gpus=[{**card, "revision": "0xc3"}]))
    assert check(named, "gpu.detected").detail.startswith("1x AMD Radeon RX 9070 (gfx1201)")
    unnamed = judge(facts(gpus=[card]))
    assert "AMD Radeon RX 9070 XT / 9070 / 9070 GRE" in check(unnamed, "gpu.detected").detail


# -- Power caps and PSU budgets (r9700_power's interface, refused before anything changes) --------

FOUR = ["0000:03:00.0", "0000:04:00.0", "0000:05:00.0", "0000:06:00.0"]


def test_no_psu_map_means_no_budget_is_claimed_checked():
    assert check(judge(facts()), "power.psu").status == SKIP


def test_an_overcommitted_psu_refuses_the_node_and_says_by_how_much():
    """4 R9700 at a 300 W cap + 550 W of host on one 1600 W PSU: over by 150 W."""
    verdict = judge(facts(), power_cap_w=300, psus={"psu1": {"watts": 1600, "gpus": FOUR, "host_w": 550}})

    psu = check(verdict, "power.psu.psu1")
    assert psu.status == FAIL
    assert "over its rating by 150 W" in psu.detail
    assert not verdict.ok
    assert verdict.refusal("node1").startswith("node1: preflight refused, nothing changed: PSU psu1 (1600 W)")


def test_uncapped_cards_are_budgeted_at_their_board_power_from_the_manifest():
    """No r9700_power_cap_w: an R9700 draws up to its 300 W default cap (manifest board_power_w)."""
    verdict = judge(facts(), psus={"psu1": {"watts": 1600, "gpus": FOUR, "host_w": 300}})

    psu = check(verdict, "power.psu.psu1")
    assert psu.status == WARN  # 1500 W: inside the 10% margin of 1600 W
    assert psu.evidence["budget"]["draw_w"] == dict.fromkeys(FOUR, 300.0)


def test_two_psus_each_judged_on_their_own_gpus_and_a_per_gpu_cap_counts():
    verdict = judge(
        facts(),
        power_cap_w=250,
        power_cap_w_by_gpu={"0000:03:00.0": 200},
        psus={
            "psu1": {"watts": 1000, "gpus": FOUR[:2], "host_w": 460},
            "psu2": {"watts": 850, "gpus": FOUR[2:]},
        },
    )

    # psu1: 200 (its own cap) + 250 + 460 = 910 W, above 1000 x 0.9 = 900: inside the margin.
    assert check(verdict, "power.psu.psu1").status == WARN
    assert check(verdict, "power.psu.psu2").status == PASS  # 2 x 250 = 500 W on 850 W
    assert verdict.ok


def test_a_psu_feeding_a_gpu_the_node_does_not_have_is_refused():
    verdict = judge(facts(gpus=r9700(1)), psus={"psu1": {"watts": 1600, "gpus": ["0000:43:00.0"]}})

    psu = check(verdict, "power.psu.psu1")
    assert psu.status == FAIL
    assert "0000:43:00.0, not a GPU of this node (GPUs: 0000:03:00.0)" in psu.detail


def test_a_gpu_no_psu_feeds_is_a_warning():
    verdict = judge(facts(), psus={"psu1": {"watts": 1600, "gpus": FOUR[:3]}})

    assert check(verdict, "power.psu.unassigned").status == WARN


def test_a_malformed_power_setting_is_a_settings_failure():
    verdict = judge(facts(), power_cap_w="lots", psu_margin=1.5)

    details = [c.detail for c in verdict.failures]
    assert any("r9700_power_cap_w must be whole watts" in d for d in details)
    assert any("r9700_psu_margin must be a fraction" in d for d in details)


def test_an_environment_list_that_re_creates_a_known_issue_is_a_warning_naming_the_knob():
    """HSA_ENABLE_IPC_MODE_LEGACY=1 (baked into vLLM's ROCm images) copied into r9700_env_extra
    breaks hipIpcGetMemHandle on R9700 (ROCm/rocm-systems#2209): doctor and provision say so, not PASS."""
    v = judge(facts("ubuntu-24.04"), env_extra={"HSA_ENABLE_IPC_MODE_LEGACY": "1"})
    c = check(v, "known_issue.hsa-ipc-mode-legacy")
    assert c.status == WARN
    assert c.detail == (
        "the environment list sets HSA_ENABLE_IPC_MODE_LEGACY=1 (r9700_env_extra), which re-creates known "
        "issue hsa-ipc-mode-legacy: HSA_ENABLE_IPC_MODE_LEGACY=1 makes hipIpcGetMemHandle fail on R9700, "
        "breaking RCCL's P2P path"
    )
    assert c.hint == (
        "remove it from r9700_env_extra (the default workaround is HSA_ENABLE_IPC_MODE_LEGACY=0); "
        "see https://github.com/ROCm/rocm-systems/issues/2209"
    )
    assert v.ok  # a warning: provision goes on, the summary carries it
    default = judge(facts("ubuntu-24.04"))
    assert not any(c.id == "known_issue.hsa-ipc-mode-legacy" for c in default.checks)


def test_preflight_takes_types_and_choices_from_the_roles_argument_spec(monkeypatch):
    """No copy of the spec in preflight: a choice the spec gains is accepted, one it loses refused."""
    from r9700ctl import variables

    specs = variables.role_specs()
    widened = {**specs, "r9700_driver_source": {**specs["r9700_driver_source"], "choices": ["dkms", "rpm"]}}
    monkeypatch.setattr(variables, "role_specs", lambda roles_dir=None: widened)
    assert [c for c in judge(facts(), driver_source="rpm").checks if c.id == "settings"] == []
    c = check(judge(facts(), driver_source="inbox"), "settings")
    assert (c.status, c.detail) == (FAIL, "r9700_driver_source='inbox' is not one of dkms, rpm")
    fix = "set r9700_driver_source to one of dkms, rpm in the inventory: "
    assert c.hint == fix + "where the amdgpu kernel driver comes from"


@pytest.mark.parametrize(
    "name, value, detail",
    [
        ("allow_unsupported", "maybe", "r9700_allow_unsupported='maybe' is not true or false"),
        ("min_free_gb", -1, "r9700_min_free_gb=-1 is not a number, 0 or more"),
        ("apt_lock_timeout", "soon", "r9700_apt_lock_timeout='soon' is not a number, 0 or more"),
        (
            "preflight_apt_cache_valid_time",
            -60,
            "r9700_preflight_apt_cache_valid_time=-60 is not a whole number, 0 or more",
        ),
        ("apply_runtime", "yes please", "r9700_apply_runtime='yes please' is not one of auto, true, false"),
    ],
)
def test_a_bad_preflight_variable_is_one_settings_failure_and_counts_as_unset(name, value, detail):
    v = judge(facts(), **{name: value})
    settings = [c for c in v.checks if c.id == "settings"]
    assert [(c.status, c.detail) for c in settings] == [(FAIL, detail)]
    assert not v.ok and v.refusal("node1").startswith(
        f"node1: preflight refused, nothing changed: {detail} (fix: set "
    )


def test_preflight_variables_from_an_ini_inventory_are_converted_as_ansible_converts_them():
    v = judge(
        facts(),
        expected_gpus="4",
        min_free_gb="1",
        allow_unsupported="yes",
        known_issue_workarounds_skip="all",
    )
    assert [c for c in v.checks if c.id == "settings"] == []
    assert check(v, "gpu.count").status == PASS
    assert "need 1 GB" in check(v, "disk.root").detail


def test_preflight_is_a_package_of_families_whose_checks_register_in_dependency_order():
    """Issue 20 item 8: preflight.py (917+ lines) became one module per family with a registry, as
    the agent's checks: every family registers, and a family runs after those whose results it reads
    (GPUs before the release, the release before the kernel line and the environment list)."""
    from r9700ctl.preflight import registry

    order = [c.name for c in registry.load()]
    assert order == [
        "facts",
        "os",
        "gpus",
        "rocm",
        "kernel.line",
        "apt.lock",
        "kernel.packages",
        "disk",
        "secureboot",
        "driver",
        "power",
        "runtime",
        "cluster",
        "environment",
        "known_issues",
    ]
    modules = {c.fn.__module__.rsplit(".", 1)[-1] for c in registry.load()}
    assert modules == set(registry.FAMILIES)


@pytest.mark.parametrize(
    "argv, expected",
    # key=value reaches Ansible as a string, as ansible-playbook -e passes it (the role's spec converts it)
    [([], None), (["--full"], 0), (["--full", "-e", "r9700_preflight_apt_cache_valid_time=60"], "60")],
)
def test_provision_full_asks_preflight_to_refresh_apt_and_a_users_value_wins(
    tmp_path, monkeypatch, argv, expected
):
    """`provision --full` always refreshes apt's lists (the knob 0); the default run leaves the role's
    default; an explicit -e outranks --full."""
    from datetime import datetime, timezone

    from click.testing import CliRunner

    from r9700ctl import ansible_run
    from r9700ctl.cli import cli

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    inventory = tmp_path / "inventory.ini"
    inventory.write_text("[r9700_nodes]\nnode1 ansible_host=192.0.2.11\n", encoding="utf-8")
    seen = []
    now = datetime.now(timezone.utc)
    host = ansible_run.HostResult(host="node1", ok=3, started=True)
    done = ansible_run.RunResult("successful", 0, {"node1": host}, tmp_path, tmp_path, now, now, True)
    monkeypatch.setattr(
        ansible_run, "run_playbook", lambda request, on_progress=None: seen.append(request) or done
    )
    result = CliRunner().invoke(cli, ["provision", str(inventory), *argv])
    assert result.exit_code == 0, result.output
    assert seen[0].extra_vars.get("r9700_preflight_apt_cache_valid_time") == expected
