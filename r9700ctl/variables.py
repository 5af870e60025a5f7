"""The r9700_* variables r9700ctl knows, and whether a value is one a role accepts.

Every variable a user may set lives in some role's defaults/main.yml (the role's whole
interface) or its meta/argument_specs.yml; this module reads them all, so a new role
variable is known the moment its role declares it. A few variables belong to no role:
the inventory-only ones below, and the ones r9700ctl itself passes to every run.

Values are judged by Ansible's own ArgumentSpecValidator against the roles'
meta/argument_specs.yml (the check Ansible runs when a role starts), so the inventory check
and preflight accept and convert exactly what the roles will; only what a spec cannot say
(a range, a shape) is added by r9700ctl/value_rules.py.
"""

from __future__ import annotations

import difflib
import functools
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from r9700ctl import fastyaml, value_rules
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
    "r9700_node_program": "r9700ctl's node package (agentpack.node_program: r9700-run, r9700-lifecycle ...)",
    "r9700_validate_cluster_phase": "r9700ctl validate --cluster (one run per phase)",
    "r9700_validate_cluster_plans": "r9700ctl validate --cluster (each node's plan of the phase)",
    "r9700_validate_cluster_timeout": "r9700ctl validate --cluster (the phase's wall clock)",
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


def role_default(role: str, name: str, roles_dir: Path | None = None) -> Any:
    """A variable's default as the role's defaults/main.yml sets it (None when it sets none): for the
    controller's own use of a role setting (doctor runs preflight's node facts without the role)."""
    if roles_dir is None:
        from r9700ctl.paths import content_dir

        roles_dir = content_dir("roles")
    defaults = _load_yaml(roles_dir / role / "defaults" / "main.yml")
    return defaults.get(name) if isinstance(defaults, dict) else None


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
        return fastyaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        raise CannotRun(
            what=f"cannot read the role's variables: {getattr(exc, 'problem', None) or exc}",
            where=where,
            hint="the installed roles are damaged; reinstall r9700ctl",
        ) from exc


_KIND = {
    "int": "a whole number",
    "float": "a number",
    "bool": "true or false",
    "str": "a string",
    "path": "a path",
    "list": "a list",
    "dict": "a mapping of NAME: value",
}


@dataclass(frozen=True)
class BadValue:
    """A value the roles' argument spec refuses: the variable, what was given, what is allowed."""

    name: str
    value: Any
    allowed: str
    purpose: str = ""  # the spec's description, first sentence: what the variable is for
    problem: value_rules.Problem | None = None  # a rule's verdict (r9700ctl/value_rules.py)

    def what(self) -> str:
        if self.problem is not None:
            text = self.problem.what
            return text if text.startswith(self.name) else f"{self.name}: {text}"
        return f"{self.name}={plain(self.value)!r} is not {self.allowed}"

    def fix(self, place: str = "") -> str:
        """'set NAME to ALLOWED [PLACE]: what it is for'; PLACE e.g. 'in the inventory'."""
        if self.problem is not None:
            return self.problem.fix + (f" {place}" if place else "")
        text = f"set {self.name} to {self.allowed}" + (f" {place}" if place else "")
        return f"{text}: {self.purpose}" if self.purpose else text


def role_specs(roles_dir: Path | None = None) -> dict[str, dict[str, Any]]:
    """Option spec (type, choices, elements, ...) of every variable of the roles' `main` entry points."""
    if roles_dir is None:
        from r9700ctl.paths import content_dir

        roles_dir = content_dir("roles")
    return dict(_role_specs(roles_dir.resolve()))


@functools.lru_cache(maxsize=4)
def _role_specs(roles_dir: Path) -> tuple[tuple[str, dict[str, Any]], ...]:
    found: dict[str, dict[str, Any]] = {}
    roles = sorted(p for p in roles_dir.iterdir() if p.is_dir()) if roles_dir.is_dir() else []
    for role in roles:
        specs = _load_yaml(role / "meta" / "argument_specs.yml")
        if not isinstance(specs, dict):
            continue
        entry = (specs.get("argument_specs") or {}).get("main") or {}
        for name, option in (entry.get("options") or {}).items():
            if isinstance(option, dict):
                found.setdefault(str(name), dict(option))
    return tuple(sorted(found.items()))


