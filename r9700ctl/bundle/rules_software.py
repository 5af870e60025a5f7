"""Rules about the software: versions and ROCm support for the GPUs, the runtime and driver, DKMS for
the running kernel, HSA_OVERRIDE_GFX_VERSION, render/video membership and RCCL start-up warnings.
(amdgpu's kernel-log trouble and the known issues are rules_known.py: they come from the manifest.)"""

from __future__ import annotations

import re
from typing import Any

from r9700ctl.bundle.files import (
    Diagnosis,
    evidence_at,
    evidence_in,
    find_line,
    p2p_switched_off,
    read_env,
    read_id,
)
from r9700ctl.bundle.model import AMD, FAIL, INFO, RCCL_LOG, WARN, Evidence

# ---------------------------------------------------------------- versions and ROCm support


def rule_versions(d: Diagnosis) -> None:
    """Kernel, OS, driver and ROCm versions, and whether the manifest's ROCm supports the GPUs."""
    kernel = find_line(d.bundle.lines("uname.txt"), r"^Linux \S+ \S+")
    if kernel:
        d.versions["kernel"] = kernel[1].split()[2]
    os_info = _os_release(d)
    if os_info is not None:
        d.versions["os"] = os_info.pretty_name or os_info.key
    driver = _driver_version(d)
    if driver:
        d.versions["amdgpu"] = driver[0]
    rocm = rocm_version(d)
    if rocm:
        d.versions["rocm"] = rocm[0]
    dkms_package = installed_packages(d).get("amdgpu-dkms")
    if dkms_package:
        d.versions["amdgpu-dkms"] = dkms_package[0]
    runtime = getattr(_rocminfo(d), "runtime_version", None)
    if runtime:
        d.versions["hsa_runtime"] = runtime
    _nvidia_versions(d)

    if not d.amd_gpus:
        return
    if rocm is None:
        d.cannot_judge(
            "whether the installed ROCm supports the GPUs",
            "rocm-version.txt",
            "packages.txt",
            "amd-smi.txt",
            "amd-smi-static.json",
            "env.txt",
        )
        return
    if not d.gfx_targets:
        d.cannot_judge(
            "whether ROCm supports the GPUs (no file names their gfx target)",
            "rocminfo.txt",
            "amd-smi-static.json",
        )
        return
    _judge_rocm_support(d, rocm[0], rocm[1])
    if os_info is not None:
        _judge_os_support(d, rocm[0], os_info)


def _judge_rocm_support(d: Diagnosis, version: str, evidence: Evidence) -> None:
    from r9700ctl.manifest import version_key

    release = _release_for(d, version)
    for target in sorted(d.gfx_targets):
        supporting = d.manifest.releases_supporting({target})
        if release is not None and release.supports_gfx(target):
            continue
        if release is None and not supporting:
            d.add("rocm.target_unknown", INFO, f"no ROCm release in r9700ctl's manifest lists {target}")
            continue
        if release is None:  # an unknown patch release is not judged as its neighbour
            newer = version_key(version) >= version_key(supporting[0])
            d.add(
                "rocm.not_in_manifest",
                INFO if newer else WARN,
                f"ROCm {version} is not in the manifest, so whether it supports {target} is not judged; "
                f"r9700ctl knows {target} in {', '.join(supporting)}",
                fix="" if newer else f"install one of {', '.join(supporting)} (r9700_rocm_version: auto)",
                evidence=[evidence],
            )
            continue
        newest = supporting[-1] if supporting else None
        d.add(
            "rocm.unsupported_gpu",
            FAIL,
            f"ROCm {version} does not support {target} ({_names_for(d, target)}); "
            f"releases that do: {', '.join(supporting) or 'none known'}",
            fix=f"install ROCm {newest} (r9700ctl provision with r9700_rocm_version: auto picks the newest "
            "that supports the GPUs and the OS)"
            if newest
            else f"use hardware that ROCm supports; no release r9700ctl knows lists {target}",
            evidence=[evidence],
        )


def _release_for(d: Diagnosis, version: str) -> Any:
    """The manifest release of exactly this version (6.4.0 is not 6.4.1: 6.4.0 has no gfx1201), else None."""
    return d.manifest.releases.get(_release_number(version))


