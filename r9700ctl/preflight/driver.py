"""The amdgpu driver the node has against the one r9700_driver_source asks for."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from r9700ctl.agent.result import FAIL, PASS, WARN, CheckResult, finding
from r9700ctl.preflight.model import Context, Resolved, Settings
from r9700ctl.preflight.registry import register


@register("driver", order=75)
def driver(ctx: Context) -> list[CheckResult]:
    return [_check_driver(ctx.res, ctx.settings, ctx.facts)]


def _check_driver(res: Resolved, settings: Settings, facts: Mapping[str, Any]) -> CheckResult:
    amdgpu = facts.get("amdgpu") or {}
    loaded = bool(amdgpu.get("loaded"))
    version = amdgpu.get("version") or ""
    res.driver_loaded, res.driver_version = loaded, version
    kind = (
        f"AMD's DKMS amdgpu {version}"
        if amdgpu.get("dkms") and version
        else "the kernel's own (inbox) amdgpu"
    )
    dkms_pkg = (facts.get("packages") or {}).get(res.package_driver)
    if settings.driver_source == "present":
        if not loaded:
            return finding(
                "driver.existing",
                FAIL,
                "r9700_driver_source=present but no amdgpu driver is loaded",
                "load a working amdgpu first, or set r9700_driver_source: dkms to install AMD's",
                code="DRIVER_NOT_LOADED",
            )
        return finding("driver.existing", PASS, f"keeping {kind} (r9700_driver_source=present)")
    if settings.driver_source == "inbox":
        if dkms_pkg:
            return finding(
                "driver.existing",
                WARN,
                f"{res.package_driver} {dkms_pkg} is installed: its module, not the inbox one, loads at boot",
                f"remove {res.package_driver} for the inbox driver, or use r9700_driver_source: dkms",
                code="DKMS_SHADOWS_INBOX",
            )
        state = f"{kind} loaded" if loaded else "amdgpu not loaded yet"
        return finding(
            "driver.existing", PASS, f"{state}; using the kernel's own driver (r9700_driver_source=inbox)"
        )
    if not loaded:
        return finding(
            "driver.existing", PASS, f"no amdgpu loaded; installing {res.package_driver} {res.amdgpu_version}"
        )
    if amdgpu.get("dkms"):
        return finding(
            "driver.existing", PASS, f"{kind} loaded; the manifest's driver is {res.amdgpu_version}"
        )
    return finding(
        "driver.existing",
        PASS,
        f"{kind} loaded; AMD's DKMS driver {res.amdgpu_version} replaces it after a reboot",
    )
