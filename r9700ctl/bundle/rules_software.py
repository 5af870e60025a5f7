"""Rules about the software: versions and ROCm support for the GPUs, the runtime and driver, DKMS for
the running kernel, HSA_OVERRIDE_GFX_VERSION, render/video membership and RCCL start-up warnings.
(amdgpu's kernel-log trouble and the known issues are rules_known.py: they come from the manifest.)"""

from __future__ import annotations

import re
from typing import Any

from r9700ctl.agent import codes
from r9700ctl.bundle.files import (
    Diagnosis,
    evidence_at,
    evidence_in,
    find_line,
    p2p_switched_off,
    read_env,
    read_id,
)
from r9700ctl.bundle.model import AMD, FAIL, NOTE, RCCL_LOG, WARN, Evidence

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
            d.add(
                "rocm.target_unknown",
                NOTE,
                f"no ROCm release in r9700ctl's manifest lists {target}",
                code="GFX_TARGET_UNKNOWN",
            )
            continue
        first = d.manifest.first_release(target)
        if release is None and first and version_key(version) < version_key(first):
            # Older than the first release that has the target (6.4.0 and 6.3.x for gfx1201):
            # unsupported, whether or not the manifest lists that release.
            d.add(
                "rocm.unsupported_gpu",
                FAIL,
                f"ROCm {version} does not support {target} ({_names_for(d, target)}): support starts "
                f"with ROCm {first}; releases that do: {', '.join(supporting) or first}",
                fix=f"install ROCm {supporting[-1] if supporting else first} (r9700ctl provision with "
                "r9700_rocm_version: auto picks the newest that supports the GPUs and the OS)",
                evidence=[evidence],
                code="ROCM_RELEASE_UNSUPPORTED",
            )
            continue
        if release is None:  # an unknown patch release is not judged as its neighbour
            newer = version_key(version) >= version_key(supporting[0])
            d.add(
                "rocm.not_in_manifest",
                NOTE if newer else WARN,
                f"ROCm {version} is not in the manifest, so whether it supports {target} is not judged; "
                f"r9700ctl knows {target} in {', '.join(supporting)}",
                fix="" if newer else f"install one of {', '.join(supporting)} (r9700_rocm_version: auto)",
                evidence=[evidence],
                code="ROCM_RELEASE_UNKNOWN",
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
            code="ROCM_RELEASE_UNSUPPORTED",
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
        code="OS_UNSUPPORTED",
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
        code="OS_BEST_EFFORT",
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
    """rocminfo failing means ROCm cannot work: the kernel driver is not loaded, or /dev/kfd is closed.

    Why /dev/kfd did not open is in rocminfo's own lines: the errno it prints and its check of the
    group that owns /dev/kfd. Only "Permission denied" is a matter of groups; the rest is the
    driver's or KFD's state, where adding the user to render changes nothing.
    """
    if not d.amd_relevant:
        return
    info = _rocminfo(d)
    if info is None:
        d.cannot_judge("whether the ROCm runtime sees the GPUs", "rocminfo.txt")
        return
    lines = d.bundle.lines("rocminfo.txt")
    if info.rock_module_loaded is False:
        hit = find_line(lines, r"ROCk module.*NOT (loaded|live)")
        d.add(
            "rocm.kfd_not_loaded",
            FAIL,
            "the ROCm kernel driver (amdgpu's KFD, 'ROCk module') is not loaded",
            fix="modprobe amdgpu, and read dmesg for why it did not load; reinstall amdgpu-dkms for the "
            "running kernel",
            evidence=[evidence_at(d.bundle, "rocminfo.txt", hit[0] if hit else None)],
            code="KFD_NOT_LOADED",
        )
    kfd = find_line(lines, r"Unable to open /dev/kfd")
    if kfd:
        _judge_kfd_open(d, info, kfd[0])
        return
    hit = find_line(lines, r"hsa api call failure")
    if hit:
        d.add(
            "rocm.runtime_error",
            FAIL,
            "the HSA runtime failed to start (rocminfo: hsa api call failure)",
            fix="check that amdgpu is loaded and /dev/kfd exists; dmesg says why the driver is not ready",
            evidence=[evidence_at(d.bundle, "rocminfo.txt", hit[0])],
            code="ROCM_RUNTIME_FAILED",
        )


# What each errno of open("/dev/kfd") means, when it is not "Permission denied". The kernel's
# kfd_open (drivers/gpu/drm/amd/amdkfd/kfd_chardev.c) refuses 32-bit processes with EPERM and a
# process it cannot set up with EINVAL; a container's device cgroup refuses with EPERM. Owners'
# threads: ROCm/legacy-rocm-build#6166 (EINVAL on an RX 9070 XT, /dev/kfd 0666, user in render: a
# unit unbound the iGPU at boot), #4469 (EINVAL after a GPU went to vfio-pci and back), #5379
# (EINVAL in a Proxmox LXC container), #2232 (ENOMEM: "kfd kfd: amdgpu: PITCAIRN not supported in
# kfd" in dmesg, no GPU added to KFD), ROCm/rocminfo#37 (EPERM).
KFD_STATE = {
    "Invalid argument": (
        "KFD refused the process: the driver's state changed under it (a GPU unbound or removed after "
        "amdgpu loaded, a GPU handed to vfio-pci and back) or the container does not see the host's KFD",
        "read dmesg for kfd and amdgpu lines; find what unbinds or hands over a GPU at boot (a systemd "
        "unit or udev rule writing to /sys/bus/pci/drivers/amdgpu/unbind, a vfio-pci binding) and stop "
        "it, then reboot (or reload amdgpu); in a container pass the host's /dev/kfd and /dev/dri",
    ),
    "No such file or directory": (
        "/dev/kfd does not exist: amdgpu's KFD is not loaded, or it was not passed into this container",
        "modprobe amdgpu and read dmesg for kfd lines; in a container add --device=/dev/kfd "
        "--device=/dev/dri",
    ),
    "No such device": (
        "the KFD device has no driver behind it (amdgpu unloaded or its KFD not initialised)",
        "read dmesg for amdgpu and kfd errors; reload amdgpu or reboot",
    ),
    "Cannot allocate memory": (
        "KFD has no GPU to hand out: dmesg usually says 'kfd kfd: ... not supported' or a probe failure",
        "read dmesg for kfd lines (a GPU KFD does not support, a failed probe); reboot after fixing the "
        "driver",
    ),
    "Operation not permitted": (
        "the open was refused by policy, not by the file's group: a container's device rules, or a "
        "32-bit rocminfo (KFD refuses 32-bit processes)",
        "in a container pass --device=/dev/kfd --device=/dev/dri (and allow the devices); run the 64-bit "
        "/opt/rocm/bin/rocminfo",
    ),
}


def _judge_kfd_open(d: Diagnosis, info: Any, line: int) -> None:
    """rocminfo's "Unable to open /dev/kfd read-write: <errno>" told apart by errno, with its own
    group check ("x is member of render group") read before anything says usermod."""
    error = info.kfd_open_error or "unknown error"
    evidence = [evidence_at(d.bundle, "rocminfo.txt", line)]
    member_line = find_line(
        d.bundle.lines("rocminfo.txt"), r"is (not )?member of|Failed to get user name", start=line
    )
    if member_line:
        evidence.append(evidence_at(d.bundle, "rocminfo.txt", member_line[0]))
    user, group = info.kfd_user or "the user", info.kfd_group or "render"
    if error == "Permission denied":
        if info.kfd_member is True:
            detail = (
                f"rocminfo could not open /dev/kfd (Permission denied) although {user} is listed in the "
                f"{group} group: rocminfo reads the user database, not the groups of the session that ran "
                "it, so the membership is not in force there"
            )
            fix = (
                f"log out and in again (the session started before {user} joined {group}; `id` shows the "
                f"groups in force), and check that /dev/kfd is group {group} with mode 0660 (ls -l "
                f"/dev/kfd); in a container add --group-add {group}. No usermod is needed"
            )
        elif info.kfd_no_login:
            # rocminfo.cc: getlogin_r failed, so it could not check any group: no login session, as in
            # a container (ROCm/ROCm-docker#116: rocm/rocm-terminal run with --group-add video only).
            detail = (
                "rocminfo could not open /dev/kfd (Permission denied) and could not check the groups: the "
                "process has no login name, as in a container"
            )
            fix = (
                "run the container with --device=/dev/kfd --device=/dev/dri --group-add render (the group "
                "that owns /dev/kfd on the host: ls -l /dev/kfd), or give its user that group"
            )
        else:
            detail = (
                f"rocminfo could not open /dev/kfd (Permission denied): {user} is not in the {group} group "
                "that owns it"
                if info.kfd_member is False
                else "rocminfo could not open /dev/kfd (Permission denied): the user lacks access to the GPUs"
            )
            who = info.kfd_user or "USER"
            groups = group if group == "video" else f"{group},video"  # AMD's guide asks for both
            fix = (
                f"usermod -aG {groups} {who}, then log in again (r9700ctl provision does this for "
                f"r9700_users); in a container add --group-add {group}"
            )
        d.add("rocm.runtime_error", FAIL, detail, fix=fix, evidence=evidence, code="KFD_OPEN_DENIED")
        return
    meaning, fix = KFD_STATE.get(
        error,
        (
            "the driver's KFD is not in a usable state",
            "read dmesg for kfd and amdgpu lines; reload amdgpu or reboot",
        ),
    )
    in_group = f"; {user} is in the {group} group (rocminfo)" if info.kfd_member else ""
    d.add(
        "rocm.runtime_error",
        FAIL,
        f"rocminfo could not open /dev/kfd ({error}): not a permission problem (that would be "
        f"'Permission denied'){in_group}: {meaning}",
        fix=fix + "; adding users to groups does not help here",
        evidence=evidence,
        code="KFD_OPEN_FAILED",
    )


def rocminfo_stopped(d: Diagnosis) -> Any:
    """rocminfo's parse when it stopped before listing any agent (its failure line says why), else None."""
    info = _rocminfo(d)
    return info if info is not None and not info.agents and info.failure else None


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
            code="DRIVER_NOT_LOADED",
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
                f"{function.bdf} ({function.pci_id or function.device_name or 'AMD GPU'}) is driven by "
                f"{function.driver}, not amdgpu",
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
                code="DRIVER_NOT_BOUND",
            )