def _release_number(version: str) -> str:
    """The release number from the forms tools print (6.4.1, 6.4.1-83, 6.4.1.60401-83~24.04): 6.4.1."""
    match = re.match(r"(\d+\.\d+\.\d+)", version.strip())
    return match.group(1) if match else version.strip()


def _names_for(d: Diagnosis, target: str) -> str:
    return ", ".join(sorted({g.name or g.pci_id or "?" for g in d.amd_gpus if g.gfx == target}))


def _os_release(d: Diagnosis) -> Any:
    from r9700ctl.agent.parsers import osrelease

    if not d.bundle.has("os-release"):
        return None
    parsed = d.bundle.parsed("os-release", osrelease.parse)
    return parsed if parsed is not None and parsed.key else None


def _judge_os_support(d: Diagnosis, version: str, os_info: Any) -> None:
    release = _release_for(d, version)
    if release is None:
        return
    if os_info.key in release.os:
        _judge_os_listed(d, release, os_info)
        return
    d.add(
        "os.unsupported",
        WARN,
        f"{os_info.pretty_name or os_info.key} is not among the systems ROCm {release.version} supports "
        f"({', '.join(release.os) or 'none listed'})",
        fix="use a supported OS release, or expect no help from AMD support",
        evidence=[evidence_in(d.bundle, "os-release", r"^VERSION_ID=")],
    )


def _judge_os_listed(d: Diagnosis, release: Any, os_info: Any) -> None:
    """An OS the release installs on but AMD does not list for these GPUs (Debian 12 with an R9700:
    Instinct only in every matrix) is best effort, as preflight says before a provision."""
    unlisted = sorted(
        t for t in d.gfx_targets if release.supports_gfx(t) and not release.lists_target_on(t, os_info.key)
    )
    if not unlisted:
        return
    systems = sorted({s for t in unlisted for s in (release.listed_systems(t) or [])})
    note = str((d.manifest.os_release(os_info.key) or {}).get("radeon_note") or "").strip()
    d.add(
        "rocm.os_listed",
        WARN,
        f"AMD lists {', '.join(unlisted)} for ROCm {release.version} only on {', '.join(systems)}; "
        f"{os_info.pretty_name or os_info.key} is best effort" + (f". {note}" if note else ""),
        fix=f"for vendor support use {' or '.join(systems)}",
        evidence=[evidence_in(d.bundle, "os-release", r"^VERSION_ID=")],
    )


def _rocminfo(d: Diagnosis) -> Any:
    from r9700ctl.agent.parsers import rocminfo

    return d.bundle.parsed("rocminfo.txt", rocminfo.parse) if d.bundle.has("rocminfo.txt") else None


def _amdsmi(d: Diagnosis, name: str) -> Any:
    from r9700ctl.agent.parsers import amdsmi

    return d.bundle.parsed(name, amdsmi.parse) if d.bundle.has(name) else None


def installed_packages(d: Diagnosis) -> dict[str, tuple[str, int]]:
    """packages.txt (dpkg-query -W, tab-separated package, version, status): name -> (version, line)
    of the packages dpkg has installed ("ii")."""
    found: dict[str, tuple[str, int]] = {}
    for number, line in enumerate(d.bundle.lines("packages.txt"), start=1):
        parts = line.split("\t")
        if len(parts) >= 3 and parts[2].startswith("ii") and parts[1]:
            found[parts[0]] = (parts[1], number)
    return found


def rocm_version(d: Diagnosis) -> tuple[str, Evidence] | None:
    """The installed ROCm release: rocm-core's /opt/rocm/.info/version or package first, tools after."""
    first = find_line(d.bundle.lines("rocm-version.txt"), r"^\d+\.\d+\.\d+")
    if first:
        return _release_number(first[1]), Evidence("rocm-version.txt", first[0], first[1].strip())
    core = installed_packages(d).get("rocm-core")
    if core:
        return _release_number(core[0]), Evidence("packages.txt", core[1], f"rocm-core {core[0]}")
    for name in ("amd-smi.txt", "amd-smi-static.json", "amd-smi-list.json", "amd-smi-metric.json"):
        version = getattr(_amdsmi(d, name), "rocm_version", None)
        if version:
            said = evidence_in(d.bundle, name, r"(?i)rocm.?version\W+" + re.escape(version))
            return version, said if said.line else evidence_in(d.bundle, name, re.escape(version))
    env = read_env(d.bundle)
    if "ROCM_VERSION" in env:
        value, line = env["ROCM_VERSION"]
        return value, Evidence("env.txt", line, f"ROCM_VERSION={value}")
    return None


