"""The collection r9700ctl.nodes as Ansible loads it, once per test process.

Its plugins import their shared code as ansible_collections.r9700ctl.nodes.plugins.plugin_utils,
which only Ansible's collection finder resolves: tests configure it as ansible-playbook under
r9700ctl has it (this checkout's collection first, through paths.collections_path) and import a
plugin by its module name, never from its file.
"""

from __future__ import annotations

import atexit
import functools
import importlib
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from types import ModuleType


@functools.lru_cache(maxsize=1)
def configure() -> Path:
    """Ansible's collection finder with this checkout's r9700ctl.nodes first; the collections path."""
    from ansible.plugins.loader import init_plugin_loader
    from ansible.utils.collection_loader import AnsibleCollectionConfig

    from r9700ctl import paths

    directory = Path(tempfile.mkdtemp(prefix="r9700ctl-test-collections-"))
    atexit.register(shutil.rmtree, directory, True)
    collections = paths.collections_path(directory)
    # One finder per process: a second configuration would be ignored (with a warning).
    assert AnsibleCollectionConfig.collection_finder is None, (
        "Ansible's collection finder was configured first"
    )
    init_plugin_loader([str(collections)])
    return collections


def plugin(kind: str, name: str) -> ModuleType:
    """plugins/<kind>/<name>.py (kind: action, filter, modules, plugin_utils) as Ansible imports it."""
    from r9700ctl import paths

    configure()
    return importlib.import_module(f"ansible_collections.{paths.COLLECTION}.plugins.{kind}.{name}")


def ansible_tool(name: str) -> str:
    """An Ansible command of this Python's environment (a venv is not always on PATH)."""
    return str(Path(sys.executable).with_name(name))


def build(out: Path) -> Path:
    """`ansible-galaxy collection build` of this checkout into `out`; the tarball."""
    from r9700ctl import paths

    done = subprocess.run(
        [ansible_tool("ansible-galaxy"), "collection", "build", "--output-path", str(out)],
        cwd=paths.collection_root(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    (tarball,) = out.glob("r9700ctl-nodes-*.tar.gz")
    return tarball


def install(tarball: Path, collections: Path) -> Path:
    """`ansible-galaxy collection install --offline` of `tarball` into `collections`; its directory."""
    done = subprocess.run(
        [
            ansible_tool("ansible-galaxy"),
            "collection",
            "install",
            "--offline",
            "-p",
            str(collections),
            str(tarball),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return collections / "ansible_collections" / "r9700ctl" / "nodes"
