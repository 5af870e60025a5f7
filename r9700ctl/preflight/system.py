"""The system under the GPUs: what the facts could not gather, the OS release, apt's locks, free
disk space, and whether runtime steps run (an init system)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from r9700ctl.agent.result import FAIL, PASS, WARN, CheckResult, finding
from r9700ctl.manifest import Manifest
from r9700ctl.preflight.model import GB, Context, Resolved, Settings
from r9700ctl.preflight.registry import register


@register("facts", order=10)
def facts_errors(ctx: Context) -> list[CheckResult]:
    """What nodefacts could not gather: the checks that need it judge less."""
    return [
        finding("facts", WARN, f"while gathering facts: {error}", code="NODE_FACTS_INCOMPLETE")
        for error in ctx.facts.get("errors") or []
    ]


@register("os", order=20)
def os_release(ctx: Context) -> list[CheckResult]:
    return [_check_os(ctx.res, ctx.manifest)]


@register("apt.lock", order=50)
def apt_lock(ctx: Context) -> list[CheckResult]:
    return [_check_lock(ctx.facts)]


@register("disk", order=65)
def disk(ctx: Context) -> list[CheckResult]:
    return _check_disk(ctx.settings, ctx.facts)


@register("runtime", order=85)
def runtime(ctx: Context) -> list[CheckResult]:
    """Whether the roles run runtime steps (services, module loads, reboots): systemd, unless told."""
    if ctx.settings.apply_runtime == "auto":
        ctx.res.runtime = ctx.facts.get("service_manager") == "systemd"
    else:
        ctx.res.runtime = ctx.settings.apply_runtime == "true"
    return []


def _check_os(res: Resolved, manifest: Manifest) -> CheckResult:
    known = manifest.os_keys()
    if not res.os_key:
        return finding(
            "os.release",
            FAIL,
            "could not tell the OS release from /etc/os-release",
            _os_fix(known),
            code="OS_UNKNOWN",
        )
    if res.os_key not in known:
        return finding(
            "os.release",
            FAIL,
            f"{res.os_key} is not a system the roles install on",
            _os_fix(known),
            code="OS_UNSUPPORTED",
        )
    return finding(
        "os.release", PASS, f"{res.os_key} ({res.os_codename or 'no codename'}), kernel {res.kernel}"
    )


def _os_fix(known: list[str]) -> str:
    return "install one of " + ", ".join(known) + " on this node"


def _check_lock(facts: Mapping[str, Any]) -> CheckResult:
    lock = facts.get("apt_lock") or {}
    holders = lock.get("holders") or []
    waited = lock.get("waited_s", 0)
    if holders:
        who = "; ".join(f"pid {h['pid']} ({h['command']}) holds {h['file']}" for h in holders)
        return finding(
            "apt.lock",
            FAIL,
            f"dpkg/apt lock still held after waiting {waited:g} s: {who}",
            "let that process finish or stop it (e.g. systemctl stop unattended-upgrades), then rerun; "
            "r9700_apt_lock_timeout sets how long preflight waits",
            {"holders": holders},
            code="APT_LOCK_HELD",
        )
    seen = lock.get("seen_holders") or []
    if seen:
        who = ", ".join(f"pid {h['pid']} ({h['command']})" for h in seen)
        return finding("apt.lock", PASS, f"waited {waited:g} s for {who} to release the dpkg/apt lock")
    return finding("apt.lock", PASS, "no process holds the dpkg/apt locks")


def _check_disk(settings: Settings, facts: Mapping[str, Any]) -> list[CheckResult]:
    checks = []
    need = settings.min_free_gb
    for mount, free in (facts.get("disk") or {}).items():
        check_id = "disk.root" if mount == "/" else f"disk.{mount.strip('/').replace('/', '_')}"
        if free is None:
            checks.append(
                finding(check_id, WARN, f"could not read free space on {mount}", code="DISK_SPACE_UNKNOWN")
            )
        elif free < need * GB:
            checks.append(
                finding(
                    check_id,
                    FAIL,
                    f"only {free / GB:.1f} GB free on {mount}, need {need:g} GB (r9700_min_free_gb)",
                    f"free space on {mount} (apt-get clean, old kernels, logs) or lower r9700_min_free_gb",
                    code="DISK_SPACE_LOW",
                )
            )
        else:
            checks.append(finding(check_id, PASS, f"{free / GB:.1f} GB free on {mount} (need {need:g} GB)"))
    return checks
