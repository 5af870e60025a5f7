"""The one atomic file writer, and the one JSON writer on it (standard library only: the agent
ships it to nodes).

A temporary file beside the target, fsync'd, then renamed over it: a reader (a scraper, CI, the
next run, `lab down` after a crash) sees the old file or the new one, never half of one.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Any


def write_atomic(path: Path | str, data: str | bytes, mode: int | None = None) -> Path:
    """Write `data` to `path` atomically; `mode` sets the permissions (default: the umask's).

    A symbolic link is followed: the rename replaces the file it points to, never the link
    itself (as root, `--json /dev/stdout` replaced the system's /dev/stdout link with a file).
    """
    path = Path(path)
    if path.is_symlink():
        path = Path(os.path.realpath(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    payload = data.encode("utf-8") if isinstance(data, str) else data
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666 if mode is None else mode)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(payload)
            fh.flush()
            os.fsync(fh.fileno())
        if mode is not None:
            os.chmod(tmp, mode)  # O_CREAT's mode is filtered by the umask
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    return path


def write_json(path: Path | str, document: Any, mode: int | None = None) -> Path:
    """`document` as indented JSON (keys in their order, what JSON cannot hold as its text),
    written atomically: every JSON file r9700ctl writes goes through here."""
    return write_atomic(path, json_text(document), mode=mode)


def json_text(document: Any) -> str:
    """The text of a JSON document as r9700ctl writes it, to a file or to standard output."""
    return json.dumps(document, indent=2, default=str) + "\n"
