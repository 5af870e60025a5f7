"""Reading one bundle: each file read and parsed once, evidence lines found, missing files explained.

The tool outputs are parsed by r9700ctl.agent.parsers; env.txt and id.txt (plain `env` and `id`
output, which no parser covers) are read by the two tiny adapters at the end.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from r9700ctl.bundle.model import (
    AMD,
    BUNDLE_FILES,
    COLLECT_MANIFEST,
    KNOWN_NAMES,
    MISSING_LIST,
    NVIDIA,
    RCCL_LOG,
    WARN,
    BundleGpu,
    CheckResult,
    Evidence,
    finding,
    not_judged,
)


class BundleFiles:
    """The files of one bundle directory."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._text: dict[str, str | None] = {}
        self._parsed: dict[str, Any] = {}
        self._unreadable: dict[str, str] = {}
        self._why_missing = _missing_reasons(directory)

    def present(self) -> list[str]:
        return [name for name in (*BUNDLE_FILES, RCCL_LOG) if self.has(name)]

    def has(self, name: str) -> bool:
        return (self.directory / name).is_file()

    def text(self, name: str) -> str | None:
        """The file's text; None when it is absent or unreadable (then noted once)."""
        if name not in self._text:
            self._text[name] = None
            if self.has(name):
                from r9700ctl.agent.parsers._common import read_text

                text, error = read_text(self.directory / name)
                if error:
                    self._unreadable.setdefault(name, error)
                self._text[name] = text
        return self._text[name]

    def lines(self, name: str) -> list[str]:
        text = self.text(name)
        return text.splitlines() if text is not None else []

    def parsed(self, name: str, parse: Callable[[str, str], Any]) -> Any:
        """The parser's result for `name`; None when the file is absent or unreadable.

        A result with `.error` is still returned (it may hold what was read before a cut); the
        error becomes a "could not read" finding.
        """
        if name not in self._parsed:
            result = None
            text = self.text(name)
            if text is not None:
                result = parse(text, name)
                error = getattr(result, "error", None)
                if error:
                    self._unreadable.setdefault(name, str(error))
            self._parsed[name] = result
        return self._parsed[name]

    def why_missing(self, name: str) -> str:
        return self._why_missing.get(name, "")

    def mark_unreadable(self, name: str, reason: str) -> None:
        self._unreadable.setdefault(name, reason)

    def unreadable_findings(self) -> list[CheckResult]:
        findings = []
        for name, reason in self._unreadable.items():
            text = reason if reason.startswith("could not read") else f"could not read {name}: {reason}"
            findings.append(
                finding(
                    "bundle.unreadable",
                    WARN,
                    text,
                    f"record {name} again on the node (r9700ctl collect) and check that it is complete",
                    [Evidence(name, None, reason)],
                    code="BUNDLE_FILE_UNREADABLE",
                )
            )
        return findings

    def node_name(self) -> str:
        try:
            manifest = json.loads((self.directory / COLLECT_MANIFEST).read_text(encoding="utf-8"))
            if isinstance(manifest, dict) and manifest.get("host"):
                return str(manifest["host"])
        except (OSError, ValueError):
            pass
        return self.directory.resolve().name


def _missing_reasons(directory: Path) -> dict[str, str]:
    """Why collect could not record a file, from MISSING.txt ("FILE: reason" lines)."""
    try:
        text = (directory / MISSING_LIST).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return {}
    reasons: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith("#") or ": " not in line:
            continue
        name, reason = line.split(": ", 1)
        if name.strip() == "*":  # the whole host: unreachable or failed
            return dict.fromkeys(KNOWN_NAMES, reason.strip())
        reasons[name.strip()] = reason.strip()
    return reasons


def find_line(
    lines: list[str], pattern: str | re.Pattern[str], start: int = 1, end: int | None = None
) -> tuple[int, str] | None:
    """(1-based number, text) of the first line matching `pattern` between lines start and end."""
    regex = re.compile(pattern) if isinstance(pattern, str) else pattern
    stop = len(lines) if end is None else min(end, len(lines))
    for number in range(max(start, 1), stop + 1):
        if regex.search(lines[number - 1]):
            return number, lines[number - 1].strip()
    return None


def evidence_in(
    bundle: BundleFiles, name: str, pattern: str | re.Pattern[str], start: int = 1, end: int | None = None
) -> Evidence:
    """Evidence for a fact read from `name`: the matching line, or the whole file when none matches."""
    found = find_line(bundle.lines(name), pattern, start, end)
    return Evidence(name, found[0], found[1]) if found else Evidence(name, None, "")


def evidence_at(bundle: BundleFiles, name: str, number: int | None) -> Evidence:
    lines = bundle.lines(name)
    if number and 0 < number <= len(lines):
        return Evidence(name, number, lines[number - 1].strip())
    return Evidence(name, None, "")


