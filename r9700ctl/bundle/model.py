"""What a bundle diagnosis returns: GPUs, versions, findings with evidence, and what it could not judge."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from r9700ctl.agent import schemas
from r9700ctl.agent.result import EXIT_CODES, FAIL, INCONCLUSIVE, PASS, SEVERITY, SKIP, WARN, CheckResult
from r9700ctl.agent.result import finding as result_finding
from r9700ctl.agent.units import MIB, size_text

SCHEMA = schemas.DOCTOR

# The files a bundle may hold (all optional), as `r9700ctl collect` names them (roles/r9700_collect).
BUNDLE_FILES = (
    "os-release",
    "uname.txt",
    "cmdline.txt",
    "lspci.txt",
    "lsmod.txt",
    "dkms-status.txt",
    "rocminfo.txt",
    "amd-smi-static.json",
    "amd-smi-metric.json",
    "amd-smi-list.json",
    "amd-smi-topology.json",
    "amd-smi.txt",
    "rocm-smi.json",
    "rocm-smi-topo.txt",
    "nvidia-smi.xml",
    "dmesg.txt",
    "env.txt",
    "id.txt",
    # dpkg-query -W of amdgpu*, rocm*, hip*, rccl* (name, version, status) and /opt/rocm/.info/version
    "packages.txt",
    "rocm-version.txt",
    # PCIe AER counters: `grep -H .` of every /sys/devices/**/aer_dev_* (r9700ctl/agent/parsers/aer.py)
    "aer.txt",
)
# Not collected (RCCL prints it only while a job runs): a job's output with NCCL_DEBUG=WARN or INFO,
# saved into the bundle by whoever saw RCCL misbehave.
RCCL_LOG = "rccl.log"
COLLECT_MANIFEST = "collect.json"  # `r9700ctl collect`: each command, its exit status, why a file is missing
MISSING_LIST = "MISSING.txt"
KNOWN_NAMES = (*BUNDLE_FILES, RCCL_LOG, COLLECT_MANIFEST, MISSING_LIST)

# A finding is a CheckResult (agent/result.py, the one verdict model): FAIL, WARN, or SKIP for a
# note (reported only). Doctor names a note "INFO", as it always has, in its table and its JSON
# `severity` (doctor/1 keeps its fields; `status` and `code` stand beside them).
INFO = "INFO"
NOTE = SKIP
NOT_JUDGED_ID = "bundle.not_judged"

AMD = "1002"
NVIDIA = "10de"


@dataclass(frozen=True)
class Evidence:
    """Where a finding comes from: a file, the 1-based line when one line says it, and that line."""

    file: str
    line: int | None
    text: str = ""

    def location(self) -> str:
        return f"{self.file}:{self.line}" if self.line else self.file

    def to_dict(self) -> dict[str, Any]:
        return {"file": self.file, "line": self.line, "text": self.text}


def finding(
    id: str, status: str, detail: str, fix: str = "", evidence: list[Evidence] | None = None, *, code: str
) -> CheckResult:
    """A finding of a bundle rule: what was found (`detail`), the fix (the verdict's hint), the lines
    that show it (evidence["lines"]) and its reason code."""
    return result_finding(id, status, detail, fix, {"lines": list(evidence or [])}, code=code)


def severity(result: CheckResult) -> str:
    """The bundle's word for a finding's status: FAIL, WARN, or INFO for a note."""
    return INFO if result.status == NOTE else result.status


def lines(result: CheckResult) -> list[Evidence]:
    """The file:line evidence of a finding."""
    return list(result.evidence.get("lines") or [])


def evidence_text(result: CheckResult, limit: int = 3) -> str:
    found = lines(result)
    shown = [e.location() for e in found[:limit]]
    more = len(found) - limit
    return ", ".join(shown) + (f" (+{more} more)" if more > 0 else "")


def finding_dict(result: CheckResult) -> dict[str, Any]:
    """A finding in doctor's JSON (r9700ctl.doctor/1): its fields of old, then status, code and hint."""
    return {
        "id": result.id,
        "severity": severity(result),
        "detail": result.detail,
        "fix": result.hint,
        "evidence": [e.to_dict() for e in lines(result)],
        "status": result.status,
        "code": result.code,
    }


def not_judged(topic: str, files: tuple[str, ...], reason: str = "", because: str = "") -> CheckResult:
    """A question the bundle could not answer: INCONCLUSIVE, with the files that would have answered
    it and why they did not (`reason`: why collect could not record them, from MISSING.txt;
    `because`: the file is there but cannot answer, e.g. lspci run without root)."""
    if because:
        text = f"could not judge {topic}: {because}"
    else:
        names = " or ".join(files)
        verb = "is" if len(files) == 1 else "are"
        text = f"could not judge {topic} because {names} {verb} missing"
        text = f"{text} ({reason})" if reason else text
    return CheckResult(
        id=NOT_JUDGED_ID,
        subject="node",
        status=INCONCLUSIVE,
        detail=text,
        hint="record the bundle again with `r9700ctl collect` (it runs every command as root)",
        evidence={"topic": topic, "files": list(files), "reason": reason, "because": because},
        code="BUNDLE_FILE_CANNOT_ANSWER" if because else "BUNDLE_FILE_MISSING",
    )


def not_judged_dict(result: CheckResult) -> dict[str, Any]:
    """A question left open, in doctor's JSON: topic, files, reason, text (and its code)."""
    facts = result.evidence
    return {
        "topic": facts["topic"],
        "files": list(facts["files"]),
        "reason": facts.get("reason") or facts.get("because") or "",
        "text": result.detail,
        "code": result.code,
    }


@dataclass
class BundleGpu:
    """One GPU as the bundle's files describe it; `seen_in` names the files that list it."""

    bdf: str | None
    vendor: str | None = None  # "1002", "10de"
    pci_id: str | None = None  # "1002:7551"
    name: str | None = None
    gfx: str | None = None
    vram_mib: float | None = None
    discrete: bool | None = None
    seen_in: list[str] = field(default_factory=list)
    evidence: Evidence | None = None
    # `gfx` is the chip's true target (from its PCI id where the manifest knows it); a tool
    # that printed another one (rocminfo under HSA_OVERRIDE_GFX_VERSION) is kept apart here.
    gfx_from: str | None = None  # the file `gfx` was first read from
    reported_gfx: str | None = None  # what that file printed, when it is not the true target
    gfx_ip: str | None = None  # amdgpu's GFX IP block from dmesg.txt ("gfx_v12_0")

    def to_dict(self) -> dict[str, Any]:
        return {
            "bdf": self.bdf,
            "vendor": self.vendor,
            "pci_id": self.pci_id,
            "name": self.name,
            "gfx": self.gfx,
            "reported_gfx": self.reported_gfx,
            "vram_gib": round(self.vram_mib / 1024, 1) if self.vram_mib else None,
            "discrete": self.discrete,
            "seen_in": self.seen_in,
        }


@dataclass
class BundleReport:
    """The diagnosis of one node's bundle."""

    path: Path
    node: str
    files: list[str]
    gpus: list[BundleGpu]
    versions: dict[str, str]
    findings: list[CheckResult]
    not_judged: list[CheckResult]  # INCONCLUSIVE: a question the files left open
    known_issues: list[dict[str, Any]] = field(default_factory=list)  # that apply to this node
    # The rules (checks) whose question the files answered, and those that left one open.
    judged: list[str] = field(default_factory=list)
    unjudged: list[str] = field(default_factory=list)

    @property
    def status(self) -> str:
        """A finding's severity; else PASS only where there is something to vouch for.

        PASS needs GPUs and most checks judged: a bundle without a file listing a GPU, or one
        whose files answer no more checks than they leave open (rocminfo.txt alone answers 6
        or 7 of 15), is INCONCLUSIVE, never PASS. A FAIL or WARN that was found stands however little
        else was judged. As in validate, what could not be judged is never counted as passed.
        """
        worst = max(
            (f.status for f in self.findings if f.status in (FAIL, WARN)), key=SEVERITY.get, default=PASS
        )
        if worst == PASS and (not self.gpus or self.too_little_judged):
            return INCONCLUSIVE
        return worst

    @property
    def too_little_judged(self) -> bool:
        return bool(self.unjudged) and len(self.unjudged) >= len(self.judged)

    @property
    def exit_code(self) -> int:
        """validate's contract (README "Exit codes"): INCONCLUSIVE is 4, not "could not run"."""
        return EXIT_CODES[self.status]

    def overview_lines(self) -> list[str]:
        lines = []
        discrete = [g for g in self.gpus if g.discrete is not False]
        if self.gpus:
            lines.append(f"GPUs: {len(discrete)} discrete{_gpu_groups(discrete)}")
            for gpu in self.gpus:
                vram = f", {size_text(gpu.vram_mib * MIB)}" if gpu.vram_mib else ""
                kind = "" if gpu.discrete is not False else ", integrated"
                shown = f" (rocminfo: {gpu.reported_gfx})" if gpu.reported_gfx else ""
                about = f"{gpu.pci_id or '?'}, {gpu.gfx or '?'}{shown}{vram}{kind}"
                lines.append(f"  {gpu.bdf or '?'}  {gpu.name or '?'} ({about})")
        else:
            lines.append("GPUs: none found in the files present")
        if self.versions:
            lines.append("versions: " + ", ".join(f"{k} {v}" for k, v in self.versions.items()))
        for item in self.known_issues:
            lines.append(f"known issue {item['id']}: {_standing(item)}; workaround {item['workaround']}")
            lines.append(f"  {item['title']} ({item['sources'][0]})")
        return lines

    def summary(self) -> str:
        counts = {s: sum(1 for f in self.findings if severity(f) == s) for s in (FAIL, WARN, INFO)}
        why = ""
        if self.status == INCONCLUSIVE and not self.gpus:
            why = ": no file in it lists the node's GPUs, so nothing about them was judged"
        elif self.status == INCONCLUSIVE:
            total = len(self.judged) + len(self.unjudged)
            why = (
                f": its files answer {len(self.judged)} of {total} checks, too few to call the node "
                "healthy (`r9700ctl collect` records a full bundle)"
            )
        return (
            f"{self.node}: {self.status} ({counts[FAIL]} failed, {counts[WARN]} warnings, "
            f"{counts[INFO]} notes, {len(self.not_judged)} not judged){why}"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": str(self.path),
            "node": self.node,
            "status": self.status,
            "exit_code": self.exit_code,
            "files": self.files,
            "gpus": [g.to_dict() for g in self.gpus],
            "versions": self.versions,
            "findings": [finding_dict(f) for f in self.findings],
            "not_judged": [not_judged_dict(n) for n in self.not_judged],
            "checks": {"judged": self.judged, "not_judged": self.unjudged},
            "known_issues": self.known_issues,
        }


@dataclass
class FleetBundleReport:
    """One bundle, or every node's bundle of a `collect --out` directory."""

    path: Path
    bundles: list[BundleReport]

    @property
    def exit_code(self) -> int:
        """The worst bundle's code, ranked as validate ranks a fleet: a FAIL found on one node
        outranks another node's INCONCLUSIVE (a numerically larger code)."""
        statuses = [b.status for b in self.bundles]
        return EXIT_CODES[max(statuses, key=SEVERITY.__getitem__)] if statuses else 0

    def summary(self) -> str:
        failed = [b.node for b in self.bundles if b.status == FAIL]
        warned = [b.node for b in self.bundles if b.status == WARN]
        unjudged = [b.node for b in self.bundles if b.status == INCONCLUSIVE]
        passed = len(self.bundles) - len(failed) - len(warned) - len(unjudged)
        text = (
            f"{len(self.bundles)} bundles: {passed} passed, {len(failed)} failed, "
            f"{len(warned)} with warnings only"
        )
        text += f", {len(unjudged)} inconclusive" if unjudged else ""
        named = [f"failed: {', '.join(failed)}"] if failed else []
        named += (
            [f"inconclusive (no GPU listed, or too few checks judged): {', '.join(unjudged)}"]
            if unjudged
            else []
        )
        return text + (f" ({'; '.join(named)})" if named else "")

    def to_dict(self) -> dict[str, Any]:
        from r9700ctl import __version__

        return {
            "schema": SCHEMA,
            "mode": "bundle",
            "toolkit_version": __version__,
            "path": str(self.path),
            "exit_code": self.exit_code,
            "bundles": [b.to_dict() for b in self.bundles],
        }


def _standing(item: dict[str, Any]) -> str:
    """How a known issue stands on the node, in a few words."""
    trigger = " and ".join(f"{k}={v}" for k, v in (item.get("trigger_env") or {}).items())
    if item["false_signal"]:
        return "applies (a false signal: ignore it)"
    if item["evidence"]:
        return "applies, evidence in the bundle"
    if item["triggered"] is False:
        return f"only when {trigger} is set (it is not)"
    if item["triggered"] is None:
        return f"applies when {trigger} is set (env.txt missing)"
    if item["mitigated"]:
        return "applies, workaround in force"
    if not item["release_known"]:
        return "may apply (the bundle names no ROCm version)"
    return "applies" + (" (env.txt missing: workaround unknown)" if item["mitigated"] is None else "")


def _gpu_groups(gpus: list[BundleGpu]) -> str:
    groups: dict[str, int] = {}
    for gpu in gpus:
        key = f"{gpu.name or gpu.pci_id or '?'} ({gpu.gfx or '?'})"
        groups[key] = groups.get(key, 0) + 1
    return ": " + ", ".join(f"{n} x {k}" for k, n in groups.items()) if groups else ""
