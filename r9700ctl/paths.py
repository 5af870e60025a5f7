"""Where the Ansible content lives: inside the wheel, or beside the package in a checkout.

The roles, playbooks and plugins are the Ansible collection r9700ctl.nodes (galaxy.yml): the
checkout's root is the collection's root, and the wheel carries the same tree under
r9700ctl/_content/. r9700ctl runs the collection's playbooks by their fully qualified names
through a collections path that points at this installation's copy (`collections_path`), so the
CLI and a site's own ansible-playbook run the same roles.
"""

from __future__ import annotations

import os
from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent
COLLECTION_NAMESPACE = "r9700ctl"
COLLECTION_NAME = "nodes"
COLLECTION = f"{COLLECTION_NAMESPACE}.{COLLECTION_NAME}"


def content_dir(name: str) -> Path:
    """Return the directory `name` (playbooks, roles, plugins, templates, inventory, tests/infra).

    A wheel carries it under r9700ctl/_content/ (see pyproject.toml); a source checkout or
    an editable install has it at the repository root.
    """
    for base in (_PACKAGE / "_content", _PACKAGE.parent):
        candidate = base / name
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"r9700ctl content directory '{name}' is missing from the installation")


def collection_root() -> Path:
    """The root of this installation's collection (the directory of its galaxy.yml)."""
    for base in (_PACKAGE / "_content", _PACKAGE.parent):
        if (base / "galaxy.yml").is_file():
            return base
    raise FileNotFoundError(
        f"the Ansible collection {COLLECTION} (galaxy.yml) is missing from the installation"
    )


def playbook(name: str) -> str:
    """The collection's playbook `name` (provision.yml) by its full name (r9700ctl.nodes.provision)."""
    return f"{COLLECTION}.{Path(name).stem}"


def collections_path(into: Path) -> Path:
    """A collections path (ANSIBLE_COLLECTIONS_PATH) whose r9700ctl.nodes is this installation's.

    Ansible finds a collection at <path>/ansible_collections/<namespace>/<name>; the checkout's
    root is not laid out so, so `into` gets a link to it. One per run directory: runs of two
    installations (two checkouts, a wheel) never share one.
    """
    link = into / "ansible_collections" / COLLECTION_NAMESPACE / COLLECTION_NAME
    link.parent.mkdir(parents=True, exist_ok=True)
    target = collection_root()
    if not (link.is_symlink() and Path(os.readlink(link)) == target):
        if link.is_symlink():
            link.unlink()
        link.symlink_to(target, target_is_directory=True)
    return into


def data_file(name: str) -> Path:
    return _PACKAGE / "data" / name


def state_dir() -> Path:
    """Per-user state (run artifacts), ~/.local/state/r9700ctl unless XDG_STATE_HOME says otherwise."""
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "r9700ctl"
