"""The r9700_* variables r9700ctl knows: the one list the inventory check compares against.

Every variable a user may set lives in some role's defaults/main.yml (the role's whole
interface) or its meta/argument_specs.yml; this module reads them all, so a new role
variable is known the moment its role declares it. A few variables belong to no role:
the inventory-only ones below, and the ones r9700ctl itself passes to every run.
"""

from __future__ import annotations

import difflib
import functools
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from r9700ctl.errors import CannotRun

PREFIX = "r9700_"

# Set in the inventory, read by the controller (and by roles through hostvars).
INVENTORY_ONLY: dict[str, str] = {
    "r9700_expected_gpus": "number of R9700 cards the host should have (integer >= 1)",
    "r9700_rocm_version": "ROCm release to install: 'auto' or a release listed in the manifest",
}

# Passed by r9700ctl as extra vars on every run; a user value would be overridden, so it is refused.
CONTROLLER_SET: dict[str, str] = {
    "r9700_group": "--group",
    "r9700_toolkit_version": "the installed r9700ctl version",
    "r9700_collect_dest": "--out of r9700ctl collect",
    "r9700_validate_dest": "r9700ctl validate (a fresh directory per run)",
    "r9700_validate_agent_archive": "r9700ctl validate (packed from its own package)",
    "r9700_monitoring_agent_archive": "r9700ctl provision (packed from its own package)",
}


@dataclass(frozen=True)
class KnownVariable:
    name: str
    source: str  # "role r9700_driver", "inventory" or "r9700ctl"
    description: str = ""


def known_variables(roles_dir: Path | None = None) -> dict[str, KnownVariable]:
    """Every r9700_* variable: role defaults and argument specs, inventory-only, controller-set."""
    if roles_dir is None:
        from r9700ctl.paths import content_dir

        roles_dir = content_dir("roles")
    return dict(_known_variables(roles_dir.resolve()))


@functools.lru_cache(maxsize=4)
def _known_variables(roles_dir: Path) -> tuple[tuple[str, KnownVariable], ...]:
    known: dict[str, KnownVariable] = {}
    for name, text in INVENTORY_ONLY.items():
        known[name] = KnownVariable(name, "inventory", text)
    for name, text in CONTROLLER_SET.items():
        known[name] = KnownVariable(name, "r9700ctl", f"set by r9700ctl from {text}")
    roles = sorted(p for p in roles_dir.iterdir() if p.is_dir()) if roles_dir.is_dir() else []
    for role in roles:
        for name, description in _role_variables(role).items():
            if name.startswith(PREFIX):
                known.setdefault(name, KnownVariable(name, f"role {role.name}", description))
    return tuple(sorted(known.items()))


def _role_variables(role: Path) -> dict[str, str]:
    """Names (with descriptions where the argument spec has one) a role declares."""
    names: dict[str, str] = {}
    defaults = _load_yaml(role / "defaults" / "main.yml")
    if isinstance(defaults, dict):
        names.update({str(key): "" for key in defaults})
    specs = _load_yaml(role / "meta" / "argument_specs.yml")
    if isinstance(specs, dict):
        # Only the `main` entry point is the user's interface; other entry points take
        # parameters from the roles that include them (a user setting one would misfire).
        entry = (specs.get("argument_specs") or {}).get("main") or {}
        if isinstance(entry, dict):
            for key, option in (entry.get("options") or {}).items():
                description = option.get("description", "") if isinstance(option, dict) else ""
                if isinstance(description, list):
                    description = " ".join(str(line) for line in description)
                names[str(key)] = str(description) or names.get(str(key), "")
    return names


def _load_yaml(path: Path) -> Any:
    if not path.is_file():
        return None
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        raise CannotRun(
            what=f"cannot read the role's variables: {getattr(exc, 'problem', None) or exc}",
            where=where,
            hint="the installed roles are damaged; reinstall r9700ctl",
        ) from exc


def closest(name: str, candidates: Iterable[str]) -> str | None:
    """The known name a typo most likely meant, or None when nothing is close.

    The shared prefix is left out of the comparison: every candidate starts with r9700_,
    which would make any two names look alike.
    """
    by_stem = {candidate.removeprefix(PREFIX): candidate for candidate in candidates}
    matches = difflib.get_close_matches(name.removeprefix(PREFIX), list(by_stem), n=1, cutoff=0.6)
    return by_stem[matches[0]] if matches else None