# ---------------------------------------------------------------- HSA_OVERRIDE_GFX_VERSION


def rule_hsa_override(d: Diagnosis) -> None:
    """An override loads code built for another target; across families it crashes the driver
    (ROCm/rocm-systems#3531) and AMD now rejects cross-major overrides (PR #5686).

    It applies to every GPU the runtime sees, an iGPU included (ROCm/ROCm#5696: an R9700 node's
    Strix Halo iGPU ran as gfx1201), so it is judged against each GPU's true target (gpus.py: from
    the chip id, not from the name rocminfo printed under the override). Where env.txt is missing,
    a rocminfo that names a known chip by another target shows the override was set where it ran.
    """
    if not d.amd_relevant:
        return
    env = read_env(d.bundle)
    rewritten = [g for g in d.gpus if g.reported_gfx and g.gfx_from == "rocminfo.txt" and g.gfx]
    if "HSA_OVERRIDE_GFX_VERSION" in env:
        value, line = env["HSA_OVERRIDE_GFX_VERSION"]
        evidence = [Evidence("env.txt", line, f"HSA_OVERRIDE_GFX_VERSION={value}")]
        said = ""
    elif rewritten:
        # No env.txt line, but rocminfo printed a known chip under another target's name.
        value = d.manifest.hsa_version(rewritten[0].reported_gfx) or rewritten[0].reported_gfx
        evidence = [g.evidence for g in rewritten if g.evidence]
        chips = ", ".join(sorted({f"{g.name or 'AMD GPU'} ({g.pci_id}, {g.gfx})" for g in rewritten}))
        said = (
            f"rocminfo lists {chips} as {rewritten[0].reported_gfx}, which the chip is not: "
            f"an HSA_OVERRIDE_GFX_VERSION={value} was set where rocminfo ran. "
        )
    else:
        if not d.bundle.has("env.txt"):
            d.cannot_judge("HSA_OVERRIDE_GFX_VERSION", "env.txt")
        return
    named = d.manifest.gfx_for_hsa_version(value)
    named_text = (
        f"{named} ({d.manifest.gfx_family(named)})" if named else f"{value}, a target r9700ctl does not know"
    )
    touched = [g for g in d.gpus if g.vendor == AMD]
    if not touched:
        d.add(
            "env.hsa_override",
            WARN,
            f"{said}HSA_OVERRIDE_GFX_VERSION={value} is set: ROCm treats every GPU as {named_text}",
            fix="remove it unless the GPUs need it; the bundle names no gfx target to check it against",
            evidence=evidence,
            code="HSA_OVERRIDE_SET",
        )
        return
    verdicts = [
        _judge_override(d, value, named, named_text, target, gpus) for target, gpus in _by_target(touched)
    ]
    verdicts.sort(key=lambda v: v[0] != FAIL)  # stable: the failures first
    severity = FAIL if any(v[0] == FAIL for v in verdicts) else WARN
    natives = sorted({g.gfx for g in touched if g.gfx})
    if severity == FAIL:
        fix = (
            "remove HSA_OVERRIDE_GFX_VERSION (from /etc/environment, /etc/profile.d, the shell start files, "
            f"the job's environment); {', '.join(natives) or 'the GPUs'} need none"
        )
    else:
        fix = (
            "remove it (from /etc/environment, /etc/profile.d, the job's environment): ROCm supports "
            f"{', '.join(natives) or 'the GPUs'} natively"
        )
    if any(g.discrete is False for g in touched):
        fix += (
            "; to keep ROCm off the integrated GPU disable it in the BIOS, or set ROCR_VISIBLE_DEVICES to "
            "the discrete cards, never an override for the whole machine (ROCm/ROCm#5696)"
        )
    d.add(
        "env.hsa_override",
        severity,
        said + ". ".join(v[1] for v in verdicts),
        fix=fix,
        evidence=evidence,
        code="HSA_OVERRIDE_WRONG_TARGET" if severity == FAIL else "HSA_OVERRIDE_SET",
    )


