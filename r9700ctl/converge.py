"""The key of what a provision is asked to do (controller side of r9700ctl/agent/converged.py).

Two runs with the same key do the same thing to a node that is as the first one left it: the
key hashes everything the roles' outcome follows from, namely the content that runs (the
collection's roles, playbooks and plugins, and the r9700ctl package their plugins and node
program come from), every r9700_* value of the host as the play resolved it (role defaults,
inventory, extra vars, and what r9700_preflight resolved from the node) and the scope of the run
(roles in the play, tags). Values that name a per-run temporary file (the packed node program, the
monitoring agent's archive) count by their content instead.

The facts the roles read are not in the key: provision gathers them only on a node that is not
converged (a converged one costs no fact gathering), so the node observes what they are derived
from and names any change (r9700ctl/agent/converged.py machine, FACT_SOURCES).
tests/unit/test_converge.py keeps FACTS in step with the facts the roles' files read, and every one
of them observed.
"""

from __future__ import annotations

import hashlib
import json
from functools import cache
from pathlib import Path
from typing import Any

# What the content digest covers, and which files in it count.
CONTENT_DIRS = ("roles", "playbooks", "plugins")
CONTENT_SUFFIXES = (".py", ".yml", ".yaml", ".j2", ".json", ".txt", ".cfg", ".ini", ".sh")
# Facts the roles read (ansible_facts[...] in roles/ and playbooks/); a dotted name is one key of
# a fact (of the environment only SUDO_USER: the rest changes with every SSH session). Each is
# observed on the node (agent/converged.py FACT_SOURCES), not hashed here.
FACTS = (
    "architecture",
    "distribution",
    "distribution_release",
    "distribution_version",
    "env.SUDO_USER",
    "hostname",
    "kernel",
    "memtotal_mb",
    "os_family",
    "processor",
    "processor_cores",
    "processor_count",
    "processor_nproc",
    "processor_vcpus",
    "service_mgr",
)
# Other play variables the roles read.
PLAY_VARS = (
    "inventory_hostname",
    "ansible_user",
    "ansible_become",
    "ansible_connection",
    "ansible_python_interpreter",
    "ansible_play_role_names",
    "ansible_run_tags",
    "ansible_skip_tags",
    "ansible_version",  # another ansible-core may template the same files otherwise
    "ansible_managed",  # the header 18 templates carry (the action adds it: Ansible's setting)
)
# r9700_* values that are a per-run temporary file: their content counts, not their path.
BY_CONTENT = ("r9700_node_program", "r9700_monitoring_agent_archive")
# r9700_* values that are a report of this run, not an input (the preflight checks carry the
# node's clock offset and timings).
NOT_INPUTS = (
    "r9700_preflight",
    "r9700_converged",
    "r9700_lifecycle_step",
    "r9700_lifecycle_skip_converged",
    # how fresh apt's lists must be for preflight: --full passes 0; nothing it writes depends on it
    "r9700_preflight_apt_cache_valid_time",
)
# Of what preflight resolved, the package versions before this run: an input of the report, not of
# what the roles do (the node's package database is observed, r9700ctl/agent/converged.py).
RESOLVED_NOT_INPUTS = ("installed_before",)


def _files_digest(roots: list[Path]) -> str:
    sums = hashlib.sha256()
    for root in roots:
        for path in sorted(root.rglob("*")):
            parts = set(path.relative_to(root).parts)
            if path.is_file() and path.suffix in CONTENT_SUFFIXES and not {"__pycache__", "_content"} & parts:
                sums.update(f"{root.name}/{path.relative_to(root)}".encode() + b"\0" + path.read_bytes())
    return sums.hexdigest()


@cache
def content_digest() -> str:
    """A hash of the collection's content and the r9700ctl package (once per process)."""
    from r9700ctl import paths

    return _files_digest(
        [paths.content_dir(name) for name in CONTENT_DIRS] + [Path(__file__).resolve().parent]
    )


def file_digest(path: str) -> str:
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return f"unreadable {path}"


def inputs(variables: dict[str, Any]) -> dict[str, Any]:
    """What the key hashes, from a host's templated variables."""
    values = {}
    for name in sorted(variables):
        if not name.startswith("r9700_") or name in NOT_INPUTS:
            continue
        value = variables[name]
        if name in BY_CONTENT and value:
            value = file_digest(str(value))
        elif name == "r9700_resolved" and isinstance(value, dict):
            value = {k: v for k, v in value.items() if k not in RESOLVED_NOT_INPUTS}
        values[name] = value
    return {
        "content": content_digest(),
        "values": values,
        "play": {name: variables.get(name) for name in PLAY_VARS},
    }


def key(variables: dict[str, Any]) -> str:
    text = json.dumps(inputs(variables), sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()