def _driver_version(d: Diagnosis) -> tuple[str, Evidence] | None:
    for name in ("amd-smi.txt", "amd-smi-static.json"):
        version = getattr(_amdsmi(d, name), "amdgpu_version", None)
        if version:
            return version, evidence_in(d.bundle, name, re.escape(version))
    version = getattr(_rocminfo(d), "rock_module_version", None)
    if version:
        return version, evidence_in(d.bundle, "rocminfo.txt", r"ROCk module")
    return None


def _nvidia_versions(d: Diagnosis) -> None:
    if not d.bundle.has("nvidia-smi.xml"):
        return
    from r9700ctl.agent.parsers import nvidia_smi

    report = d.bundle.parsed("nvidia-smi.xml", nvidia_smi.parse)
    if getattr(report, "driver_version", None):
        d.versions["nvidia_driver"] = report.driver_version
    if getattr(report, "cuda_version", None):
        d.versions["cuda"] = report.cuda_version


# ---------------------------------------------------------------- runtime and driver


def rule_rocm_runtime(d: Diagnosis) -> None:
    """rocminfo failing means ROCm cannot work: the kernel driver is not loaded, or /dev/kfd is closed."""
    if not d.amd_relevant:
        return
    info = _rocminfo(d)
    if info is None:
        d.cannot_judge("whether the ROCm runtime sees the GPUs", "rocminfo.txt")
        return
    lines = d.bundle.lines("rocminfo.txt")
    if info.rock_module_loaded is False:
        hit = find_line(lines, r"ROCk module.*NOT loaded")
        d.add(
            "rocm.kfd_not_loaded",
            FAIL,
            "the ROCm kernel driver (amdgpu's KFD, 'ROCk module') is not loaded",
            fix="modprobe amdgpu, and read dmesg for why it did not load; reinstall amdgpu-dkms for the "
            "running kernel",
            evidence=[evidence_at(d.bundle, "rocminfo.txt", hit[0] if hit else None)],
        )
    for pattern, detail, fix in (
        (
            r"Unable to open /dev/kfd|/dev/kfd.*[Pp]ermission denied",
            "rocminfo could not open /dev/kfd: the user lacks access to the GPUs",
            "add the user to the render and video groups (usermod -aG render,video USER) and log in again",
        ),
        (
            r"hsa api call failure",
            "the HSA runtime failed to start (rocminfo: hsa api call failure)",
            "check that amdgpu is loaded and /dev/kfd exists; dmesg says why the driver is not ready",
        ),
    ):
        hit = find_line(lines, pattern)
        if hit:
            d.add(
                "rocm.runtime_error",
                FAIL,
                detail,
                fix=fix,
                evidence=[evidence_at(d.bundle, "rocminfo.txt", hit[0])],
            )
            return


def rule_driver_bound(d: Diagnosis) -> None:
    """amdgpu must be loaded (lsmod) and bound to every AMD GPU (lspci 'Kernel driver in use')."""
    if not d.amd_gpus:
        return
    lines = d.bundle.lines("lsmod.txt")
    if lines and find_line(lines, r"^Module\s") and not find_line(lines, r"^amdgpu\s"):
        d.add(
            "driver.not_loaded",
            FAIL,
            "the amdgpu module is not loaded (no amdgpu line in lsmod)",
            fix="modprobe amdgpu; if it fails, dmesg says why (missing firmware, a blacklist, a DKMS module "
            "not built for this kernel)",
            evidence=[Evidence("lsmod.txt", None, "no line starting with 'amdgpu'")],
        )
    if not d.bundle.has("lspci.txt"):
        return
    from r9700ctl.agent.parsers import lspci

    report = d.bundle.parsed("lspci.txt", lspci.parse)
    for function in getattr(report, "functions", None) or []:
        if function.is_display and function.vendor_id == AMD and function.driver not in (None, "amdgpu"):
            d.add(
                "driver.not_bound",
                FAIL,
                f"{function.bdf} ({function.pci_id}) is driven by {function.driver}, not amdgpu",
                fix="release it from that driver (a vfio-pci binding, a blacklist) or install amdgpu-dkms",
                evidence=[
                    evidence_in(
                        d.bundle,
                        "lspci.txt",
                        r"Kernel driver in use",
                        function.first_line,
                        function.last_line,
                    )
                ],
            )