def check_values(
    values: Mapping[str, Any], roles_dir: Path | None = None
) -> tuple[dict[str, Any], list[BadValue]]:
    """`values` as the roles receive them (converted the way Ansible converts them) and the bad ones.

    Names no role declares pass through unchanged (the inventory check refuses unknown names);
    a bad value is left out of the answer, so callers see it as unset. None means unset, and so
    does "" (an INI `name=`, `-e name=`) where the roles take it as a value: a string without
    choices; for a bool, number, list, mapping or choice Ansible refuses "" on every host, so it is
    refused here. A Jinja expression is judged by Ansible once it is templated. After
    the spec, a value meets what no spec can say: its range and its rule (r9700ctl/value_rules.py).
    """
    from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

    specs = role_specs(roles_dir)
    checked: dict[str, Any] = {}
    bad: list[BadValue] = []
    for name, value in values.items():
        spec = specs.get(name)
        if spec is None or value is None or (value == "" and _takes_empty(spec)) or _templated(value):
            checked[name] = value
            continue
        option = {k: v for k, v in spec.items() if k not in ("description", "default", "required")}
        result = ArgumentSpecValidator({name: option}).validate({name: plain(value)})
        converted = result.validated_parameters.get(name)
        bounds = value_rules.RANGES.get(name, (None, None))
        if (
            result.error_messages
            or _outside(converted, bounds)
            # Python's bool is an int, and Ansible takes True as 1; as a count or a size it is a mistake.
            or (isinstance(value, bool) and spec.get("type") in ("int", "float"))
            # Ansible checks a list's items against `choices` one by one: ["on"] passes for a
            # `raw` knob whose roles then compare the whole value with "on".
            or (spec.get("choices") and spec.get("type") != "list" and isinstance(value, (list, Mapping)))
        ):
            bad.append(BadValue(name, value, _allowed(spec, bounds), _purpose(spec)))
            continue
        problem = value_rules.problem_of(name, converted)
        if problem is not None:
            bad.append(BadValue(name, value, _allowed(spec, bounds), _purpose(spec), problem))
            continue
        checked[name] = converted
    return checked, bad


def _takes_empty(spec: Mapping[str, Any]) -> bool:
    """Whether the roles' validation accepts "" as this variable's value (a string without choices)."""
    return str(spec.get("type") or "str") in ("str", "path", "raw") and not spec.get("choices")


def _outside(value: Any, bounds: tuple[float | None, float | None]) -> bool:
    least, greatest = bounds
    if not isinstance(value, (int, float)):
        return False
    return (least is not None and value < least) or (greatest is not None and value > greatest)


def _allowed(spec: Mapping[str, Any], bounds: tuple[float | None, float | None] = (None, None)) -> str:
    choices = spec.get("choices")
    if choices:
        # [auto, true, false, "true", "false"] reads as "auto, true or false"
        shown = list(dict.fromkeys(str(c).lower() if isinstance(c, bool) else str(c) for c in choices))
        return "one of " + ", ".join(shown)
    kind = str(spec.get("type") or "str")
    text = _KIND.get(kind, "any value")
    if kind == "list" and spec.get("elements"):
        elements = str(spec["elements"])
        text += " of " + {"str": "strings", "int": "whole numbers", "dict": "mappings"}.get(
            elements, elements
        )
    least, greatest = bounds
    if least is not None and greatest is not None:
        text += f" from {least:g} to {greatest:g}"
    elif least is not None:
        text += f", {least:g} or more"
    elif greatest is not None:
        text += f", {greatest:g} or less"
    return text


def _purpose(spec: Mapping[str, Any]) -> str:
    text = spec.get("description") or ""
    if isinstance(text, list):
        text = " ".join(str(line) for line in text)
    text = " ".join(str(text).split()).removeprefix("I(Advanced) ")
    text = re.sub(r"\b[CIB]\(([^)]*)\)", r"\1", text)  # ansible-doc markup: C(auto) -> auto
    first = text.split(". ")[0].rstrip(".")
    if len(first) > 1 and first[1].islower():  # "Number of ..." -> "number of ...", "PCIe" stays
        first = first[0].lower() + first[1:]
    return first


def _templated(value: Any) -> bool:
    return isinstance(value, str) and ("{{" in value or "{%" in value)


def plain(value: Any) -> Any:
    """Ansible's tagged str/int/dict types as plain Python (for the validator, messages, JSON)."""
    if isinstance(value, bool) or value is None:
        return value
    for kind in (str, int, float):
        if isinstance(value, kind):
            return kind(value)
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return str(value)


def closest(name: str, candidates: Iterable[str]) -> str | None:
    """The known name a typo most likely meant, or None when nothing is close.

    The shared prefix is left out of the comparison: every candidate starts with r9700_,
    which would make any two names look alike.
    """
    by_stem = {candidate.removeprefix(PREFIX): candidate for candidate in candidates}
    matches = difflib.get_close_matches(name.removeprefix(PREFIX), list(by_stem), n=1, cutoff=0.6)
    return by_stem[matches[0]] if matches else None
