"""Render a role's templates and task arguments with Ansible's own templating, no host involved.

NVIDIA's ansible-role-nvidia-driver renders its task YAML to check the version pin it
computes; this generalises that for the Ubuntu 24.04 / 22.04 matrix of template output.
What is Ansible's own here: every file a role writes is rendered by the `template` lookup
plugin (ansible.builtin.template: the role's templates/ search path, trim_blocks, the
template_* variables and ansible_managed, no backslash escaping, as the template action
renders it); module arguments are templated by ansible.template.Templar; `when` and `assert`
conditions are judged by Templar.evaluate_conditional, Ansible's own conditional (a
non-boolean result fails as in a real play).

What is the harness's own, and so proves nothing about Ansible: the order it walks the task
file in (include_vars, blocks, loop, set_fact, register) and the module results, which the
test provides (`registered`, from recorded tool outputs). It runs no module, so it claims
nothing about a second run: idempotence is proven by real ansible-playbook runs against the
lab's nodes (tests/lab/test_provision.py::test_a_second_provision_changes_nothing_on_any_host and
tests/lab/test_roles.py::test_provision_verify_and_a_second_run_that_changes_nothing), which also
cover Debian 12, the lab's own system.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import collection_plugins
import yaml
from agent_stage import node_program_file
from ansible.errors import AnsibleValueOmittedError
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

from r9700ctl import manifest as manifest_module
from r9700ctl import paths, preflight
from r9700ctl.agent import nodefacts
from r9700ctl.agent.result import one_line

ROLES_DIR = Path(__file__).resolve().parents[2] / "roles"
# As ansible-playbook starts under r9700ctl: ansible.builtin.* plugins (the template lookup) and the
# collection r9700ctl.nodes (its filters, r9700ctl.nodes.r9700_power_plan ...) resolve.
collection_plugins.configure()
FIXTURES = Path(__file__).resolve().parent / "fixtures"
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
SKIPPED_MODULES = {"ansible.builtin.debug", "ansible.builtin.meta"}
OS_FACTS = {
    "ubuntu-24.04": ("Ubuntu", "24.04", "noble", "6.8.0-31-generic"),
    "ubuntu-22.04": ("Ubuntu", "22.04", "jammy", "5.15.0-105-generic"),
}


def fixture_lines(name: str) -> list[str]:
    """A recorded output without its first line (the source)."""
    return (FIXTURES / name).read_text().splitlines()[1:]


def node_script(root: Path, *args: str) -> dict[str, Any]:
    """Run r9700_lifecycle's node program as Ansible's script module does, against a root in tmp_path."""
    program = node_program_file()
    done = subprocess.run(
        ["python3", str(program), "r9700-lifecycle", *args, "--root", str(root)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout)


class AssertFailed(AssertionError):
    pass


@dataclass
class RenderedTask:
    name: str
    module: str
    args: Any
    skipped: bool
    items: list[Any] = field(default_factory=list)
    files: dict[str, str] = field(default_factory=dict)  # dest -> rendered template
    # dest -> (src, the task's own variables, loop item included): what the template module was given
    file_inputs: dict[str, tuple[str, dict[str, Any]]] = field(default_factory=dict)


def node_facts(os_key: str, gpus: int, igpu: bool = False) -> dict[str, Any]:
    """Facts as nodefacts.gather() reports them for a healthy node of this shape."""
    distro, version, codename, kernel = OS_FACTS[os_key]
    devices = [
        {
            "address": f"0000:{3 + i:02x}:00.0",
            "vendor": "0x1002",
            "device": "0x7551",
            "class": "0x030000",
            "revision": "0xc0",  # as sysfs reports a real R9700 (lspci "(rev c0)")
        }
        for i in range(gpus)
    ]
    if igpu:
        devices.append(
            {"address": "0000:7c:00.0", "vendor": "0x1002", "device": "0x164e", "class": "0x030000"}
        )
    return {
        "schema": nodefacts.SCHEMA,
        "os": {
            "id": distro.lower(),
            "version_id": version,
            "codename": codename,
            "key": os_key,
            "pretty_name": "",
        },
        "kernel": kernel,
        "service_manager": "systemd",
        "pci": {"source": "sysfs", "devices": devices},
        "apt_lock": {"holders": [], "seen_holders": [], "waited_s": 0.0},
        "apt_update": {"ran": True, "ok": True, "detail": ""},
        "apt": {
            "available": True,
            "error": "",
            "headers_package": f"linux-headers-{kernel}",
            "modules_extra_package": f"linux-modules-extra-{kernel}",
            "packages": {
                f"linux-headers-{kernel}": {"installed": None, "candidate": "1"},
                f"linux-modules-extra-{kernel}": {"installed": None, "candidate": "1"},
            },
        },
        "disk": {"/": 100 * 10**9, "/var": 100 * 10**9},
        "secure_boot": {"state": "not_efi"},
        "dkms_signing": {"key": "/var/lib/dkms/mok.key", "certificate": "/var/lib/dkms/mok.pub"},
        "amdgpu": {"loaded": False},
        "packages": {"amdgpu-dkms": None, "rocm-core": None},
        "errors": [],
    }


def load_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text()) if path.is_file() else None


def all_defaults() -> dict[str, Any]:
    merged: dict[str, Any] = {}
    for role in PROVISIONING:
        merged.update(load_yaml(ROLES_DIR / role / "defaults" / "main.yml") or {})
    return merged


def host_context(
    os_key: str = "ubuntu-24.04",
    gpus: int = 4,
    igpu: bool = False,
    host_vars: dict[str, Any] | None = None,
    service_manager: str = "systemd",
) -> dict[str, Any]:
    """Variables a host has when the roles after r9700_preflight run: defaults, inventory, facts."""
    host_vars = dict(host_vars or {})
    distro = OS_FACTS[os_key][0]
    facts = node_facts(os_key, gpus, igpu)
    facts["service_manager"] = service_manager
    context = all_defaults()
    context.update(host_vars)
    verdict = preflight.judge(facts, context, manifest_module.load())
    assert verdict.ok, [one_line(c) for c in verdict.failures]
    context.update(
        {
            "r9700_resolved": verdict.resolved.to_dict(),
            "inventory_hostname": "node1",
            "ansible_user": "r9700",
            "ansible_distribution": distro,
            "ansible_os_family": "Debian",
            "ansible_check_mode": False,
            # As Ansible names a collection's roles in a play: fully qualified (Role.get_name()).
            "ansible_play_role_names": [f"{paths.COLLECTION}.{role}" for role in PROVISIONING],
            "ansible_facts": {"processor_nproc": 16, "env": {"SUDO_USER": "r9700"}},
            # r9700ctl sets it on every run (agentpack.node_program_vars): the roles' node program
            "r9700_node_program": "/tmp/r9700ctl-node-x/r9700-node",
        }
    )
    return context


def _trusted(value: Any) -> Any:
    if isinstance(value, str):
        return trust_as_template(value)
    if isinstance(value, list):
        return [_trusted(v) for v in value]
    if isinstance(value, dict):
        return {k: _trusted(v) for k, v in value.items()}
    return value


class RoleRender:
    """Walk one role's task file with Ansible's templating; record rendered module arguments."""

    def __init__(self, role: str, context: dict[str, Any], registered: dict[str, Any] | None = None):
        self.role = role
        self.base = ROLES_DIR / role
        self.vars: dict[str, Any] = dict(context)
        self.vars["role_path"] = str(self.base)
        # A role outside PROVISIONING brings its own defaults; vars/main.yml is loaded by Ansible itself.
        # Their strings are templates, as Ansible reads role files (trusted, templated on use).
        for key, value in (load_yaml(self.base / "defaults" / "main.yml") or {}).items():
            self.vars.setdefault(key, _trusted(value))
        self.vars.update(_trusted(load_yaml(self.base / "vars" / "main.yml") or {}))
        self.registered = dict(registered or {})
        self.tasks: list[RenderedTask] = []
        self.notified: list[str] = []

    def template(self, value: Any, extra: dict[str, Any] | None = None) -> Any:
        variables = {**self.vars, **(extra or {})}
        templar = Templar(loader=DataLoader(), variables=variables)
        return self._walk(templar, value)

    def _walk(self, templar: Templar, value: Any) -> Any:
        if isinstance(value, str):
            return templar.template(trust_as_template(value))
        if isinstance(value, list):
            return [self._walk(templar, v) for v in value]
        if isinstance(value, dict):
            walked = {}
            for key, item in value.items():
                try:
                    walked[key] = self._walk(templar, item)
                except AnsibleValueOmittedError:
                    continue  # `default(omit)`: Ansible drops the argument, so does the harness
            return walked
        return value

    def condition(self, expression: Any, extra: dict[str, Any]) -> bool:
        """A `when` or `assert` condition, judged as Ansible judges it."""
        templar = Templar(loader=DataLoader(), variables={**self.vars, **extra})
        return templar.evaluate_conditional(
            expression if isinstance(expression, bool) else trust_as_template(str(expression))
        )

    def render_file(self, src: str, extra: dict[str, Any]) -> str:
        """The file the template action would write: rendered by Ansible's `template` lookup from this
        role's templates/ (the action and the lookup share the search path, template vars and trim_blocks)."""
        variables = {**self.vars, **extra, "ansible_search_path": [str(self.base)], "__render_src": src}
        templar = Templar(loader=DataLoader(), variables=variables)
        return templar.evaluate_expression(
            trust_as_template("lookup('ansible.builtin.template', __render_src)")
        )

    def run(self, tasks_file: str = "tasks/main.yml") -> RoleRender:
        for task in load_yaml(self.base / tasks_file) or []:
            self._run_task(task)
        return self

    def task(self, name_start: str) -> RenderedTask:
        for t in self.tasks:
            if t.name.startswith(name_start):
                return t
        raise KeyError(f"{self.role}: no task starting {name_start!r}: {[t.name for t in self.tasks]}")

    def _run_task(self, task: dict[str, Any], inherited: dict[str, Any] | None = None) -> None:
        name = task.get("name", "")
        if "block" in task:  # a block's when and vars apply to each of its tasks
            block_vars = {**(inherited or {}), **(task.get("vars") or {})}
            extra = {k: self.template(v) for k, v in block_vars.items()}
            when = task.get("when")
            whens = when if isinstance(when, list) else ([when] if when is not None else [])
            if all(self.condition(w, extra) for w in whens):
                for inner in task["block"]:
                    self._run_task(inner, block_vars)
            return
        if "ansible.builtin.import_tasks" in task:
            for inner in load_yaml(self.base / "tasks" / task["ansible.builtin.import_tasks"]) or []:
                self._run_task(inner, inherited)
            return
        if inherited:
            task = {**task, "vars": {**inherited, **(task.get("vars") or {})}}
        module = next(k for k in task if k.startswith(("ansible.builtin.", f"{paths.COLLECTION}.")))
        args = task[module]
        task_vars = task.get("vars") or {}
        if module == "ansible.builtin.include_vars":
            self.vars.update(load_yaml(self.base / "vars" / f"{self.vars['ansible_os_family']}.yml") or {})
            return
        items: list[Any] = [None]
        if "loop" in task:
            loop_vars: dict[str, Any] = {}
            for key, value in task_vars.items():
                loop_vars[key] = self.template(value, loop_vars)
            items = self.template(task["loop"], loop_vars)
        when = task.get("when")
        whens = when if isinstance(when, list) else ([when] if when is not None else [])
        rendered = RenderedTask(
            name=str(self.template(name, task_vars)), module=module, args=None, skipped=True
        )
        results = []
        for item in items:
            extra: dict[str, Any] = {"item": item} if "loop" in task else {}
            # Task vars may refer to earlier ones; Ansible templates them lazily, in use.
            for key, value in task_vars.items():
                extra[key] = self.template(value, extra)
            if not all(self.condition(w, extra) for w in whens):
                results.append({"changed": False, "skipped": True})
                continue
            rendered.skipped = False
            rendered.items.append(item)
            args_now = self.template(args, extra)
            rendered.args = args_now
            if module == "ansible.builtin.set_fact":
                self.vars.update(args_now)
            elif module == "ansible.builtin.assert":
                that = args["that"] if isinstance(args["that"], list) else [args["that"]]
                failed = [c for c in that if not self.condition(c, extra)]
                if failed:
                    raise AssertFailed(
                        f"{self.role}: {name}: {self.template(args.get('fail_msg', ''), extra)}"
                    )
            elif module == "ansible.builtin.template":
                rendered.files[args_now["dest"]] = self.render_file(args_now["src"], extra)
                rendered.file_inputs[args_now["dest"]] = (args_now["src"], extra)
            elif module in ("ansible.builtin.include_tasks", "ansible.builtin.include_role"):
                pass  # the reboot step is rendered on its own (tests call run("tasks/reboot.yml"))
            if task.get("notify"):
                self.notified.append(task["notify"])
            results.append(self.registered.get(task.get("register", ""), {"changed": False}))
        self.tasks.append(rendered)
        register = task.get("register")
        if register:
            if "loop" in task:
                self.vars[register] = {"results": results, "changed": any(r.get("changed") for r in results)}
            else:
                self.vars[register] = results[0]
