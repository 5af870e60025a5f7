"""Rules from data/manifest.yaml's lists of what owners learned: kernel-log signatures (counted and
grouped per GPU, each explained) and known issues (which apply to this node, which are active, and
the evidence the bundle holds for them)."""

from __future__ import annotations

import re
from typing import Any

from r9700ctl.bundle.files import Diagnosis, read_env
from r9700ctl.bundle.model import FAIL, NOTE, RCCL_LOG, WARN, Evidence

# ---------------------------------------------------------------- kernel log signatures


def rule_dmesg(d: Diagnosis) -> None:
    """Each kind of amdgpu trouble in dmesg.txt: how many lines on which GPU, what it means, what to do."""
    from r9700ctl.agent.parsers import dmesg
    from r9700ctl.agent.rules import kernel_log
    from r9700ctl.known_issues import signatures

    report = d.read_amd("dmesg.txt", dmesg.parse, "amdgpu errors in the kernel log")
    if report is None:
        return
    explained = signatures(d.manifest)
    for verdict in kernel_log.judge(report.findings, d.manifest.raw.get("kernel_log_signatures") or {}):
        sig, found = explained[verdict.kind], list(verdict.lines)
        detail = f"{sig.meaning}: {_per_gpu(found)}"
        if verdict.kind == "page_fault":
            detail += "; " + _aer_context(report.aer)
        d.add(
            f"dmesg.amdgpu_{verdict.kind}",
            verdict.status,
            detail,
            fix=f"{sig.action} (see {', '.join(sig.sources)})",
            evidence=[Evidence("dmesg.txt", f.line, f.text.strip()) for f in found],
            code=verdict.code,
        )


def _per_gpu(found: list[Any]) -> str:
    """'3 line(s) on 0000:03:00.0 (2), 0000:43:00.0 (1)'; lines that name no GPU are counted apart."""
    counts: dict[str, int] = {}
    for finding in found:
        key = finding.bdf or "no GPU named"
        counts[key] = counts.get(key, 0) + 1
    groups = ", ".join(f"{bdf} ({n})" for bdf, n in counts.items())
    return f"{len(found)} line(s) on {groups}"


def _aer_context(aer: list[Any]) -> str:
    if not aer:
        return "no PCIe AER line in the log, so not a link error"
    devices = ", ".join(sorted({a.bdf for a in aer if a.bdf})) or "no device named"
    return f"PCIe AER logged {len(aer)} line(s) too ({devices}): check the link"


# ---------------------------------------------------------------- known issues

# The reason codes of a known issue's findings (data/codes.yaml); the finding names the issue.
DETECTED = "KNOWN_ISSUE_DETECTED"
TRIGGERED = "KNOWN_ISSUE_TRIGGERED"
APPLIES = "KNOWN_ISSUE_APPLIES"
WORKAROUND_MISSING = "KNOWN_ISSUE_WORKAROUND_MISSING"