# ---------------------------------------------------------------- HSA_OVERRIDE_GFX_VERSION


def rule_hsa_override(d: Diagnosis) -> None:
    """An override loads code built for another target; across families it crashes the driver
    (ROCm/rocm-systems#3531) and AMD now rejects cross-major overrides (PR #5686)."""
    if not d.amd_relevant:
        return
    if not d.bundle.has("env.txt"):
        d.cannot_judge("HSA_OVERRIDE_GFX_VERSION", "env.txt")
        return
    env = read_env(d.bundle)
    if "HSA_OVERRIDE_GFX_VERSION" not in env:
        return
    value, line = env["HSA_OVERRIDE_GFX_VERSION"]
    evidence = [Evidence("env.txt", line, f"HSA_OVERRIDE_GFX_VERSION={value}")]
    named = d.manifest.gfx_for_hsa_version(value)
    named_text = (
        f"{named} ({d.manifest.gfx_family(named)})" if named else f"{value}, a target r9700ctl does not know"
    )
    if not d.gfx_targets:
        d.add(
            "env.hsa_override",
            WARN,
            f"HSA_OVERRIDE_GFX_VERSION={value} is set: ROCm treats every GPU as {named_text}",
            fix="remove it unless the GPUs need it; the bundle names no gfx target to check it against",
            evidence=evidence,
        )
        return
    for target in sorted(d.gfx_targets):
        own = d.manifest.hsa_version(target)
        family = d.manifest.gfx_family(target)
        names = _names_for(d, target)
        if own == value:
            d.add(
                "env.hsa_override",
                WARN,
                f"HSA_OVERRIDE_GFX_VERSION={value} is the GPUs' own target {target}: it changes nothing for "
                "them but mislabels any other GPU in the machine (an iGPU)",
                fix="remove it (from /etc/environment, /etc/profile.d, the job's environment): ROCm "
                "supports "
                f"{target} natively",
                evidence=evidence,
            )
        elif named is None or d.manifest.gfx_family(named) != family:
            d.add(
                "env.hsa_override",
                FAIL,
                f"HSA_OVERRIDE_GFX_VERSION={value} makes ROCm run {named_text} code on {target} "
                f"({family or 'unknown family'}: {names}); cross-family overrides crash the driver "
                "(ROCm/rocm-systems#3531) and AMD now rejects them",
                fix="remove HSA_OVERRIDE_GFX_VERSION (from /etc/environment, /etc/profile.d, the job's "
                f"environment); {target} needs none" + (f" (its own value would be {own})" if own else ""),
                evidence=evidence,
            )
        else:
            d.add(
                "env.hsa_override",
                WARN,
                f"HSA_OVERRIDE_GFX_VERSION={value} runs {named_text} code on {target} ({names}): same "
                "family, "
                "it may run, with kernels tuned for another chip",
                fix=f"remove it where ROCm supports {target} natively (releases: "
                f"{', '.join(d.manifest.releases_supporting({target})) or 'none known'})",
                evidence=evidence,
            )


# ---------------------------------------------------------------- DKMS


