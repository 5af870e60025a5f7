"""roles/r9700_lifecycle/tasks/converged.yml in a real ansible-playbook on localhost.

The converged check runs as the collection's own action plugin, with only its question to the
node answered by a stand-in (the node script is tested in test_converge.py): the node says it is
as recorded, under the key this run computed. What is pinned here is what the play does with
the action's verdict: a play of r9700ctl's roles alone ends for the node, a play that also runs
a site's own role runs in full (meta: end_host would skip the site's role, whose inputs the check
does not know), and so does --full; a node whose roles run gets its facts gathered first.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CONVERGED_TASKS = ROOT / "roles" / "r9700_lifecycle" / "tasks" / "converged.yml"
MODULE = "r9700ctl.nodes.r9700_converged"
RECORDED = {"r9700_versions": {"before": {"rocm-core": "7.2.3"}, "after": {"rocm-core": "7.2.3"}}}
KERNEL_FACT = "kernel {{ ansible_facts.kernel | default('none') }}"
# The action plugin as the collection has it, with its node call answered: as recorded, same key.
STAND_IN_ACTION = """
import base64, json

_ActionModule = ActionModule


class ActionModule(_ActionModule):
    def _ask_node(self, command, script):
        sent = json.loads(base64.b64decode(command.split()[-1]))
        return {"recorded_key": sent["key"], "differences": [], "facts": %r, "observed": 3,
                "recorded_at": 1796400000}
"""


def _role(roles: Path, name: str, tasks: list[dict]) -> None:
    (roles / name / "tasks").mkdir(parents=True)
    (roles / name / "tasks" / "main.yml").write_text(yaml.safe_dump(tasks, sort_keys=False))


def run_play(
    tmp_path: Path,
    role_names: list[str],
    extra_vars: dict | None = None,
    gather_facts: bool = False,
    play_vars: dict | None = None,
    rc: int = 0,
) -> str:
    tasks = yaml.safe_load(CONVERGED_TASKS.read_text())
    assert any(MODULE in task for task in tasks), "converged.yml no longer asks the module first"
    # Each role both on the roles path and in a collection named r9700ctl.nodes, as a site finds ours.
    roles = tmp_path / "roles"
    collection = tmp_path / "collections" / "ansible_collections" / "r9700ctl" / "nodes"
    for where in (roles, collection / "roles"):
        _role(where, "r9700_probe", tasks)
        for name in role_names:
            short = name.rsplit(".", 1)[-1]
            _role(where, short, [{"name": f"{short} ran", "ansible.builtin.debug": {"msg": f"{short} ran"}}])
    (collection / "plugins" / "action").mkdir(parents=True)
    shutil.copytree(ROOT / "plugins" / "plugin_utils", collection / "plugins" / "plugin_utils")
    action = (ROOT / "plugins" / "action" / "r9700_converged.py").read_text()
    (collection / "plugins" / "action" / "r9700_converged.py").write_text(action + STAND_IN_ACTION % RECORDED)
    play = [
        {
            "name": "Site",
            "hosts": "all",
            "gather_facts": gather_facts,
            "vars": {
                "r9700_lifecycle_skip_converged": True,
                "__r9700_lifecycle_managed": {"files": []},
                **(play_vars or {}),
            },
            "roles": ["r9700_probe", *role_names],
            "post_tasks": [{"name": "Facts", "ansible.builtin.debug": {"msg": KERNEL_FACT}}],
        }
    ]
    (tmp_path / "site.yml").write_text(yaml.safe_dump(play, sort_keys=False))
    env = {
        **os.environ,
        "ANSIBLE_ROLES_PATH": str(roles),
        "ANSIBLE_COLLECTIONS_PATH": str(tmp_path / "collections"),
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_HOME": str(tmp_path / "home"),
    }
    extra = [arg for name, value in (extra_vars or {}).items() for arg in ("-e", f"{name}={value}")]
    done = subprocess.run(
        [
            str(Path(sys.executable).with_name("ansible-playbook")),
            "-i",
            "localhost,",
            "-c",
            "local",
            "-e",
            f"ansible_python_interpreter={sys.executable}",
            *extra,
            str(tmp_path / "site.yml"),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert done.returncode == rc, done.stdout + done.stderr
    return done.stdout if rc == 0 else done.stdout + done.stderr


@pytest.mark.parametrize("own_role", ["r9700_env", "r9700ctl.nodes.r9700_env"])
def test_a_converged_node_ends_a_play_of_r9700ctls_roles_only(tmp_path: Path, own_role: str) -> None:
    """By its short name or the collection's: both are r9700ctl's roles. Nothing runs after the
    check: no role, no fact gathering."""
    out = run_play(tmp_path, [own_role])
    assert "converged since 2026-12-04 " in out and "same inputs, and the 3 managed files" in out, out
    assert "r9700_env ran" not in out and "Gathering Facts" not in out, out
    assert "TASK [r9700_probe : Converged | Gather the facts the roles read" not in out, out


def test_a_play_that_also_runs_a_site_role_runs_every_role_with_its_facts(tmp_path: Path) -> None:
    out = run_play(tmp_path, ["r9700_env", "site_ntp"])
    assert "not converged: this play also runs site_ntp (a site play of its own)" in out, out
    assert "r9700_env ran" in out and "site_ntp ran" in out, out
    # The play gathers no facts itself: the roles that run get them from the converged step.
    assert f"kernel {os.uname().release}" in out, out


def test_full_runs_every_role_and_says_what_the_check_found(tmp_path: Path) -> None:
    out = run_play(tmp_path, ["r9700_env"], {"r9700_lifecycle_skip_converged": "false"})
    assert "every role runs (--full); the check found: converged since 2026-12-04 " in out, out
    assert "r9700_env ran" in out and f"kernel {os.uname().release}" in out, out


@pytest.mark.parametrize("value", ["maybe", "3", ""])
def test_a_bad_skip_converged_refuses_the_node_naming_the_variable(tmp_path: Path, value: str) -> None:
    """provision imports the check by its own entry point, which has no argument check: the action
    refuses a value Ansible's bool does not take, in one line that names the variable, before any role."""
    out = run_play(tmp_path, ["r9700_env"], {"r9700_lifecycle_skip_converged": value}, rc=2)
    assert f"localhost: r9700_lifecycle_skip_converged={value!r} is not true or false; nothing changed" in out
    assert "(set r9700_lifecycle_skip_converged to true or false in the inventory or with -e)" in out, out
    assert "r9700_env ran" not in out, out


