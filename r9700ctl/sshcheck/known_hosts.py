"""known_hosts the OpenSSH way: "[host]:port" names, hashed entries, patterns and negations.

Keys are read with their file and line, so a changed key names the line to remove.
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
import threading
from dataclasses import dataclass
from pathlib import Path

# One lock for every append to a known_hosts file: hosts are checked in parallel threads.
_KNOWN_HOSTS_WRITE = threading.Lock()


@dataclass(frozen=True)
class KnownHostKey:
    file: str
    line: int
    key_type: str
    key_base64: str

    @property
    def fingerprint(self) -> str:
        return fingerprint_of(self.key_base64)


def fingerprint_of(key_base64: str) -> str:
    """OpenSSH's SHA256 fingerprint ("SHA256:..." as ssh-keygen -lf prints it)."""
    try:
        blob = base64.b64decode(key_base64)
    except ValueError:
        return "SHA256:?"
    return "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")


def _name_matches(name: str, patterns: str) -> bool:
    """OpenSSH known_hosts host matching: hashed |1| entries, wildcard patterns, negation with '!'."""
    import paramiko

    matched = False
    for pattern in patterns.split(","):
        if pattern.startswith("|1|"):
            if paramiko.HostKeys.hash_host(name, pattern) == pattern:
                matched = True
            continue
        negated = pattern.startswith("!")
        if _glob(pattern.lstrip("!")).fullmatch(name.lower()):
            if negated:
                return False
            matched = True
    return matched


def _glob(pattern: str) -> re.Pattern[str]:
    """OpenSSH patterns know only '*' and '?'; '[' is literal ("[host]:2222")."""
    parts = (".*" if ch == "*" else "." if ch == "?" else re.escape(ch) for ch in pattern.lower())
    return re.compile("".join(parts))


def known_keys_for(name: str, files: tuple[str, ...]) -> list[KnownHostKey]:
    """Every key recorded for `name` in the known_hosts files (missing or garbled lines are skipped)."""
    found = []
    for file in files:
        try:
            lines = Path(file).read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            continue
        for number, line in enumerate(lines, start=1):
            fields = line.split()
            # "@cert-authority" / "@revoked" lines: certificates are beyond these checks
            if len(fields) < 3 or fields[0].startswith("#") or fields[0].startswith("@"):
                continue
            if _name_matches(name, fields[0]):
                found.append(KnownHostKey(file=file, line=number, key_type=fields[1], key_base64=fields[2]))
    return found


def record_host_key(file: str, name: str, key_type: str, key_base64: str) -> None:
    """Append one known_hosts line (directory 0700, file 0600, as ssh does); no duplicates."""
    path = Path(file)
    with _KNOWN_HOSTS_WRITE:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        if any(k.key_base64 == key_base64 for k in known_keys_for(name, (file,))):
            return
        existing = path.read_bytes() if path.exists() else b""
        separator = b"" if not existing or existing.endswith(b"\n") else b"\n"
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        with os.fdopen(fd, "ab") as fh:
            fh.write(separator + f"{name} {key_type} {key_base64}\n".encode())
