"""Where the Ansible content lives: inside the wheel, or beside the package in a checkout."""

from __future__ import annotations

import os
from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent


def content_dir(name: str) -> Path:
    """Return the directory `name` (playbooks, roles, templates, inventory, tests/infra).

    A wheel carries it under r9700ctl/_content/ (see pyproject.toml); a source checkout or
    an editable install has it at the repository root.
    """
    for base in (_PACKAGE / "_content", _PACKAGE.parent):
        candidate = base / name
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"r9700ctl content directory '{name}' is missing from the installation")


def playbook(name: str) -> Path:
    return content_dir("playbooks") / name


def data_file(name: str) -> Path:
    return _PACKAGE / "data" / name


def state_dir() -> Path:
    """Per-user state (run artifacts), ~/.local/state/r9700ctl unless XDG_STATE_HOME says otherwise."""
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "r9700ctl"