def rule_known_issues(d: Diagnosis) -> None:
    """List the known issues that apply to the node; a finding for each that is active here.

    Active: a blocking issue on the release the bundle shows, an environment that re-creates an
    issue (its trigger in env.txt), a workaround the environment lacks, evidence lines in the
    bundle's files, or a named detector's condition in amd-smi's metrics.
    """
    from r9700ctl.known_issues import NodeView, applicable, issues

    env_seen = d.bundle.has("env.txt")
    env = {name: value for name, (value, _) in read_env(d.bundle).items()} if env_seen else None
    node = NodeView(gpus=tuple((g.pci_id, g.gfx) for g in d.amd_gpus), rocm=d.versions.get("rocm"), env=env)
    for found in applicable(issues(d.manifest), node):
        issue = found.issue
        evidence = _bundle_evidence(d, issue.detection.get("bundle") or {})
        detected = _detector(d, issue.detection.get("detector"))
        d.known_issues.append({**found.to_dict(), "evidence": [e.to_dict() for e in evidence + detected]})
        where = issue.gpus_text() + (f", ROCm {d.versions['rocm']}" if found.release_known else "")
        fix = f"{_flat(issue.workaround.get('advice', ''))} (see {', '.join(issue.sources)})"
        finding_id = f"known_issue.{issue.id}"
        if detected:
            d.add(finding_id, FAIL, f"known issue {issue.id}: {issue.title}", fix, detected, code=DETECTED)
        elif issue.false_signal:
            continue
        elif issue.trigger_env and found.triggered:
            severity = FAIL if found.gpus > 1 else WARN
            detail = f"the environment re-creates known issue {issue.id}: {issue.title}"
            found_env = _unique(_env_evidence(d, issue.trigger_env) + evidence)
            d.add(finding_id, severity, detail, fix, found_env, code=TRIGGERED)
        elif evidence:
            d.add(
                finding_id,
                WARN,
                f"known issue {issue.id} ({where}): {issue.title}",
                fix,
                evidence,
                code=DETECTED,
            )
        elif issue.blocking and found.release_known and found.active:
            unknown = "" if env_seen else " (env.txt is missing, so whether its workaround is set is unknown)"
            d.add(
                finding_id,
                WARN,
                f"known issue {issue.id} applies to this node ({where}): {issue.title}{unknown}",
                fix,
                [_rocm_evidence(d)],
                code=APPLIES,
            )
        elif (
            env_seen
            and issue.workaround_env
            and not found.mitigated
            and found.triggered
            and (found.release_known or issue.every_release)
        ):
            missing = ", ".join(f"{k}={v}" for k, v in issue.workaround_env.items())
            d.add(
                finding_id,
                WARN if issue.applied_by_default else NOTE,
                f"known issue {issue.id} applies to this node ({where}) and its workaround {missing} "
                f"is not in env.txt: {issue.title}",
                fix,
                [Evidence("env.txt", None, f"no {missing}")],
                code=WORKAROUND_MISSING,
            )


def _bundle_evidence(d: Diagnosis, patterns: dict[str, str]) -> list[Evidence]:
    found = []
    for name, pattern in patterns.items():
        regex = re.compile(pattern)
        for number, line in enumerate(d.bundle.lines(name), start=1):
            if regex.search(line):
                found.append(Evidence(name, number, line.strip()))
    return found


def _env_evidence(d: Diagnosis, trigger: dict[str, str]) -> list[Evidence]:
    env = read_env(d.bundle)
    return [Evidence("env.txt", env[name][1], f"{name}={env[name][0]}") for name in trigger if name in env]


def _rocm_evidence(d: Diagnosis) -> Evidence:
    from r9700ctl.bundle.rules_software import rocm_version

    found = rocm_version(d)
    return found[1] if found else Evidence(RCCL_LOG, None, f"ROCm {d.versions.get('rocm')}")


def _detector(d: Diagnosis, spec: dict[str, Any] | None) -> list[Evidence]:
    """A named detector's condition in the bundle; only fan_stopped_under_load exists today."""
    if not spec or spec.get("name") != "fan_stopped_under_load":
        return []
    from r9700ctl.agent.parsers import amdsmi

    if not d.bundle.has("amd-smi-metric.json"):
        return []
    report = d.bundle.parsed("amd-smi-metric.json", amdsmi.parse)
    found = []
    for gpu in getattr(report, "gpus", None) or []:
        rpm, hot, power = gpu.fan_rpm, gpu.temperature_hotspot_c, gpu.power_w
        if rpm is None or hot is None or power is None:
            continue
        if rpm <= spec["max_fan_rpm"] and hot >= spec["min_hotspot_c"] and power >= spec["min_power_w"]:
            text = f"GPU {gpu.bdf or gpu.index}: fan {rpm:g} rpm at hotspot {hot:g} C and {power:g} W"
            found.append(Evidence("amd-smi-metric.json", None, text))
    return found


def _unique(evidence: list[Evidence]) -> list[Evidence]:
    seen: set[tuple[str, int | None]] = set()
    return [e for e in evidence if (e.file, e.line) not in seen and not seen.add((e.file, e.line))]


def _flat(text: Any) -> str:
    return " ".join(str(text).split())