def _by_target(gpus: list[Any]) -> list[tuple[str | None, list[Any]]]:
    groups: dict[str | None, list[Any]] = {}
    for gpu in gpus:
        groups.setdefault(gpu.gfx, []).append(gpu)
    # The discrete cards' verdicts first, then the iGPU's, then GPUs of unknown target.
    return sorted(
        groups.items(),
        key=lambda item: (item[0] is None, all(g.discrete is False for g in item[1]), item[0] or ""),
    )


def _chips(gpus: list[Any]) -> str:
    """ "AMD Radeon RX 9070 XT", "AMD Radeon Graphics (integrated)": the GPUs of one verdict, an iGPU
    marked as such where its name does not say it, with its chip id when its target is unknown."""
    names = []
    for gpu in gpus:
        about = ["integrated"] if gpu.discrete is False and "integrated" not in (gpu.name or "") else []
        if gpu.gfx is None and gpu.pci_id:
            about.append(gpu.pci_id)
        names.append(f"{gpu.name or 'AMD GPU'}" + (f" ({', '.join(about)})" if about else ""))
    return ", ".join(sorted(set(names)))


def _judge_override(
    d: Diagnosis, value: str, named: str | None, named_text: str, target: str | None, gpus: list[Any]
) -> tuple[str, str]:
    """(severity, sentence) of the override on the GPUs of one true target."""
    names = _chips(gpus)
    if target is None:
        majors = {_ip_major(g) for g in gpus} - {None}
        wanted = _hsa_major(value)
        if majors and wanted is not None and wanted not in majors:
            return FAIL, (
                f"HSA_OVERRIDE_GFX_VERSION={value} makes ROCm run {named_text} code on {names}, whose GFX IP "
                f"is {', '.join(sorted({g.gfx_ip or '' for g in gpus}))} in dmesg: another major version, "
                "which crashes the driver (ROCm/rocm-systems#3531) and AMD now rejects"
            )
        shown = ", ".join(sorted({g.reported_gfx for g in gpus if g.reported_gfx}))
        why = (
            "the override changes the name rocminfo prints"
            if shown
            else "no file in the bundle names its chip"
        )
        return WARN, (
            f"HSA_OVERRIDE_GFX_VERSION={value} also rewrites {names}"
            + (f", which rocminfo lists as {shown}" if shown else "")
            + f": its true target is unknown to r9700ctl ({why}), so whether the override suits it is not "
            "judged"
        )
    own = d.manifest.hsa_version(target)
    family = d.manifest.gfx_family(target)
    if own == value:
        return WARN, (
            f"HSA_OVERRIDE_GFX_VERSION={value} is the GPUs' own target {target}: it changes nothing for "
            "them but mislabels any other GPU in the machine (an iGPU)"
        )
    if named is None or d.manifest.gfx_family(named) != family:
        return FAIL, (
            f"HSA_OVERRIDE_GFX_VERSION={value} makes ROCm run {named_text} code on {target} "
            f"({family or 'unknown family'}: {names}); cross-family overrides crash the driver "
            "(ROCm/rocm-systems#3531) and AMD now rejects them"
            + (f" (its own value would be {own})" if own else "")
        )
    return WARN, (
        f"HSA_OVERRIDE_GFX_VERSION={value} runs {named_text} code on {target} ({names}): same family, "
        "it may run, with kernels tuned for another chip"
        f" (ROCm supports {target} natively in: "
        f"{', '.join(d.manifest.releases_supporting({target})) or 'none known'})"
    )


