"""roles/r9700_lifecycle/tasks/converged.yml in a real ansible-playbook on localhost.

The converged check's module is replaced by a fact saying "converged" (the module is tested in
test_converge.py); what is pinned here is what the task file does with that verdict: a play of
r9700ctl's roles alone ends for the node, and a play that also runs a site's own role runs in full
(meta: end_host would skip the site's role, whose inputs the check does not know).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

CONVERGED_TASKS = (
    Path(__file__).resolve().parents[2] / "roles" / "r9700_lifecycle" / "tasks" / "converged.yml"
)
MODULE = "r9700ctl.nodes.r9700_converged"
VERDICT = {"converged": True, "reason": "converged: as the last complete run left it", "facts": {}}


def _role(roles: Path, name: str, tasks: list[dict]) -> None:
    (roles / name / "tasks").mkdir(parents=True)
    (roles / name / "tasks" / "main.yml").write_text(yaml.safe_dump(tasks, sort_keys=False))


def run_play(tmp_path: Path, role_names: list[str]) -> str:
    tasks = yaml.safe_load(CONVERGED_TASKS.read_text())
    assert any(MODULE in task for task in tasks), "converged.yml no longer asks the module first"
    stand_in = {
        "name": "Stand-in for the check: the node is converged",
        "ansible.builtin.set_fact": {"r9700_converged": VERDICT},
    }
    tasks = [stand_in if MODULE in task else task for task in tasks]
    # Each role both on the roles path and in a collection named r9700ctl.nodes, as a site finds ours.
    roles = tmp_path / "roles"
    collection_roles = tmp_path / "collections" / "ansible_collections" / "r9700ctl" / "nodes" / "roles"
    for where in (roles, collection_roles):
        _role(where, "r9700_probe", tasks)
        for name in role_names:
            short = name.rsplit(".", 1)[-1]
            _role(where, short, [{"name": f"{short} ran", "ansible.builtin.debug": {"msg": f"{short} ran"}}])
    play = [
        {
            "name": "Site",
            "hosts": "all",
            "gather_facts": False,
            "vars": {"r9700_lifecycle_skip_converged": True},
            "roles": ["r9700_probe", *role_names],
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
    done = subprocess.run(
        [
            str(Path(sys.executable).with_name("ansible-playbook")),
            "-i",
            "localhost,",
            "-c",
            "local",
            "-e",
            f"ansible_python_interpreter={sys.executable}",
            str(tmp_path / "site.yml"),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@pytest.mark.parametrize("own_role", ["r9700_env", "r9700ctl.nodes.r9700_env"])
def test_a_converged_node_ends_a_play_of_r9700ctls_roles_only(tmp_path: Path, own_role: str) -> None:
    """By its short name or the collection's: both are r9700ctl's roles."""
    out = run_play(tmp_path, [own_role])
    assert "converged: as the last complete run left it" in out
    assert "r9700_env ran" not in out, out


def test_a_play_that_also_runs_a_site_role_runs_every_role(tmp_path: Path) -> None:
    out = run_play(tmp_path, ["r9700_env", "site_ntp"])
    assert "not converged: this play also runs site_ntp (a site play of its own)" in out, out
    assert "r9700_env ran" in out and "site_ntp ran" in out, out