@dataclass
class Diagnosis:
    """What the rules share: the files, the manifest, the GPUs found, and what they conclude."""

    bundle: BundleFiles
    manifest: Any
    gpus: list[BundleGpu] = field(default_factory=list)
    versions: dict[str, str] = field(default_factory=dict)
    findings: list[CheckResult] = field(default_factory=list)
    not_judged: list[CheckResult] = field(default_factory=list)  # INCONCLUSIVE: questions left open
    known_issues: list[dict[str, Any]] = field(default_factory=list)  # Match.to_dict() + evidence

    def add(
        self,
        id: str,
        status: str,
        detail: str,
        fix: str = "",
        evidence: list[Evidence] | None = None,
        *,
        code: str,
    ) -> None:
        """A finding: FAIL, WARN or NOTE (SKIP, a note), with its reason code (data/codes.yaml)."""
        self.findings.append(finding(id, status, detail, fix, evidence, code=code))

    def cannot_judge(self, topic: str, *files: str, because: str = "") -> None:
        """Record a question left open: the absent files that would answer it, or `because` when the
        files are there but do not say (a default then says so)."""
        missing = tuple(name for name in files if not self.bundle.has(name))
        if not missing and not because:
            because = f"{' and '.join(files)} do not say"
        reasons = [f"{n}: {self.bundle.why_missing(n)}" for n in missing if self.bundle.why_missing(n)]
        self.not_judged.append(not_judged(topic, missing or tuple(files), "; ".join(reasons), because))

    def read_amd(self, name: str, parse: Callable[[str, str], Any], topic: str) -> Any:
        """What a rule about AMD's software reads from `name` (its parser's result), or None: the
        node has NVIDIA GPUs only, the file is absent (the question `topic` is then left open), or
        it could not be read (already a "could not read" finding)."""
        if not self.amd_relevant:
            return None
        if not self.bundle.has(name):
            self.cannot_judge(topic, name)
            return None
        return self.bundle.parsed(name, parse)

    @property
    def discrete_gpus(self) -> list[BundleGpu]:
        return [g for g in self.gpus if g.discrete is not False]

    @property
    def amd_gpus(self) -> list[BundleGpu]:
        return [g for g in self.discrete_gpus if g.vendor == AMD]

    @property
    def amd_relevant(self) -> bool:
        """AMD questions (ROCm, amdgpu DKMS, render group) apply unless the node only has NVIDIA GPUs."""
        return not self.gpus or any(g.vendor != NVIDIA for g in self.gpus)

    @property
    def gfx_targets(self) -> set[str]:
        return {g.gfx for g in self.amd_gpus if g.gfx}


# ---------------------------------------------------------------- env.txt and id.txt adapters


def read_env(bundle: BundleFiles) -> dict[str, tuple[str, int]]:
    """env.txt (`env` output) as NAME -> (value, line); comments and other lines are skipped."""
    values: dict[str, tuple[str, int]] = {}
    for number, line in enumerate(bundle.lines("env.txt"), start=1):
        if line.lstrip().startswith("#"):
            continue
        match = re.match(r"^(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=(.*)$", line.strip())
        if match:
            values[match.group(1)] = (match.group(2).strip().strip("'\""), number)
    return values


def p2p_switched_off(d: Diagnosis) -> tuple[str, Evidence] | None:
    """NCCL_P2P_DISABLE=1 without HSA_FORCE_FINE_GRAIN_PCIE=1 in env.txt: the node's GPUs do not
    talk peer to peer (r9700_p2p's "off" as r9700ctl writes it). None when P2P may be on."""
    env = read_env(d.bundle)
    disable = env.get("NCCL_P2P_DISABLE")
    if disable is None or disable[0] != "1" or env.get("HSA_FORCE_FINE_GRAIN_PCIE", ("", 0))[0] == "1":
        return None
    return "NCCL_P2P_DISABLE", Evidence("env.txt", disable[1], "NCCL_P2P_DISABLE=1")


@dataclass(frozen=True)
class IdLine:
    """`id` output: "uid=1000(ai) gid=1000(ai) groups=1000(ai),44(video),992(render)"."""

    line: int
    text: str
    uid: int | None
    user: str
    groups: frozenset[str]


def read_id(bundle: BundleFiles) -> IdLine | None:
    for number, line in enumerate(bundle.lines("id.txt"), start=1):
        user = re.search(r"uid=(\d+)(?:\(([^)]*)\))?", line)
        if not user:
            continue
        groups_part = line.split("groups=", 1)[1] if "groups=" in line else ""
        groups = frozenset(re.findall(r"\d+\(([^)]*)\)", groups_part))
        return IdLine(number, line.strip(), int(user.group(1)), user.group(2) or user.group(1), groups)
    return None