def _hsa_major(value: str) -> int | None:
    match = re.match(r"\s*(\d+)\.", value)
    return int(match.group(1)) if match else None


def _ip_major(gpu: Any) -> int | None:
    match = re.match(r"gfx_v(\d+)_", gpu.gfx_ip or "")
    return int(match.group(1)) if match else None


# ---------------------------------------------------------------- DKMS


def rule_dkms(d: Diagnosis) -> None:
    """amdgpu DKMS must be installed for the running kernel; broken entries and dkms warnings are named."""
    from r9700ctl.agent.parsers import dkms

    topic = "whether the amdgpu DKMS module is built for the running kernel"
    report = d.read_amd("dkms-status.txt", dkms.parse, topic)
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
                code="DKMS_BROKEN",
            )
        elif entry.diff_built_installed or entry.missing_built_modules:
            d.add(
                "dkms.module_differs",
                WARN,
                f"dkms warns about amdgpu/{entry.version} for {entry.kernel}: {'; '.join(entry.notes)}",
                fix=f"dkms install --force amdgpu/{entry.version} -k {entry.kernel}, then reboot",
                evidence=[at(entry.line)],
                code="DKMS_MODULE_DIFFERS",
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
                code="DKMS_ERROR",
            )
    if not entries:
        if report.entries or not report.error:
            # A supported choice (r9700_driver_source: inbox), not a fault: said, not warned about.
            d.add(
                "dkms.no_amdgpu",
                NOTE,
                "no amdgpu DKMS module: the kernel's own (inbox) amdgpu driver is in use, a supported choice "
                "(r9700_driver_source: inbox); AMD's amdgpu-dkms carries newer fixes for new cards",
                fix="nothing to do unless the driver misbehaves; then install amdgpu-dkms from AMD's "
                "repository for the ROCm release (r9700ctl provision with r9700_driver_source: dkms)",
                evidence=[Evidence("dkms-status.txt", None, "no amdgpu entry")],
                code="DKMS_INBOX_DRIVER",
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
            code="DKMS_NOT_FOR_RUNNING_KERNEL",
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
                code="DKMS_NOT_INSTALLED",
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
    info = _rocminfo(d)
    listed = (
        info is not None
        and info.kfd_member is True
        and info.kfd_group == "render"
        and info.kfd_user in (None, who.user)
    )
    if "render" not in who.groups and listed:
        # `id` shows the session's groups; rocminfo read the user database (getgrouplist), where the
        # user is in render already: the usermod happened, the session predates it.
        line = find_line(d.bundle.lines("rocminfo.txt"), r"is member of render group")
        d.add(
            "access.not_in_render",
            FAIL,
            f"user {who.user}'s session is not in the render group (id.txt), though rocminfo finds "
            f"{who.user} in render in the user database: the membership was added after this login",
            fix="log out and in again (or start a new session: `newgrp render`); the group is already set, "
            "no usermod is needed",
            evidence=[*evidence, evidence_at(d.bundle, "rocminfo.txt", line[0] if line else None)],
            code="ACCESS_SESSION_STALE",
        )
    elif "render" not in who.groups:
        d.add(
            "access.not_in_render",
            FAIL,
            f"user {who.user} is not in the render group: /dev/kfd and /dev/dri/renderD* stay closed to it "
            "and "
            "ROCm finds no GPU",
            fix=f"usermod -aG render,video {who.user}, then log in again (r9700ctl provision does this for "
            "r9700_users)",
            evidence=evidence,
            code="ACCESS_NOT_IN_RENDER",
        )
    if "video" not in who.groups:
        d.add(
            "access.not_in_video",
            WARN,
            f"user {who.user} is not in the video group, which AMD's install guide asks for too",
            fix=f"usermod -aG video {who.user}, then log in again",
            evidence=evidence,
            code="ACCESS_NOT_IN_VIDEO",
        )


# ---------------------------------------------------------------- RCCL start-up warnings

# What each kind of RCCL start-up line means and what to do: the code's record (data/codes.yaml).
RCCL_CODES = {
    "missing_iommu_pt": "RCCL_WARNS_IOMMU_PT",
    "missing_amd_iommu": "RCCL_WARNS_AMD_IOMMU",
    "missing_fine_grain_pcie": "RCCL_WARNS_FINE_GRAIN_PCIE",
    "p2p_disabled": "RCCL_P2P_DISABLED",
    "ipc_failure": "RCCL_IPC_FAILURE",
    "warn": "RCCL_WARNINGS",
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
    for kind, code in RCCL_CODES.items():
        found = report.of_kind(kind)
        if not found:
            continue
        meaning, fix = codes.record(code).meaning, codes.next_step(code)
        evidence = [Evidence(RCCL_LOG, f.line, f.text.strip()) for f in found]
        if kind == "missing_fine_grain_pcie" and p2p_off is not None:
            # The node's P2P is off (r9700_p2p decided so, or the user did): the warning is expected,
            # and advice to set the variable would contradict that decision.
            d.add(
                f"rccl.{kind}",
                NOTE,
                f"{meaning} ({len(found)} line(s)); expected: P2P is off on this node "
                f"({p2p_off[0]}=1 in env.txt)",
                fix="nothing to do while P2P stays off; /etc/r9700ctl/node.json (p2p) says why it is off",
                evidence=[*evidence, p2p_off[1]],
                code=RCCL_CODES[kind],
            )
            continue
        d.add(
            f"rccl.{kind}",
            WARN,
            f"{meaning} ({len(found)} line(s))",
            fix=fix,
            evidence=evidence,
            code=RCCL_CODES[kind],
        )
