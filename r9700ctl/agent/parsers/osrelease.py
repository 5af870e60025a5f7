"""/etc/os-release: which distribution and release a node runs.

`key` is "<ID>-<VERSION_ID>" ("ubuntu-24.04", "debian-12"), the form of the manifest's
`os` keys, so the doctor can ask whether a ROCm release supports this OS.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from r9700ctl.agent.parsers._common import cannot_read, failure, from_file, never_raises

_ASSIGNMENT = re.compile(r"^([A-Z][A-Z0-9_]*)=(.*)$")


@dataclass
class OsRelease:
    source: str
    fields: dict[str, str] = field(default_factory=dict)
    error: str | None = None

    @property
    def id(self) -> str | None:
        return self.fields.get("ID")

    @property
    def version_id(self) -> str | None:
        return self.fields.get("VERSION_ID")

    @property
    def codename(self) -> str | None:
        return self.fields.get("VERSION_CODENAME") or self.fields.get("UBUNTU_CODENAME")

    @property
    def pretty_name(self) -> str | None:
        return self.fields.get("PRETTY_NAME")

    @property
    def id_like(self) -> list[str]:
        return (self.fields.get("ID_LIKE") or "").split()

    @property
    def key(self) -> str | None:
        """ "ubuntu-24.04": the manifest's way to name an OS release."""
        return f"{self.id}-{self.version_id}" if self.id and self.version_id else None


_failed = failure(OsRelease)


@never_raises(_failed)
def parse(text: str, source: str = "os-release") -> OsRelease:
    release = OsRelease(source=source)
    for line in text.splitlines():
        match = _ASSIGNMENT.match(line.strip())
        if not match:
            continue
        value = match.group(2)
        try:
            parts = shlex.split(value, posix=True)
            value = " ".join(parts) if parts else ""
        except ValueError:  # unbalanced quote: keep the text without its quotes
            value = value.strip("\"'")
        release.fields[match.group(1)] = value
    if "ID" not in release.fields:
        release.error = cannot_read(source, "no ID= line, not an os-release file")
    else:
        release.fields["ID"] = release.fields["ID"].lower()
    return release


def parse_file(path: str | Path) -> OsRelease:
    return from_file(parse, _failed, path)
