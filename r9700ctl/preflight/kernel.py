"""What amdgpu-dkms needs of the running kernel: its headers and linux-modules-extra as apt offers
them, and under Secure Boot the key DKMS signs with, enrolled."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from r9700ctl.agent.result import FAIL, PASS, SKIP, WARN, CheckResult, finding
from r9700ctl.manifest import Manifest
from r9700ctl.preflight.model import Context, Resolved, Settings
from r9700ctl.preflight.registry import register


@register("kernel.packages", order=60)
def kernel_packages(ctx: Context) -> list[CheckResult]:
    return _check_kernel_packages(ctx.res, ctx.settings, ctx.facts, ctx.manifest)


@register("secureboot", order=70)
def secure_boot(ctx: Context) -> list[CheckResult]:
    return [_check_secure_boot(ctx.settings, ctx.facts)]


def _check_kernel_packages(
    res: Resolved, settings: Settings, facts: Mapping[str, Any], manifest: Manifest
) -> list[CheckResult]:
    apt = facts.get("apt") or {}
    res.headers_package = str(apt.get("headers_package") or f"linux-headers-{res.kernel}")
    res.modules_extra_package = str(apt.get("modules_extra_package") or f"linux-modules-extra-{res.kernel}")
    packages = apt.get("packages") or {}
    headers = packages.get(res.headers_package) or {}
    extra = packages.get(res.modules_extra_package) or {}
    os_entry = manifest.os_release(res.os_key) or {}
    wants_extra = bool(os_entry.get("modules_extra"))
    res.modules_extra = wants_extra and bool(extra.get("candidate") or extra.get("installed"))
    if settings.driver_source != "dkms":
        return [
            finding(
                "kernel.headers",
                SKIP,
                f"not needed: r9700_driver_source={settings.driver_source} builds nothing",
                code="NOT_APPLICABLE",
            )
        ]
    checks = []
    update = facts.get("apt_update") or {}
    stale = "" if update.get("ok") is not False else f" (apt-get update failed: {update.get('detail', '')})"
    if update.get("ran") is False and update.get("age_s") is not None:
        # an earlier preflight's refresh stood (r9700_preflight_apt_cache_valid_time): say so
        stale = f" (in apt's lists as refreshed {update['age_s']} s ago; `provision --full` refreshes them)"
    if not apt.get("available", True):
        checks.append(
            finding(
                "kernel.headers",
                WARN,
                "apt-cache is missing: cannot tell whether kernel headers exist",
                code="APT_UNANSWERED",
            )
        )
    elif apt.get("error"):
        checks.append(
            finding(
                "kernel.headers",
                WARN,
                f"apt could not answer ({apt['error']}): cannot tell whether {res.headers_package} exists",
                "fix the apt source it names; r9700_repos removes legacy AMD one-line sources, "
                "a frequent cause",
                code="APT_UNANSWERED",
            )
        )
    elif headers.get("installed") or headers.get("candidate"):
        version = headers.get("installed") or headers.get("candidate")
        state = "installed" if headers.get("installed") else "candidate"
        checks.append(finding("kernel.headers", PASS, f"{res.headers_package} {state} {version}"))
    else:
        checks.append(
            finding(
                "kernel.headers",
                FAIL,
                f"{res.headers_package} has no apt candidate{stale}: "
                f"DKMS cannot build amdgpu for the running kernel {res.kernel}",
                "upgrade the kernel and reboot into it (the new one has headers), "
                f"or add an apt mirror that carries {res.headers_package}",
                code="KERNEL_HEADERS_MISSING",
            )
        )
    if not wants_extra:
        checks.append(
            finding(
                "kernel.modules_extra",
                SKIP,
                f"{res.os_key} has no linux-modules-extra packages",
                code="NOT_APPLICABLE",
            )
        )
    elif res.modules_extra:
        checks.append(finding("kernel.modules_extra", PASS, f"{res.modules_extra_package} available"))
    elif apt.get("available", True):
        checks.append(
            finding(
                "kernel.modules_extra",
                WARN,
                f"{res.modules_extra_package} has no apt candidate (common on cloud kernels)",
                "install the generic kernel flavour if amdgpu-dkms reports missing modules",
                code="MODULES_EXTRA_MISSING",
            )
        )
    return checks


def _check_secure_boot(settings: Settings, facts: Mapping[str, Any]) -> CheckResult:
    """Under Secure Boot, amdgpu loads only if signed with an enrolled key: the one DKMS signs with."""
    sb = facts.get("secure_boot") or {}
    state = sb.get("state", "unknown")
    if settings.driver_source != "dkms":
        return finding(
            "secureboot",
            SKIP,
            f"Secure Boot {state}; r9700_driver_source={settings.driver_source} builds nothing",
            code="NOT_APPLICABLE",
        )
    if state == "unknown":
        return finding(
            "secureboot",
            WARN,
            f"Secure Boot state unknown ({sb.get('detail', '')})",
            "check with 'mokutil --sb-state'",
            code="SECURE_BOOT_UNKNOWN",
        )
    if state != "enabled":
        return finding("secureboot", PASS, f"Secure Boot {state.replace('_', ' ')}")
    signing = facts.get("dkms_signing") or {}
    os_id = str((facts.get("os") or {}).get("id") or "")
    key, cert = signing.get("key", ""), signing.get("certificate", "")
    if not key or not cert:  # facts of an older nodefacts: say so rather than guess a key
        return finding(
            "secureboot",
            WARN,
            "Secure Boot is enabled; DKMS's signing key was not reported",
            code="SECURE_BOOT_UNKNOWN",
        )
    signs = f"DKMS signs amdgpu with {key} + {cert} ({signing.get('origin', '')})"
    other_ways = "; or disable Secure Boot in the firmware setup; or use r9700_driver_source: inbox"
    if not (signing.get("key_exists") and signing.get("certificate_exists")):
        return finding(
            "secureboot",
            FAIL,
            f"Secure Boot is enabled and {key} / {cert} do not exist yet: DKMS would make a new key at "
            "build time that the firmware does not trust, and the kernel would refuse amdgpu",
            _make_and_enroll(os_id, key, cert) + other_ways,
            {"signing": dict(signing)},
            code="SECURE_BOOT_KEY_MISSING",
        )
    enrolled = signing.get("enrolled")
    said = signing.get("mokutil", "")
    if enrolled == "enrolled":
        return finding("secureboot", PASS, f"Secure Boot enabled; {signs}, enrolled ({said})")
    if enrolled == "pending":
        return finding(
            "secureboot",
            WARN,
            f"Secure Boot enabled; {signs}, enrollment requested but not confirmed ({said})",
            "at the next boot choose 'Enroll MOK' in the blue MOK Manager screen and type the password "
            "given to mokutil --import",
            code="SECURE_BOOT_ENROLL_PENDING",
        )
    if enrolled == "unknown":
        return finding(
            "secureboot",
            WARN,
            f"Secure Boot enabled; {signs}; whether it is enrolled is unknown ({said})",
            f"install mokutil and run: mokutil --test-key {cert}",
            code="SECURE_BOOT_UNKNOWN",
        )
    return finding(
        "secureboot",
        FAIL,
        f"Secure Boot is enabled and {signs}, which the firmware does not trust ({said or enrolled}): "
        "the kernel would refuse amdgpu",
        _enroll(os_id, cert) + other_ways,
        {"signing": dict(signing)},
        code="SECURE_BOOT_KEY_NOT_ENROLLED",
    )


def _enroll(os_id: str, cert: str) -> str:
    """How to enroll DKMS's certificate on this OS (then confirm it in MOK Manager at the next boot)."""
    if os_id == "ubuntu" and cert == "/var/lib/shim-signed/mok/MOK.der":
        command = "sudo update-secureboot-policy --enroll-key"
    else:
        command = f"sudo mokutil --import {cert}"
    return f"enroll it: {command}, reboot and choose 'Enroll MOK' in the MOK Manager screen"


def _make_and_enroll(os_id: str, key: str, cert: str) -> str:
    if os_id == "ubuntu" and cert == "/var/lib/shim-signed/mok/MOK.der":
        make = "sudo update-secureboot-policy --new-key"
    else:  # the command dkms itself runs (dkms.in prepare_mok), so the key is where DKMS looks
        make = (
            "sudo openssl req -new -x509 -nodes -days 36500 -subj '/CN=DKMS module signing key' "
            f"-newkey rsa:2048 -keyout {key} -addext extendedKeyUsage=codeSigning -outform DER -out {cert}"
        )
    return f"create the key first ({make}), then {_enroll(os_id, cert)}"