def rule_dkms(d: Diagnosis) -> None:
    """amdgpu DKMS must be installed for the running kernel; broken entries and dkms warnings are named."""
    if not d.amd_relevant:
        return
    if not d.bundle.has("dkms-status.txt"):
        d.cannot_judge("whether the amdgpu DKMS module is built for the running kernel", "dkms-status.txt")
        return
    from r9700ctl.agent.parsers import dkms

    report = d.bundle.parsed("dkms-status.txt", dkms.parse)
    if report is None:
        return

    def at(number: int | None) -> Evidence:
        return evidence_at(d.bundle, "dkms-status.txt", number)

    entries = report.for_module("amdgpu")
    for entry in entries:
        if entry.state == "broken":
            d.add(
                "dkms.broken",
                FAIL,
                f"the DKMS entry amdgpu/{entry.version} is broken (its source or build tree is gone)",
                fix=f"dkms remove amdgpu/{entry.version} --all, then reinstall amdgpu-dkms",
                evidence=[at(entry.line)],
            )
        elif entry.diff_built_installed or entry.missing_built_modules:
            d.add(
                "dkms.module_differs",
                WARN,
                f"dkms warns about amdgpu/{entry.version} for {entry.kernel}: {'; '.join(entry.notes)}",
                fix=f"dkms install --force amdgpu/{entry.version} -k {entry.kernel}, then reboot",
                evidence=[at(entry.line)],
            )
    for number, text in report.other_lines:
        if re.search(r"error|broken|bad return status", text, re.IGNORECASE):
            d.add(
                "dkms.error",
                FAIL,
                f"dkms status reports an error: {text.strip()[:200]}",
                fix="remove the entry it names (dkms remove MODULE/VERSION --all), then reinstall its "
                "package",
                evidence=[at(number)],
            )
    if not entries:
        if report.entries or not report.error:
            # A supported choice (r9700_driver_source: inbox), not a fault: said, not warned about.
            d.add(
                "dkms.no_amdgpu",
                INFO,
                "no amdgpu DKMS module: the kernel's own (inbox) amdgpu driver is in use, a supported choice "
                "(r9700_driver_source: inbox); AMD's amdgpu-dkms carries newer fixes for new cards",
                fix="nothing to do unless the driver misbehaves; then install amdgpu-dkms from AMD's "
                "repository for the ROCm release (r9700ctl provision with r9700_driver_source: dkms)",
                evidence=[Evidence("dkms-status.txt", None, "no amdgpu entry")],
            )
        return
    kernel = d.versions.get("kernel")
    if kernel is None:
        d.cannot_judge("whether the amdgpu DKMS module matches the running kernel", "uname.txt")
        return
    for_kernel = report.for_kernel(kernel)
    if not for_kernel:
        built_for = ", ".join(sorted({e.kernel for e in entries if e.kernel})) or "no kernel yet"
        d.add(
            "dkms.not_for_running_kernel",
            FAIL,
            f"the amdgpu DKMS module is built for {built_for}, not for the running kernel {kernel}",
            fix=f"apt-get install linux-headers-{kernel}, then dkms autoinstall -k {kernel} (or reinstall "
            "amdgpu-dkms), and reboot",
            evidence=[at(e.line) for e in entries[:3]]
            + [evidence_in(d.bundle, "uname.txt", re.escape(kernel))],
        )
        return
    for entry in for_kernel:
        if entry.state not in ("installed", "installed-weak", "broken"):
            d.add(
                "dkms.not_installed",
                FAIL,
                f"amdgpu/{entry.version} for the running kernel {kernel} is '{entry.state}', not installed",
                fix=f"dkms install amdgpu/{entry.version} -k {kernel}; a failed build leaves its reason in "
                "make.log under /var/lib/dkms/amdgpu",
                evidence=[at(entry.line)],
            )


# ---------------------------------------------------------------- render and video groups


def rule_groups(d: Diagnosis) -> None:
    """/dev/kfd and /dev/dri/renderD* belong to the render group; AMD's guide adds video too."""
    if not d.amd_relevant:
        return
    if not d.bundle.has("id.txt"):
        d.cannot_judge("the user's render/video group membership", "id.txt")
        return
    who = read_id(d.bundle)
    if who is None:
        d.bundle.mark_unreadable("id.txt", "could not read id.txt: no 'uid=' line (the output of `id`)")
        return
    if who.uid == 0:
        return  # root opens the device files whatever its groups
    evidence = [Evidence("id.txt", who.line, who.text)]
    if "render" not in who.groups:
        d.add(
            "access.not_in_render",
            FAIL,
            f"user {who.user} is not in the render group: /dev/kfd and /dev/dri/renderD* stay closed to it "
            "and "
            "ROCm finds no GPU",
            fix=f"usermod -aG render,video {who.user}, then log in again (r9700ctl provision does this for "
            "r9700_users)",
            evidence=evidence,
        )
    if "video" not in who.groups:
        d.add(
            "access.not_in_video",
            WARN,
            f"user {who.user} is not in the video group, which AMD's install guide asks for too",
            fix=f"usermod -aG video {who.user}, then log in again",
            evidence=evidence,
        )


