"""`dkms status`, in both formats dkms has printed.

dkms 2.x: "amdgpu, 6.8.5-2009582.22.04, 6.8.0-45-generic, x86_64: installed"
dkms 3.x: "amdgpu/6.8.5-2009582.22.04, 6.8.0-45-generic, x86_64: installed"
A module only added or built for no kernel yet has neither kernel nor arch
("amdgpu/6.8.5-2009582.22.04: added"). dkms appends remarks in parentheses:
"(original_module exists)" / "(Original modules exist)", "(WARNING! Diff between built
and installed module!)", "(WARNING! Missing some built modules!)". States: added, built,
installed, broken (and "installed-weak" on some distributions).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from r9700ctl.agent.parsers._common import cannot_read, failure, from_file, is_source_line, never_raises

STATES = ("added", "built", "installed", "installed-weak", "broken")


@dataclass
class DkmsEntry:
    module: str
    version: str
    kernel: str | None
    arch: str | None
    state: str
    notes: list[str] = field(default_factory=list)
    format: str = "new"  # "old" for dkms 2.x commas, "new" for dkms 3.x slashes
    line: int = 0

    @property
    def original_module_exists(self) -> bool:
        return any("original" in n.lower() and "exist" in n.lower() for n in self.notes)

    @property
    def diff_built_installed(self) -> bool:
        return any("diff between built and installed" in n.lower() for n in self.notes)

    @property
    def missing_built_modules(self) -> bool:
        return any("missing some built modules" in n.lower() for n in self.notes)

    @property
    def healthy(self) -> bool:
        """Installed for its kernel, with no warning from dkms."""
        return self.state == "installed" and not any("warning" in n.lower() for n in self.notes)


@dataclass
class DkmsStatus:
    source: str
    entries: list[DkmsEntry] = field(default_factory=list)
    other_lines: list[tuple[int, str]] = field(default_factory=list)  # errors and notices dkms printed
    error: str | None = None

    def for_module(self, module: str) -> list[DkmsEntry]:
        return [e for e in self.entries if e.module == module]

    def for_kernel(self, kernel: str, module: str = "amdgpu") -> list[DkmsEntry]:
        return [e for e in self.entries if e.module == module and e.kernel == kernel]


_failed = failure(DkmsStatus)


_KERNEL_ARCH = r"(?:,\s*(?P<kernel>[^,:\s]+),\s*(?P<arch>[^,:\s]+))?\s*:\s*(?P<rest>.*)$"
_NEW = re.compile(r"^(?P<module>[\w.+-]+)/(?P<version>[^,:\s]+)" + _KERNEL_ARCH)
_OLD = re.compile(r"^(?P<module>[\w.+-]+),\s*(?P<version>[^,:\s]+)" + _KERNEL_ARCH)
_STATE = re.compile(r"^(?P<state>[\w-]+)\s*(?P<notes>.*)$")


@never_raises(_failed)
def parse(text: str, source: str = "dkms-status.txt") -> DkmsStatus:
    """An empty output is valid (no DKMS module at all); lines that are not entries are kept."""
    status = DkmsStatus(source=source)
    meaningful = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or (number == 1 and is_source_line(line)):
            continue
        meaningful += 1
        entry = _entry(line, number)
        if entry is None:
            status.other_lines.append((number, line))
        else:
            status.entries.append(entry)
    if meaningful and not status.entries and not any(_is_dkms_message(t) for _, t in status.other_lines):
        status.error = cannot_read(source, "no 'module/version, kernel, arch: state' lines in it")
    return status


def _entry(line: str, number: int) -> DkmsEntry | None:
    match, fmt = _NEW.match(line), "new"
    if match is None:
        match, fmt = _OLD.match(line), "old"
    if match is None:
        return None
    state = _STATE.match(match.group("rest").strip())
    if state is None or state.group("state").lower() not in STATES:
        return None
    notes = [n.strip() for n in re.findall(r"\(([^()]*)\)", state.group("notes"))]
    return DkmsEntry(
        module=match.group("module"),
        version=match.group("version"),
        kernel=match.group("kernel"),
        arch=match.group("arch"),
        state=state.group("state").lower(),
        notes=notes,
        format=fmt,
        line=number,
    )


def _is_dkms_message(line: str) -> bool:
    """dkms' own error and warning lines ("Error! ...", "WARNING! ...", "Deprecated feature")."""
    lowered = line.lower()
    return lowered.startswith(("error!", "warning!", "deprecated feature", "dkms"))


def parse_file(path: str | Path) -> DkmsStatus:
    return from_file(parse, _failed, path)
