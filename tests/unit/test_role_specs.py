"""Every role's interface stays honest: defaults/main.yml and meta/argument_specs.yml agree.

The prometheus-community collection's lint script, as a test: per role, the keys of
defaults/main.yml must equal the options of the spec's `main` entry point, each option with a
type and a description, its default equal to the one in defaults/main.yml, and the defaults
must pass Ansible's own argument-spec validator. Task files keep the house rules (R4 of the
research): no `state: latest`, no command without changed_when or creates, named tasks.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

ROLES_DIR = Path(__file__).resolve().parents[2] / "roles"
ROLES = sorted(p.name for p in ROLES_DIR.iterdir() if (p / "tasks" / "main.yml").is_file())
PROVISIONING = [
    "r9700_preflight",
    "r9700_repos",
    "r9700_driver",
    "r9700_rocm",
    "r9700_access",
    "r9700_env",
    "r9700_kernel",
    "r9700_power",
]
# Facts roles set for other roles and for the runner: the public contract (see the READMEs).
PUBLIC_FACTS = {
    "r9700_resolved",
    "r9700_preflight",
    "r9700_environment",
    "r9700_reboot_pending",
    "r9700_reboot_reasons",
    "r9700_versions",
}
ARG_SPEC_KEYS = {
    "type",
    "elements",
    "default",
    "choices",
    "required",
    "options",
    "description",
    "version_added",
}


def load(path: Path) -> Any:
    return yaml.safe_load(path.read_text()) if path.is_file() else None


def defaults(role: str) -> dict[str, Any]:
    return load(ROLES_DIR / role / "defaults" / "main.yml") or {}


def main_options(role: str) -> dict[str, Any]:
    specs = load(ROLES_DIR / role / "meta" / "argument_specs.yml") or {}
    return ((specs.get("argument_specs") or {}).get("main") or {}).get("options") or {}


def task_files(role: str) -> list[Path]:
    return sorted((ROLES_DIR / role).glob("tasks/*.yml")) + sorted((ROLES_DIR / role).glob("handlers/*.yml"))


def tasks_in(path: Path) -> list[dict[str, Any]]:
    """Every task, handler and block member of a task file, flattened."""
    out = []

    def walk(items: Any) -> None:
        for item in items or []:
            if not isinstance(item, dict):
                continue
            out.append(item)
            for key in ("block", "rescue", "always"):
                walk(item.get(key))

    walk(load(path))
    return out


@pytest.mark.parametrize("role", ROLES)
def test_defaults_and_argument_spec_name_the_same_variables(role):
    """A variable in defaults but not in the spec (or the reverse) is undocumented or unusable."""
    only_defaults = sorted(set(defaults(role)) - set(main_options(role)))
    only_spec = sorted(set(main_options(role)) - set(defaults(role)))
    assert (only_defaults, only_spec) == ([], []), (
        f"{role}: defaults-only {only_defaults}, spec-only {only_spec}"
    )


@pytest.mark.parametrize("role", ROLES)
def test_every_option_has_a_type_a_description_and_the_defaults_value(role):
    """The spec is the documentation (README points to it): a type, a description, the same default."""
    values = defaults(role)
    for name, option in main_options(role).items():
        assert option.get("type"), f"{role}: {name} has no type"
        assert option.get("description"), f"{role}: {name} has no description"
        assert set(option) <= ARG_SPEC_KEYS, f"{role}: {name} has unknown keys {set(option) - ARG_SPEC_KEYS}"
        if "default" in option:
            assert option["default"] == values.get(name), (
                f"{role}: {name} default differs from defaults/main.yml"
            )
        elif name in values:
            assert values[name] is None, (
                f"{role}: {name} has a default in defaults/main.yml but not in the spec"
            )
        if "choices" in option and name in values and values[name] is not None:
            assert values[name] in option["choices"], f"{role}: default of {name} is not one of its choices"


@pytest.mark.parametrize("role", ROLES)
def test_public_variables_carry_the_r9700_prefix(role):
    """Inventory checks find known variables by prefix; an unprefixed default would be invisible."""
    assert [n for n in defaults(role) if not n.startswith("r9700_")] == []


@pytest.mark.parametrize("role", ROLES)
def test_the_defaults_pass_ansibles_own_argument_spec_validation(role):
    """Ansible validates role variables against the spec before the first task: the defaults must pass."""
    spec = {
        name: {k: v for k, v in opt.items() if k != "description"} for name, opt in main_options(role).items()
    }
    result = ArgumentSpecValidator(spec).validate(defaults(role))
    assert result.error_messages == []


@pytest.mark.parametrize("role", PROVISIONING)
def test_provisioning_roles_have_the_full_layout(role):
    """The shape of every role: README, meta, per-OS vars, handlers, tasks for every role."""
    base = ROLES_DIR / role
    for part in (
        "README.md",
        "defaults/main.yml",
        "meta/main.yml",
        "meta/argument_specs.yml",
        "handlers/main.yml",
    ):
        assert (base / part).is_file(), f"{role} lacks {part}"
    assert list((base / "vars").glob("*.yml")), f"{role} has no vars/<OS>.yml"
    readme = (base / "README.md").read_text()
    for name in defaults(role):
        assert f"`{name}`" in readme, f"{role}/README.md does not mention {name}"


@pytest.mark.parametrize("role", PROVISIONING)
def test_tasks_follow_the_house_rules(role):
    """R4: no state: latest, no unconditional command, every task named; internals are __r9700_<role>_*."""
    internal = f"__{role}_"
    for path in task_files(role):
        for task in tasks_in(path):
            where = f"{path.relative_to(ROLES_DIR)}: {task.get('name', task)}"
            assert task.get("name"), f"unnamed task in {path.relative_to(ROLES_DIR)}"
            module_args = [
                v for k, v in task.items() if k.startswith("ansible.builtin.") and isinstance(v, dict)
            ]
            for args in module_args:
                assert args.get("state") != "latest", where
            if any(k in task for k in ("ansible.builtin.command", "ansible.builtin.shell")):
                assert "changed_when" in task or "creates" in str(task), where
            registered = task.get("register")
            if registered:
                assert registered.startswith(internal), f"{where}: register {registered}"
            facts = task.get("ansible.builtin.set_fact") or {}
            for fact in facts:
                assert fact.startswith(internal) or fact in PUBLIC_FACTS, f"{where}: set_fact {fact}"


@pytest.mark.parametrize("role", PROVISIONING)
def test_every_task_carries_a_phase_tag_of_its_role(role):
    """Phases are tagged <role>_<phase> so one phase can be rerun (roles/*/README.md)."""
    for task in tasks_in(ROLES_DIR / role / "tasks" / "main.yml"):
        tags = task.get("tags") or []
        assert any(t.startswith(f"{role}_") or t == role for t in tags), (
            f"{role}: {task.get('name')} has no phase tag"
        )


def test_a_variable_that_carries_a_roles_prefix_is_declared_in_that_role():
    """Issue 20 item 8: r9700_driver_source and r9700_rocm_version were declared in r9700_preflight,
    r9700_kernel_hold in r9700_driver: a reader looked for a variable in the role its name names
    and did not find it. Names stay (users' inventories keep working); declarations move."""
    misplaced = {
        name: (role, owner)
        for role in ROLES
        for name in defaults(role)
        for owner in ROLES
        if owner != role and name.startswith(owner + "_") and not name.startswith(role + "_")
    }
    assert misplaced == {}


def test_no_variable_is_declared_by_two_roles():
    declared: dict[str, list[str]] = {}
    for role in ROLES:
        for name in [*defaults(role), *main_options(role)]:
            if role not in declared.setdefault(name, []):
                declared[name].append(role)
    assert {name: roles for name, roles in declared.items() if len(roles) > 1} == {}