# ---------------------------------------------------------------- RCCL start-up warnings

RCCL_KINDS: dict[str, tuple[str, str]] = {
    "missing_iommu_pt": (
        'RCCL warned at start-up that "iommu=pt" is missing from the kernel command line',
        "add iommu=pt to the kernel command line (r9700ctl provision does) and reboot",
    ),
    "missing_amd_iommu": (
        'RCCL warned at start-up that "amd_iommu=on" is missing from the kernel command line',
        "add amd_iommu=on iommu=pt to the kernel command line and reboot",
    ),
    # HSA_FORCE_FINE_GRAIN_PCIE=1 makes ROCr expose each GPU's VRAM as a fine-grained pool over PCIe
    # ("Expose VRAM as uncached/fine grain over PCIe (if enabled)", ROCR-Runtime
    # src/core/runtime/amd_gpu_agent.cpp; flag.h reads the variable); it is no P2P on/off switch.
    # RCCL warns whenever it is unset (ROCm/rccl src/init.cc; the lines of ROCm/rccl#1026), also
    # where P2P is off on purpose: rule_rccl makes that case a note.
    "missing_fine_grain_pcie": (
        "RCCL warned at start-up that HSA_FORCE_FINE_GRAIN_PCIE=1 is not set (the variable makes ROCr "
        "expose each GPU's VRAM as a fine-grained pool over PCIe; RCCL says low performance, instability "
        "or a hang may follow)",
        "where the GPUs are meant to talk peer to peer (r9700_p2p on), set HSA_FORCE_FINE_GRAIN_PCIE=1 in "
        "the job's environment, as r9700ctl's environment list does with P2P on; it needs large BAR",
    ),
    "p2p_disabled": (
        "RCCL ran with peer-to-peer disabled (NCCL_P2P_DISABLE=1): card-to-card traffic goes through host "
        "memory",
        "expected as the workaround on several R9700s (ROCm/rccl-tests#162); otherwise unset "
        "NCCL_P2P_DISABLE",
    ),
    "ipc_failure": (
        "RCCL could not map a peer GPU's memory (hipIpc failure)",
        "check large BAR, ACS and iommu=pt; run with NCCL_P2P_DISABLE=1 until fixed",
    ),
    "warn": ("RCCL printed warnings", "read the evidence lines; NCCL_DEBUG=INFO gives their context"),
}


def rule_rccl(d: Diagnosis) -> None:
    if not d.bundle.has(RCCL_LOG):
        if len(d.amd_gpus) > 1:
            d.cannot_judge(
                "RCCL start-up warnings (save the output of a job run with NCCL_DEBUG=WARN as rccl.log)",
                RCCL_LOG,
            )
        return
    from r9700ctl.agent.parsers import rccl

    report = d.bundle.parsed(RCCL_LOG, rccl.parse)
    if report is None:
        return
    p2p_off = p2p_switched_off(d)
    for kind, (meaning, fix) in RCCL_KINDS.items():
        found = report.of_kind(kind)
        if not found:
            continue
        evidence = [Evidence(RCCL_LOG, f.line, f.text.strip()) for f in found]
        if kind == "missing_fine_grain_pcie" and p2p_off is not None:
            # The node's P2P is off (r9700_p2p decided so, or the user did): the warning is expected,
            # and advice to set the variable would contradict that decision.
            d.add(
                f"rccl.{kind}",
                INFO,
                f"{meaning} ({len(found)} line(s)); expected: P2P is off on this node "
                f"({p2p_off[0]}=1 in env.txt)",
                fix="nothing to do while P2P stays off; /etc/r9700ctl/node.json (p2p) says why it is off",
                evidence=[*evidence, p2p_off[1]],
            )
            continue
        d.add(f"rccl.{kind}", WARN, f"{meaning} ({len(found)} line(s))", fix=fix, evidence=evidence)
