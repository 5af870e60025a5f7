"""Known issues of data/manifest.yaml (`known_issues`): which apply to a node, and what to say.

Standard library only: the agent judges its own node with it, and the controller (preflight's
`auto` release choice, doctor, `r9700ctl known-issues`) imports it too, so a node is matched the
same way everywhere. The documents come from whoever loaded the manifest (PyYAML on the
controller, the agent's own reader on a node); nothing here reads files.

An issue applies to a node when enough of its GPUs are covered (`applies_to.gfx` or `.gpus`,
at least `min_gpus`) and the node's ROCm release is in the issue's range (a node whose release
is not known yet is matched on its GPUs only, and says so). An issue with an environment trigger
(`applies_to.env`) is *active* only when the node's environment has it; an issue whose
workaround variables are all set is *mitigated*.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from r9700ctl.agent.result import QUIET

_VERSION = re.compile(r"^\s*v?(\d+)(?:\.(\d+))?(?:\.(\d+))?")


def version_tuple(text: str | None) -> tuple[int, int, int] | None:
    """(major, minor, patch) of "7.2", "7.2.1" or "7.1.1.70101-38~24.04"; None when not a version."""
    match = _VERSION.match(str(text or ""))
    if not match:
        return None
    return tuple(int(part or 0) for part in match.groups())  # type: ignore[return-value]


@dataclass(frozen=True)
class KnownIssue:
    """One entry of the manifest's `known_issues`, keyed by its id."""

    id: str
    title: str
    sources: tuple[str, ...]
    gfx: tuple[str, ...] = ()
    gpus: tuple[str, ...] = ()
    rocm_min: str | None = None
    rocm_below: str | None = None
    min_gpus: int = 1
    trigger_env: dict[str, str] = field(default_factory=dict)
    blocking: bool = False
    false_signal: bool = False
    effect: str = ""
    detection: dict[str, Any] = field(default_factory=dict)
    workaround: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_entry(cls, issue_id: str, entry: Mapping[str, Any]) -> KnownIssue:
        applies = entry.get("applies_to") or {}
        rocm = applies.get("rocm") or {}
        return cls(
            id=issue_id,
            title=str(entry.get("title", "")),
            sources=tuple(entry.get("sources") or ()),
            gfx=tuple(applies.get("gfx") or ()),
            gpus=tuple(str(p).lower() for p in applies.get("gpus") or ()),
            rocm_min=str(rocm["min"]) if rocm.get("min") else None,
            rocm_below=str(rocm["below"]) if rocm.get("below") else None,
            min_gpus=int(applies.get("min_gpus") or 1),
            trigger_env={str(k): str(v) for k, v in (applies.get("env") or {}).items()},
            blocking=bool(entry.get("blocking")),
            false_signal=bool(entry.get("false_signal")),
            effect=" ".join(str(entry.get("effect", "")).split()),
            detection=dict(entry.get("detection") or {}),
            workaround=dict(entry.get("workaround") or {}),
        )

    # ------------------------------------------------------------ what it covers

    def covers_gpu(self, pci_id: str | None = None, gfx: str | None = None) -> bool:
        if self.gpus:
            return bool(pci_id) and str(pci_id).lower() in self.gpus
        return bool(gfx) and gfx in self.gfx

    def covers_release(self, version: str | None) -> bool | None:
        """True/False for a known release, None when the version is unknown or unreadable."""
        have = version_tuple(version)
        if have is None:
            return None
        low, high = version_tuple(self.rocm_min), version_tuple(self.rocm_below)
        return (low is None or have >= low) and (high is None or have < high)

    @property
    def every_release(self) -> bool:
        return self.rocm_min is None and self.rocm_below is None

    def gpus_text(self) -> str:
        what = " or ".join(self.gpus or self.gfx)
        return f"{self.min_gpus} or more {what}" if self.min_gpus > 1 else what

    def releases_text(self) -> str:
        if self.every_release:
            return "every ROCm release"
        if self.rocm_min and self.rocm_below:
            return f"ROCm {self.rocm_min} to before {self.rocm_below}"
        if self.rocm_min:
            return f"ROCm {self.rocm_min} and later"
        return f"ROCm before {self.rocm_below}"

    # ------------------------------------------------------------ workaround

    @property
    def workaround_env(self) -> dict[str, str]:
        return {str(k): str(v) for k, v in (self.workaround.get("env") or {}).items()}

    @property
    def applied_by_default(self) -> bool:
        return bool(self.workaround.get("default"))

    @property
    def policy(self) -> str | None:
        """The role variable that applies the workaround (its owner renders it), if any."""
        value = self.workaround.get("policy")
        return str(value) if value else None

    def workaround_short(self) -> str:
        """The workaround in a few words: the variables, else the release, else the advice."""
        parts = [f"{k}={v}" for k, v in self.workaround_env.items()]
        if self.workaround.get("release"):
            parts.append(f"ROCm {self.workaround['release']}")
        if parts:
            return " or ".join(parts)
        advice = " ".join(str(self.workaround.get("advice", "")).split())
        return re.split(r"(?<=[a-z0-9)])[.;] ", advice, maxsplit=1)[0].rstrip(".")

    def hint(self) -> str:
        """How a check names this issue: "known issue ID: title; workaround ...; see URL"."""
        workaround = self.workaround_short()
        return f"known issue {self.id}: {self.title}; workaround {workaround}; see {self.sources[0]}"

    def mitigated_by(self, env: Mapping[str, str] | None) -> bool | None:
        """Whether every workaround variable is set as the workaround says; None if env is unknown."""
        wanted = self.workaround_env
        if not wanted:
            return False
        if env is None:
            return None
        return all(str(env.get(k, "")).strip() == v for k, v in wanted.items())

    def triggered_by(self, env: Mapping[str, str] | None) -> bool | None:
        """Whether the environment trigger is present (True when the issue has none)."""
        if not self.trigger_env:
            return True
        if env is None:
            return None
        return all(str(env.get(k, "")).strip() == v for k, v in self.trigger_env.items())

    # ------------------------------------------------------------ agent

    @property
    def agent_checks(self) -> tuple[str, ...]:
        return tuple((self.detection.get("agent") or {}).get("checks") or ())

    def names_result(self, check_id: str, text: str, codes: Iterable[str] = ()) -> bool:
        """Whether a check result (its id, its reason codes, and its hint and evidence as text) is
        evidence of this issue: detection.agent names the check, the codes (any of them) and a pattern
        of the text, each where given."""
        if check_id not in self.agent_checks:
            return False
        agent = self.detection.get("agent") or {}
        wanted = agent.get("codes")
        if wanted and not set(wanted) & set(codes):
            return False
        pattern = agent.get("evidence")
        return not pattern or re.search(pattern, text) is not None


