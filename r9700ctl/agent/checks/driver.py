"""Driver layer: module loaded and bound, /dev/kfd and render nodes usable, kernel log clean,
and a PyTorch / ROCm / HSA_OVERRIDE_GFX_VERSION that matches the cards' gfx target.

Device access distinguishes "missing" (no node: driver not loaded) from "restricted" (the node
exists but this user cannot open it: add the user to the render and video groups).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from r9700ctl.agent import codes, sysfs
from r9700ctl.agent.checks import _measure, register
from r9700ctl.agent.context import AgentContext
from r9700ctl.agent.datafiles import load_data
from r9700ctl.agent.levels import from_level
from r9700ctl.agent.parsers import dmesg
from r9700ctl.agent.result import FAIL, PASS, SKIP, WARN, CheckResult
from r9700ctl.agent.rules import kernel_log
from r9700ctl.agent.tools import run_tool

MODULE_FOR_VENDOR = {sysfs.AMD: "amdgpu", sysfs.NVIDIA: "nvidia"}


def device_access(path: Path, access: Callable[[str, int], bool] = os.access) -> str:
    """ "ok", "missing" or "restricted" (exists, but this user may not read and write it)."""
    if not path.exists():
        return "missing"
    return "ok" if access(str(path), os.R_OK | os.W_OK) else "restricted"


def _module_results(ctx: AgentContext) -> list[CheckResult]:
    results = []
    for vendor in sorted({g.vendor for g in ctx.discovery.gpus if g.vendor}):
        module = MODULE_FOR_VENDOR.get(vendor)
        if module is None:
            continue
        loaded = (ctx.root / "sys/module" / module).is_dir()
        version = sysfs.read_text(ctx.root / "sys/module" / module / "version")
        hint = "" if loaded else codes.hint("DRIVER_NOT_LOADED", f"the {module} kernel module is not loaded")
        results.append(
            CheckResult(
                id="driver.module",
                subject="node",
                status=PASS if loaded else FAIL,
                metric="module",
                value=module,
                threshold=f"{module} loaded",
                hint=hint,
                evidence={"version": version},
                code="DRIVER_NOT_LOADED",
            )
        )
    for gpu in ctx.discovery.gpus:
        if not gpu.pci_address or not gpu.vendor:
            continue
        expected = MODULE_FOR_VENDOR.get(gpu.vendor, "")
        bound = gpu.driver == expected
        hint = (
            ""
            if bound
            else codes.hint(
                "DRIVER_NOT_BOUND",
                f"{gpu.pci_address} is bound to {gpu.driver or 'no driver'}, not {expected}",
            )
        )
        results.append(
            CheckResult(
                id="driver.bound",
                subject=gpu.subject,
                status=PASS if bound else FAIL,
                metric="driver",
                value=gpu.driver or "none",
                threshold=f"bound to {expected}",
                hint=hint,
                evidence={"pci": gpu.pci_address},
                code="DRIVER_NOT_BOUND",
            )
        )
    return results


def _access_verdict(state: str, path: str, missing_code: str, missing_hint: str) -> tuple[str, str, str]:
    """Status, reason code and hint of a device node as device_access found it: ok, missing (the
    driver made none), or restricted (this user cannot open it)."""
    if state == "ok":
        return PASS, "", ""
    if state == "missing":
        return FAIL, missing_code, missing_hint
    code = "DEVICE_NOT_ACCESSIBLE"
    return WARN, code, codes.hint(code, f"{path} exists but this user cannot open it")


def _access_results(ctx: AgentContext, access: Callable[[str, int], bool] = os.access) -> list[CheckResult]:
    results = []
    verdict = partial(CheckResult, id="driver.access", threshold="present and openable")
    if any(g.vendor == sysfs.AMD for g in ctx.discovery.gpus):
        state = device_access(ctx.root / "dev/kfd", access)
        said = "/dev/kfd is missing: amdgpu is not loaded or has no KFD (compute) support"
        status, code, hint = _access_verdict(
            state, "/dev/kfd", "KFD_MISSING", codes.hint("KFD_MISSING", said)
        )
        evidence = {"path": "/dev/kfd", "uid": os.getuid()}
        results.append(
            verdict(
                subject="node",
                status=status,
                metric="/dev/kfd",
                value=state,
                hint=hint,
                evidence=evidence,
                code=code,
            )
        )
    for gpu in ctx.discovery.gpus:
        if gpu.vendor != sysfs.AMD:
            continue
        node = partial(verdict, subject=gpu.subject, metric="render_node")
        if not gpu.render_node:
            said = "no /dev/dri/renderD* for this GPU: amdgpu did not initialise it; see dmesg"
            results.append(
                node(
                    status=FAIL,
                    value="missing",
                    hint=said,
                    evidence={"pci": gpu.pci_address},
                    code="RENDER_NODE_MISSING",
                )
            )
            continue
        state = device_access(ctx.root / gpu.render_node.lstrip("/"), access)
        missing = f"{gpu.render_node} is missing: see dmesg for amdgpu errors"
        status, code, hint = _access_verdict(state, gpu.render_node, "RENDER_NODE_MISSING", missing)
        evidence = {"path": gpu.render_node, "pci": gpu.pci_address}
        results.append(node(status=status, value=state, hint=hint, evidence=evidence, code=code))
    return results


def _dmesg_result(ctx: AgentContext) -> CheckResult:
    """amdgpu's trouble since boot, each kind judged by the manifest's kernel-log signatures
    (rules/kernel_log.py, as doctor --bundle judges a recorded dmesg.txt)."""
    out = run_tool(["dmesg"], ctx.tool_timeout_s)
    verdict = partial(CheckResult, id="driver.dmesg", subject="node", threshold="no amdgpu errors since boot")
    unreadable = partial(verdict, status=SKIP, metric="kernel_log", code="KERNEL_LOG_UNREADABLE")
    if not out.ok:
        return unreadable(
            hint=codes.hint("KERNEL_LOG_UNREADABLE", f"kernel log unreadable ({out.why_not()})")
        )
    log = dmesg.parse(out.stdout, "dmesg")
    if log.error:
        return unreadable(hint=log.error)
    verdicts = kernel_log.judge(log.findings, _manifest().get("kernel_log_signatures") or {})
    found = [f for v in verdicts for f in v.lines]
    evidence: dict[str, Any] = {
        "kinds": log.kinds,
        "lines": [f"{f.line}: {f.text}" for f in sorted(found, key=lambda f: f.line)[:20]],
        "gpus": sorted({f.bdf for f in found if f.bdf}),
        "verdicts": {v.kind: {"status": v.status, "code": v.code, "lines": len(v.lines)} for v in verdicts},
    }
    counted = partial(verdict, metric="error_lines", unit="lines", evidence=evidence)
    worst = kernel_log.worst(verdicts)
    if worst is None:
        return counted(status=PASS, value=0)
    same = [v for v in verdicts if v.status == worst.status]
    kinds = ", ".join(v.kind for v in same)
    said = f"the GPU driver logged {kinds} since boot (see evidence)"
    value = sum(len(v.lines) for v in same)
    return counted(status=worst.status, value=value, hint=codes.hint(worst.code, said), code=worst.code)


def _gfx_targets(ctx: AgentContext) -> list[str]:
    return sorted({g.gfx_target for g in ctx.discovery.gpus if g.vendor == sysfs.AMD and g.gfx_target})


def _torch_arch_result(ctx: AgentContext) -> CheckResult | None:
    probe = ctx.discovery.torch
    arch_list = probe.get("arch_list") or []
    if not probe.get("importable") or not probe.get("available") or not arch_list:
        return None
    verdict = partial(
        CheckResult,
        id="driver.torch_arch",
        subject="node",
        threshold="torch carries kernels for every GPU target",
    )
    if probe.get("hip"):
        targets = _gfx_targets(ctx)
        missing = [t for t in targets if not any(a.split(":")[0] == t for a in arch_list)]
        if missing:
            code = "TORCH_NO_KERNELS_FOR_TARGET"
            said = f"this PyTorch build has no {', '.join(missing)} kernels (it has {', '.join(arch_list)})"
            evidence = {"arch_list": arch_list, "targets": targets}
            return verdict(
                status=FAIL,
                metric="missing_targets",
                value=", ".join(missing),
                hint=codes.hint(code, said),
                evidence=evidence,
                code=code,
            )
        return verdict(
            status=PASS, metric="targets", value=", ".join(targets), evidence={"arch_list": arch_list}
        )
    caps = sorted({g.compute_capability for g in ctx.discovery.gpus if g.compute_capability})
    missing = [c for c in caps if f"sm_{c.replace('.', '')}" not in arch_list]
    code = "TORCH_NO_SM_KERNELS"
    hint = codes.hint(code, f"no sm_ kernels for compute capability {', '.join(missing)}") if missing else ""
    return verdict(
        status=WARN if missing else PASS,
        metric="targets",
        value=", ".join(caps),
        hint=hint,
        evidence={"arch_list": arch_list},
        code=code,
    )


def _manifest() -> dict[str, Any]:
    return load_data("manifest") or {}


def _override_result(ctx: AgentContext) -> CheckResult | None:
    # This process's environment, else what the system's environment files give every session.
    value = ctx.environment.get("variables", {}).get("HSA_OVERRIDE_GFX_VERSION")
    where = "this environment"
    if value is None:
        value = (ctx.environment.get("system_variables") or {}).get("HSA_OVERRIDE_GFX_VERSION")
        where = "/etc/environment or /etc/environment.d (every session gets it)"
    targets = _gfx_targets(ctx)
    if value is None or not targets:
        return None
    known = _manifest().get("gfx_targets") or {}
    native = {t: (known.get(t) or {}).get("hsa_version") for t in targets}
    evidence = {"HSA_OVERRIDE_GFX_VERSION": value, "native": native, "set_in": where}
    verdict = partial(
        CheckResult,
        id="driver.hsa_override",
        subject="node",
        metric="HSA_OVERRIDE_GFX_VERSION",
        value=value,
        threshold="unset (the R9700 and other supported cards need no override)",
        evidence=evidence,
    )
    if all(v == value for v in native.values()):
        code, said = (
            "HSA_OVERRIDE_REDUNDANT",
            "the override equals the cards' own target: it does nothing here",
        )
        return verdict(status=WARN, hint=codes.hint(code, said), code=code)
    majors = {str(v).split(".")[0] for v in native.values() if v}
    cross = str(value).split(".")[0] not in majors
    said = (
        f"HSA_OVERRIDE_GFX_VERSION={value} (set in {where}) makes the runtime load code built for another "
        f"target than {', '.join(targets)}"
    )
    code = "HSA_OVERRIDE_WRONG_TARGET"
    return verdict(status=FAIL if cross else WARN, hint=codes.hint(code, said), code=code)


def _rocm_result(ctx: AgentContext) -> CheckResult | None:
    version = ctx.environment.get("rocm")
    targets = _gfx_targets(ctx)
    if not version or not targets:
        return None
    releases = _manifest().get("rocm_releases") or {}
    base = re.match(r"\d+\.\d+(\.\d+)?", version)
    release = releases.get(base.group(0)) if base else None
    threshold = "this ROCm release supports every GPU target (manifest)"
    verdict = partial(
        CheckResult, id="driver.rocm", subject="node", metric="rocm", value=version, threshold=threshold
    )
    if release is None:
        said = f"ROCm {version} is not in the manifest: support for {', '.join(targets)} not judged"
        return verdict(status=PASS, hint=said, evidence={"targets": targets})
    missing = [t for t in targets if t not in (release.get("gfx") or [])]
    if missing:
        supporting = [v for v, r in releases.items() if all(t in (r.get("gfx") or []) for t in targets)]
        said = (
            f"ROCm {version} does not support {', '.join(missing)}: upgrade to "
            f"{' or '.join(supporting[:3]) or 'a supporting release'} (r9700ctl provision)"
        )
        evidence = {"targets": targets, "supported": release.get("gfx")}
        return verdict(status=FAIL, hint=said, evidence=evidence, code="ROCM_RELEASE_UNSUPPORTED")
    return verdict(status=PASS, evidence={"targets": targets})


@register(id="driver", levels=from_level("config"), needs_gpu=False, order=11)
def run(ctx: AgentContext) -> list[CheckResult]:
    if not ctx.discovery.gpus:
        return _measure.no_gpu(
            "driver.module", "driver loaded for the GPUs found", "no GPU found (see inventory.count)"
        )
    results = _module_results(ctx)
    results += _access_results(ctx)
    results.append(_dmesg_result(ctx))
    for extra in (_torch_arch_result(ctx), _override_result(ctx), _rocm_result(ctx)):
        if extra is not None:
            results.append(extra)
    return results
