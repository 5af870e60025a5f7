"""Known issues for the controller: look-ups, the `auto` release choice, JSON and Markdown.

The entries live in data/manifest.yaml (`known_issues`, `kernel_log_signatures`); matching a node
is r9700ctl.agent.known_issue_match (shared with the agent). Here: filters for `r9700ctl known-issues`,
the release `auto` picks when known issues block newer ones, and docs/known-issues.md.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from r9700ctl.agent import schemas
from r9700ctl.agent.known_issue_match import KnownIssue, Match, NodeView, applicable, load, version_tuple
from r9700ctl.errors import BadInput
from r9700ctl.manifest import Manifest

SCHEMA = schemas.KNOWN_ISSUES
DOC_PATH = "docs/known-issues.md"

__all__ = [
    "DOC_PATH",
    "SCHEMA",
    "KnownIssue",
    "Match",
    "NodeView",
    "Signature",
    "applicable",
    "auto_release",
    "issues",
    "select",
    "signatures",
    "to_document",
]


@dataclass(frozen=True)
class Signature:
    """One kind of kernel-log line (the dmesg parser's kind): its severity and reason code, and from
    the code's record (data/codes.yaml) what it means, what to do and its sources."""

    kind: str
    severity: str  # FAIL, WARN, or "none": counted, never a finding alone
    code: str
    meaning: str
    action: str
    sources: tuple[str, ...]


def issues(manifest: Manifest) -> list[KnownIssue]:
    return load(manifest.raw)


def signatures(manifest: Manifest) -> dict[str, Signature]:
    from r9700ctl.agent import codes

    entries = manifest.raw.get("kernel_log_signatures") or {}
    found = {}
    for kind, entry in entries.items():
        record = codes.record(str(entry["code"]))
        found[kind] = Signature(
            kind=kind,
            severity=str(entry["severity"]),
            code=record.code,
            meaning=record.meaning,
            action=record.next,
            sources=tuple(s.strip() for s in record.source.split(", ") if s.strip()),
        )
    return found


# ---------------------------------------------------------------- filters (the CLI)


def gpu_filter(text: str, manifest: Manifest) -> tuple[set[str], set[str], str]:
    """(PCI ids, gfx targets, label) for --gpu: a PCI id (1002:7551), a gfx target or a model name.

    Raises BadInput for a value that names no GPU the manifest knows.
    """
    wanted = text.strip()
    lowered = wanted.lower()
    models = manifest.gpus
    if lowered in models:
        model = models[lowered]
        return {lowered}, {model.gfx}, f"{model.name} ({lowered}, {model.gfx})"
    if lowered.startswith("gfx"):
        known = {m.gfx for m in models.values()} | set(manifest.raw.get("gfx_targets") or {})
        if lowered in known:
            ids = {pci for pci, m in models.items() if m.gfx == lowered}
            return ids, {lowered}, lowered
    named = {pci: m for pci, m in models.items() if lowered and lowered in m.name.lower()}
    if named:
        return set(named), {m.gfx for m in named.values()}, ", ".join(m.name for m in named.values())
    choices = ", ".join(sorted(models)) + " or a gfx target such as gfx1201"
    raise BadInput(
        what=f"--gpu {wanted!r} names no GPU in r9700ctl's manifest",
        hint=f"give a PCI id ({choices}) or part of a model name (R9700)",
    )


def check_version(text: str, known: Sequence[str]) -> str:
    """--rocm as given, when it is a release of the manifest or a line of one (7.1 for 7.1.1).

    A release the manifest does not list would filter nothing away (every "all releases" issue
    still shows), so it reads as an answer while none was given: refused, with the known ones.
    """
    text = text.strip()
    if version_tuple(text) is None or not text[:1].isdigit():
        raise BadInput(
            what=f"--rocm {text!r} is not a ROCm version",
            hint="give a release number such as 7.2.3 or 7.1",
        )
    if not any(name == text or name.startswith(text + ".") for name in known):
        raise BadInput(
            what=f"--rocm {text} is not a ROCm release r9700ctl knows",
            hint=f"give one of {', '.join(known)}, or a line such as {_line(known[-1])}",
        )
    return text


def _line(release: str) -> str:
    return ".".join(release.split(".")[:2])


def select(
    known: Iterable[KnownIssue],
    pci_ids: set[str] | None = None,
    gfx: set[str] | None = None,
    rocm: str | None = None,
) -> list[KnownIssue]:
    """Entries that cover any of the GPUs (by PCI id or gfx target) and the release, when given."""
    chosen = []
    for issue in known:
        if pci_ids is not None or gfx is not None:
            by_id = any(issue.covers_gpu(pci, None) for pci in pci_ids or ())
            by_target = bool(issue.gfx) and bool(set(issue.gfx) & (gfx or set()))
            if not (by_id or by_target):
                continue
        if rocm is not None and issue.covers_release(rocm) is False:
            continue
        chosen.append(issue)
    return chosen


def issue_dict(issue: KnownIssue) -> dict[str, Any]:
    return {
        "id": issue.id,
        "title": issue.title,
        "sources": list(issue.sources),
        "applies_to": {
            "gfx": list(issue.gfx),
            "gpus": list(issue.gpus),
            "rocm": {"min": issue.rocm_min, "below": issue.rocm_below},
            "min_gpus": issue.min_gpus,
            "env": issue.trigger_env,
        },
        "blocking": issue.blocking,
        "false_signal": issue.false_signal,
        "effect": issue.effect,
        "detection": issue.detection,
        "workaround": issue.workaround,
    }


def to_document(selected: Sequence[KnownIssue], filters: dict[str, Any]) -> dict[str, Any]:
    from r9700ctl import __version__

    return {
        "schema": SCHEMA,
        "toolkit_version": __version__,
        "filters": filters,
        "known_issues": [issue_dict(i) for i in selected],
    }


@dataclass
class Listing:
    """`r9700ctl known-issues`: the entries that pass the filters, and the filters as said."""

    issues: list[KnownIssue]
    gpu_label: str  # the --gpu filter as the text names it ("" without one)
    rocm: str | None  # the --rocm release, checked against the manifest

    gpu: str | None = None  # --gpu as given

    def to_dict(self) -> dict[str, Any]:
        return to_document(self.issues, {"gpu": self.gpu, "rocm": self.rocm})


def listing(manifest: Manifest, gpu: str | None = None, rocm: str | None = None) -> Listing:
    """The known issues of a GPU (PCI id, gfx target or model name) and a release; bad filters are
    bad input (exit 64)."""
    pci_ids = gfx = None
    label = ""
    if gpu is not None:
        pci_ids, gfx, label = gpu_filter(gpu, manifest)
    version = check_version(rocm, manifest.release_names()) if rocm is not None else None
    return Listing(select(issues(manifest), pci_ids, gfx, version), label, version, gpu)


# ---------------------------------------------------------------- the `auto` release choice


@dataclass(frozen=True)
class AutoChoice:
    """The release `auto` chose, and the newer ones it skipped with the issues that blocked them."""

    release: str | None
    skipped: tuple[tuple[str, tuple[KnownIssue, ...]], ...] = ()
    all_blocked: bool = False

    def skipped_text(self) -> str:
        return "; ".join(
            f"skipped {release}: " + ", ".join(f"known issue {i.id} ({i.title})" for i in blocking)
            for release, blocking in self.skipped
        )


def auto_release(
    known: Sequence[KnownIssue], gpus: Sequence[tuple[str | None, str | None]], candidates: Sequence[str]
) -> AutoChoice:
    """The newest candidate release (candidates oldest first) with no blocking known issue for these
    GPUs. When every candidate is blocked, the newest is chosen and `all_blocked` says so."""
    skipped = []
    for release in reversed(list(candidates)):
        node = NodeView(gpus=tuple(gpus), rocm=release)
        blocking = tuple(m.issue for m in applicable(known, node) if m.issue.blocking and m.release_known)
        if not blocking:
            return AutoChoice(release, tuple(skipped))
        skipped.append((release, blocking))
    if not candidates:
        return AutoChoice(None)
    return AutoChoice(candidates[-1], tuple(skipped[1:]), all_blocked=True)