@dataclass(frozen=True)
class NodeView:
    """What is known about a node: its GPUs as (PCI id, gfx) pairs, its ROCm release and environment.

    `rocm` None: not installed or not known yet; `env` None: the environment was not seen.
    """

    gpus: tuple[tuple[str | None, str | None], ...]
    rocm: str | None = None
    env: Mapping[str, str] | None = None


@dataclass(frozen=True)
class Match:
    """A known issue that applies to a node, and how it stands there."""

    issue: KnownIssue
    gpus: int  # the node's GPUs the issue covers
    release_known: bool  # False: matched on the GPUs alone
    triggered: bool | None  # the environment trigger is present (None: env not seen)
    mitigated: bool | None  # the workaround variables are set (None: env not seen)

    @property
    def active(self) -> bool:
        """It can bite: triggered (or not known to be untriggered) and not known to be mitigated."""
        return self.triggered is not False and self.mitigated is not True

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.issue.id,
            "title": self.issue.title,
            "gpus": self.gpus,
            "release_known": self.release_known,
            "triggered": self.triggered,
            "mitigated": self.mitigated,
            "active": self.active,
            "trigger_env": dict(self.issue.trigger_env),
            "blocking": self.issue.blocking,
            "false_signal": self.issue.false_signal,
            "workaround": self.issue.workaround_short(),
            "sources": list(self.issue.sources),
        }


def load(document: Mapping[str, Any] | None) -> list[KnownIssue]:
    """The manifest's known issues, in the manifest's order; [] when it has none."""
    entries = (document or {}).get("known_issues") or {}
    return [KnownIssue.from_entry(str(key), value or {}) for key, value in entries.items()]


def match(issue: KnownIssue, node: NodeView) -> Match | None:
    """The issue's standing on the node, or None when it does not apply (GPUs or release)."""
    covered = sum(1 for pci_id, gfx in node.gpus if issue.covers_gpu(pci_id, gfx))
    if covered == 0 or covered < issue.min_gpus:
        return None
    in_range = issue.covers_release(node.rocm)
    if in_range is False:
        return None
    return Match(
        issue=issue,
        gpus=covered,
        release_known=in_range is not None,
        triggered=issue.triggered_by(node.env),
        mitigated=issue.mitigated_by(node.env),
    )


def applicable(issues: Iterable[KnownIssue], node: NodeView) -> list[Match]:
    return [m for m in (match(issue, node) for issue in issues) if m is not None]


def hints_for(
    issues: Iterable[KnownIssue], node: NodeView, check_id: str, text: str, codes: Iterable[str] = ()
) -> list[str]:
    """The hints of the issues that apply to the node and whose detection this result matches."""
    codes = tuple(codes)
    return [m.issue.hint() for m in applicable(issues, node) if m.issue.names_result(check_id, text, codes)]


def annotate(results: Iterable[Any], issues: Iterable[KnownIssue], node: NodeView) -> None:
    """Name, in each result that did not pass, the known issues it is evidence of.

    A result is evidence of an issue that can bite on this node (Match.active: triggered, not
    mitigated) when the issue's detection.agent lists its check id and, where the issue gives a
    pattern, its hint or evidence shows it. The issue's hint (id, workaround, source) is appended
    to the result's hint and its id to evidence["known_issues"]. Statuses never change here; a
    known-false signal (the hotspot bit) is named by the check that ignores it, not here.
    """
    found = [m for m in applicable(issues, node) if m.active and not m.issue.false_signal]
    if not found:
        return
    for result in results:
        if result.status in QUIET:  # a pass or a note is evidence of nothing
            continue
        text: str | None = None
        for m in found:
            issue = m.issue
            if result.id not in issue.agent_checks:
                continue
            if text is None:  # built once, only for results a known issue watches
                text = f"{result.hint}\n{_flat(result.evidence)}"
            codes = result.evidence.get("codes") or [result.code]
            if f"known issue {issue.id}" in result.hint or not issue.names_result(result.id, text, codes):
                continue
            result.evidence.setdefault("known_issues", []).append(issue.id)
            result.hint = f"{result.hint}; {issue.hint()}" if result.hint else issue.hint()


def _flat(evidence: Any) -> str:
    """The evidence's strings (errors, log lines) as one text for detection patterns."""
    if isinstance(evidence, str):
        return evidence
    if isinstance(evidence, Mapping):
        return "\n".join(_flat(v) for v in evidence.values())
    if isinstance(evidence, (list, tuple)):
        return "\n".join(_flat(v) for v in evidence)
    return ""
