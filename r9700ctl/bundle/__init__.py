"""Offline diagnosis of support bundles: what is wrong with a node, from its recorded tool outputs.

A bundle is a directory of files with fixed names (model.BUNDLE_FILES, written by `r9700ctl collect`);
`r9700ctl collect` writes one per node, customers send them to support. Every file is optional.
The parsers in r9700ctl.agent.parsers read the tools' outputs and never raise; here the GPUs are
found in whichever files are there (gpus.py), and each rule (rules_hardware.py, rules_software.py)
checks one thing against data/manifest.yaml (rules_known.py: its known issues and kernel-log
signatures) and adds findings with severity, evidence (file:line)
and the fix, or says what it could not judge because a file is missing. A file that does not parse
becomes the finding "could not read FILE: reason". Nothing here prints or raises on odd input; a bad
--bundle path is bad input (BadInput, exit 64).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from r9700ctl.agent.result import SEVERITY
from r9700ctl.bundle import rules_hardware as hardware
from r9700ctl.bundle import rules_known as known
from r9700ctl.bundle import rules_software as software
from r9700ctl.bundle.files import BundleFiles, Diagnosis
from r9700ctl.bundle.gpus import discover_gpus
from r9700ctl.bundle.model import (
    BUNDLE_FILES,
    COLLECT_MANIFEST,
    MISSING_LIST,
    RCCL_LOG,
    SCHEMA,
    WARN,
    BundleGpu,
    BundleReport,
    Evidence,
    FleetBundleReport,
    evidence_text,
    finding_dict,
    lines,
    severity,
)
from r9700ctl.errors import BadInput

__all__ = [
    "BUNDLE_FILES",
    "COLLECT_MANIFEST",
    "MISSING_LIST",
    "RCCL_LOG",
    "RULES",
    "SCHEMA",
    "BundleGpu",
    "BundleReport",
    "Evidence",
    "FleetBundleReport",
    "diagnose_bundle",
    "diagnose_path",
    "evidence_text",
    "finding_dict",
    "is_bundle",
    "lines",
    "severity",
]

# Order matters only for reading: versions (kernel) before DKMS, GPUs before everything.
RULES: tuple[Callable[[Diagnosis], None], ...] = (
    hardware.rule_gpus_found,
    hardware.rule_integrated_gpu,
    hardware.rule_unknown_models,
    software.rule_versions,
    software.rule_rocm_runtime,
    software.rule_driver_bound,
    software.rule_hsa_override,
    hardware.rule_iommu,
    hardware.rule_pcie,
    hardware.rule_aer,
    software.rule_dkms,
    known.rule_dmesg,
    software.rule_groups,
    software.rule_rccl,
    known.rule_known_issues,
)


def diagnose_path(path: Path) -> FleetBundleReport:
    """Diagnose DIR: one node's bundle, or a directory holding one bundle per node (collect --out)."""
    if not path.exists():
        raise BadInput(
            what="bundle directory not found",
            where=str(path),
            hint="give the directory `r9700ctl collect --out` wrote, or one node's directory in it",
        )
    if not path.is_dir():
        raise BadInput(
            what="--bundle needs a directory, this is a file",
            where=str(path),
            hint="put the recorded files (rocminfo.txt, lspci.txt, ...) in a directory and give that",
        )
    if is_bundle(path):
        return FleetBundleReport(path=path, bundles=[diagnose_bundle(path)])
    try:
        nodes = sorted(p for p in path.iterdir() if p.is_dir() and is_bundle(p))
    except OSError as exc:
        raise BadInput(what=f"cannot list the directory: {exc.strerror or exc}", where=str(path)) from exc
    if not nodes:
        raise BadInput(
            what="no bundle files here or in its subdirectories",
            where=str(path),
            hint=f"a bundle holds files such as {', '.join(BUNDLE_FILES[:4])}; "
            "`r9700ctl collect INVENTORY --out DIR` writes them",
        )
    return FleetBundleReport(path=path, bundles=[diagnose_bundle(p) for p in nodes])


def is_bundle(directory: Path) -> bool:
    """A directory with any bundle file (or collect's MISSING.txt); collect.json alone is not one, since
    the name is also what `collect --json` writes next to the host directories."""
    try:
        return any((directory / name).is_file() for name in (*BUNDLE_FILES, RCCL_LOG, MISSING_LIST))
    except OSError:
        return False


def diagnose_bundle(directory: Path) -> BundleReport:
    """Every rule over one node's bundle; unreadable files become findings, missing ones 'not judged'."""
    from r9700ctl import manifest

    diagnosis = Diagnosis(BundleFiles(directory), manifest.load())
    diagnosis.gpus = discover_gpus(diagnosis)
    judged: list[str] = []
    unjudged: list[str] = []
    for rule in RULES:
        open_before = len(diagnosis.not_judged)
        try:
            rule(diagnosis)
        except Exception as exc:  # content nobody foresaw: say so, and let the other rules speak
            diagnosis.add(
                "bundle.rule_error",
                WARN,
                f"{rule.__name__} stopped on unexpected content ({type(exc).__name__}: {exc})",
                fix="send this bundle to r9700ctl's maintainers; the other findings stand",
                code="BUNDLE_RULE_ERROR",
            )
        # A check is judged when its files answered it: it left no question open.
        name = rule.__name__.removeprefix("rule_")
        (judged if len(diagnosis.not_judged) == open_before else unjudged).append(name)
    _read_the_rest(diagnosis.bundle)
    findings = diagnosis.bundle.unreadable_findings() + diagnosis.findings
    findings.sort(key=lambda f: -SEVERITY[f.status])  # stable: rule order within a status
    return BundleReport(
        path=directory,
        node=diagnosis.bundle.node_name(),
        files=diagnosis.bundle.present(),
        gpus=diagnosis.gpus,
        versions=diagnosis.versions,
        findings=findings,
        not_judged=diagnosis.not_judged,
        known_issues=diagnosis.known_issues,
        judged=judged,
        unjudged=unjudged,
    )


def _read_the_rest(bundle: BundleFiles) -> None:
    """Files no rule needed still get read (and the topologies parsed), so a garbled one is named."""
    from r9700ctl.agent.parsers import amdsmi, rocmsmi

    bundle.parsed("amd-smi-topology.json", amdsmi.parse)
    bundle.parsed("rocm-smi-topo.txt", rocmsmi.parse_topo)
    for name in bundle.present():
        bundle.text(name)