@pytest.mark.parametrize(
    ("step", "program"),
    [("bogus", "/tmp/r9700-node"), ("state", ""), ("state", "relative/r9700-node"), ("", "/tmp/r9700-node")],
)
def test_an_unknown_step_or_a_step_without_its_node_program_is_refused_with_what_is_wanted(
    tmp_path: Path, step: str, program: str
) -> None:
    """tasks/main.yml includes refuse.yml instead of the step: one failed assert, nothing run."""
    play = [
        {
            "name": "Lifecycle",
            "hosts": "all",
            "gather_facts": False,
            "roles": [{"role": "r9700_lifecycle", "vars": {"r9700_lifecycle_step": step}}],
        }
    ]
    (tmp_path / "site.yml").write_text(yaml.safe_dump(play, sort_keys=False))
    env = {**os.environ, "ANSIBLE_ROLES_PATH": str(ROOT / "roles"), "ANSIBLE_NOCOLOR": "1"}
    env["ANSIBLE_HOME"] = str(tmp_path / "home")
    extra = ["-e", f"r9700_node_program={program}"] if program else []
    done = subprocess.run(
        [str(Path(sys.executable).with_name("ansible-playbook")), "-i", "localhost,", "-c", "local",
         "-e", f"ansible_python_interpreter={sys.executable}", *extra, str(tmp_path / "site.yml")],
        capture_output=True, text=True, env=env, timeout=120, check=False,
    )  # fmt: skip
    out = done.stdout + done.stderr
    assert done.returncode == 2, out
    assert "Require a known step and the node program that does its work" in out, out
    assert "r9700_lifecycle_step must be one of converged, before, state, info, quiesce, resume" in out, out
    assert f"(got '{step}'" in out, out


def test_the_converged_step_needs_no_node_program(tmp_path: Path) -> None:
    """The check runs its own script on stdin: provision's converged step never asks for r9700-node."""
    out = run_play(tmp_path, ["r9700_env"])
    assert "Require a known step" not in out and "converged since" in out, out


def test_facts_an_earlier_play_gathered_are_kept_not_gathered_again(tmp_path: Path) -> None:
    """upgrade's first play and a site's own play gather facts: the converged step's setup is skipped."""
    out = run_play(tmp_path, ["r9700_env", "site_ntp"], gather_facts=True)
    assert "r9700_env ran" in out and f"kernel {os.uname().release}" in out, out
    gathered = out.split("TASK [r9700_probe : Converged | Gather the facts the roles read", 1)
    assert len(gathered) == 2, out
    assert "skipping: [localhost]" in gathered[1].split("TASK [", 1)[0], out


@pytest.mark.parametrize(
    ("managed", "age_s", "used"),
    [({"files": []}, 0, True), ({"files": ["/etc/other"]}, 0, False), ({"files": []}, 3600, False)],
)
def test_the_check_preflight_made_for_the_same_managed_paths_is_used_not_asked_again(
    tmp_path: Path, managed: dict, age_s: int, used: bool
) -> None:
    """Preflight's node call makes the check too (its result's converged_observed): the step uses that
    answer, with no node call of its own; made for other managed paths, or an hour ago (a fact
    cache), the node is asked."""
    answer = {"recorded_key": None, "reason": "as preflight's call found"}
    observed = {"managed": managed, "answer": answer, "at": time.time() - age_s}
    preflight = {"converged_observed": observed}  # preflight's registered result
    out = run_play(tmp_path, ["r9700_env"], play_vars={"__r9700_preflight_result": preflight})
    if used:
        assert "not converged: as preflight's call found" in out and "r9700_env ran" in out, out
    else:  # the stand-in node call answers: converged
        assert "converged since 2026-12-04 " in out and "r9700_env ran" not in out, out
