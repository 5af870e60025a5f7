"""The scratch-directory actions the validate role runs the agent with (plugins/action/r9700_scratch_*.py).

Real ansible-playbook over a local connection: the shell commands the actions send are the ones a
node runs. The directory lives where TMPDIR says, so each test sees what was left behind.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml

from r9700ctl import paths


def _archive(path: Path) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        data = b"print('agent')\n"
        info = tarfile.TarInfo("r9700ctl/agent.py")
        info.size, info.mode = len(data), 0o644
        tar.addfile(info, io.BytesIO(data))
    return path


def _play(tmp_path: Path, tasks: list[dict], **environment: str) -> subprocess.CompletedProcess[str]:
    scratch = tmp_path / "node-tmp"
    scratch.mkdir(exist_ok=True)
    playbook = tmp_path / "play.yml"
    playbook.write_text(yaml.safe_dump([{"hosts": "all", "gather_facts": False, "tasks": tasks}]))
    env = {
        **os.environ,
        "ANSIBLE_COLLECTIONS_PATH": str(paths.collections_path(tmp_path / "collections")),
        "TMPDIR": str(scratch),
        "ANSIBLE_NOCOLOR": "1",
        **environment,
    }
    return subprocess.run(
        [
            str(Path(sys.executable).with_name("ansible-playbook")),
            "-i",
            "node1,",
            "-c",
            "local",
            "-e",
            f"ansible_python_interpreter={sys.executable}",
            str(playbook),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )


# Pipelining off (become su, sudo with requiretty, a site's ansible.cfg): the archive and the files
# go through Ansible's remote temporary directory instead of standard input. A TMPDIR ending in a
# slash gives mktemp's //; the plan as a mapping is what ansible-core before 2.19 makes of JSON text.
@pytest.mark.parametrize(
    ("pipelining", "tmpdir_slash", "plan"),
    [("True", "", '{"phase": "facts"}\n'), ("False", "/", {"phase": "facts"})],
    ids=["stdin", "copied"],
)
def test_a_staged_directory_gives_its_outputs_to_the_controller_keeps_one_and_is_removed(
    tmp_path: Path, pipelining: str, tmpdir_slash: str, plan: object
) -> None:
    archive = _archive(tmp_path / "agent.tar.gz")
    out, kept = tmp_path / "controller", tmp_path / "node-reports" / "quick.json"
    done = _play(
        tmp_path,
        [
            {
                "r9700ctl.nodes.r9700_scratch_stage": {
                    "archive": str(archive),
                    "prefix": "r9700ctl-validate.",
                    "files": {"plan.json": plan},
                },
                "register": "scratch",
            },
            {
                # The program runs in the directory with the given environment; its exit status is
                # returned (a failed task where it is not 0, as with the command module).
                "r9700ctl.nodes.r9700_scratch_run": {
                    "path": "{{ scratch.path }}",
                    "argv": [
                        "sh",
                        "-c",
                        'cat plan.json > report.json; echo "$GREETING it\'s"; echo err >&2; exit 3',
                    ],
                    "env": {"GREETING": "hello world"},
                },
                "register": "ran",
                "failed_when": False,
            },
            {
                # 255 is the program's, not ssh's "connection failed"; the play's environment reaches it.
                "r9700ctl.nodes.r9700_scratch_run": {
                    "path": "{{ scratch.path }}",
                    "argv": ["sh", "-c", 'echo "$FROM_PLAY"; exit 255'],
                },
                "environment": {"FROM_PLAY": "inherited"},
                "register": "ran255",
                "failed_when": False,
            },
            {
                "r9700ctl.nodes.r9700_scratch_collect": {
                    "path": "{{ scratch.path }}",
                    "record": {"rc": 0, "msg": "ü"},
                    "record_dest": f"{out}/node1.agent.json",
                    "outputs": [
                        {"src": "report.json", "dest": f"{out}/node1.json"},
                        {"src": "routes.json", "dest": f"{out}/node1.routes.json"},
                        {"src": "r9700ctl", "dest": f"{out}/not-a-file"},
                    ],
                    "keep": {"src": "report.json", "dest": str(kept)},
                },
                "register": "collected",
            },
            {
                "ansible.builtin.copy": {
                    "content": "{{ dict(path=scratch.path, collected=collected, ran=ran, ran255=ran255)"
                    " | to_json }}",
                    "dest": f"{tmp_path}/seen.json",
                }
            },
        ],
        ANSIBLE_PIPELINING=pipelining,
        TMPDIR=f"{tmp_path}/node-tmp{tmpdir_slash}",
    )
    assert done.returncode == 0, done.stdout + done.stderr
    seen = json.loads((tmp_path / "seen.json").read_text())
    staged = Path(seen["path"])
    assert staged.parent == tmp_path / "node-tmp" and staged.name.startswith("r9700ctl-validate.")
    ran = seen["ran"]
    assert (ran["rc"], ran["stdout_lines"], ran["stderr_lines"]) == (3, ["hello world it's"], ["err"])
    assert ran["msg"] == "non-zero return code"
    assert (seen["ran255"]["rc"], seen["ran255"]["stdout_lines"]) == (255, ["inherited"])
    assert not seen["ran255"].get("unreachable")
    # The plan came through whole; the record is the controller's own; a missing output is left out.
    assert json.loads((out / "node1.json").read_text()) == {"phase": "facts"}
    assert json.loads((out / "node1.agent.json").read_text()) == {"rc": 0, "msg": "ü"}
    assert not (out / "node1.routes.json").exists() and not (out / "not-a-file").exists()
    assert seen["collected"]["fetched"] == ["report.json"] and seen["collected"]["removed"] == str(staged)
    assert json.loads(kept.read_text()) == {"phase": "facts"} and kept.stat().st_mode & 0o777 == 0o644
    assert not staged.exists() and list((tmp_path / "node-tmp").iterdir()) == []


def test_collect_refuses_a_directory_the_stage_did_not_make_and_removes_nothing(tmp_path: Path) -> None:
    mine = tmp_path / "node-tmp" / "precious"
    mine.mkdir(parents=True)
    (mine / "keep.txt").write_text("x")
    done = _play(tmp_path, [{"r9700ctl.nodes.r9700_scratch_collect": {"path": str(mine)}}])
    assert done.returncode == 2
    assert "is not a scratch directory r9700_scratch_stage made; nothing removed" in done.stdout
    assert (mine / "keep.txt").read_text() == "x"


def test_an_archive_that_does_not_unpack_leaves_no_directory_and_says_why(tmp_path: Path) -> None:
    broken = tmp_path / "agent.tar.gz"
    broken.write_bytes(b"not a gzip stream")
    done = _play(
        tmp_path,
        [
            {"r9700ctl.nodes.r9700_scratch_stage": {"archive": str(broken), "prefix": "r9700ctl-cluster."}},
        ],
    )
    assert done.returncode == 2
    assert "could not unpack the agent in a scratch directory" in done.stdout
    assert list((tmp_path / "node-tmp").iterdir()) == []
    missing = _play(
        tmp_path,
        [
            {"r9700ctl.nodes.r9700_scratch_stage": {"archive": str(tmp_path / "absent.tar.gz")}},
        ],
    )
    assert missing.returncode == 2 and "cannot read the agent archive" in missing.stdout


def test_a_become_that_fails_is_a_failed_result_without_an_exit_status(tmp_path: Path) -> None:
    """A become that fails on the local connection (a wrong sudo password): a failed result with the
    connection's words in one line and no rc, as a module's would be, and the host stays reachable:
    what the validate role reads as "never ran". (On ansible-core 2.19 the task executor makes the
    same result of the error when the action does not catch it; the catch keeps it so elsewhere.)"""
    fails = tmp_path / "failing-sudo"
    fails.write_text("#!/bin/sh\necho 'sudo: 3 incorrect password attempts' >&2\nexit 1\n")
    fails.chmod(0o755)
    done = _play(
        tmp_path,
        [
            {"r9700ctl.nodes.r9700_scratch_stage": {"prefix": "r9700ctl-validate."}, "register": "scratch"},
            {
                "r9700ctl.nodes.r9700_scratch_run": {"path": "{{ scratch.path }}", "argv": ["true"]},
                "become": True,
                "become_user": "nobody",  # Ansible skips become to the user it already is
                "vars": {"ansible_become_exe": str(fails), "ansible_become_password": "wrong"},
                "register": "ran",
                "ignore_errors": True,
            },
            {"ansible.builtin.copy": {"content": "{{ ran | to_json }}", "dest": f"{tmp_path}/seen.json"}},
        ],
    )
    assert done.returncode == 0, done.stdout + done.stderr
    ran = json.loads((tmp_path / "seen.json").read_text())
    assert ran["failed"] is True and "rc" not in ran and not ran.get("unreachable"), ran
    assert "\n" not in ran["msg"], ran
    # ansible-core's words (2.19: "Premature end of stream waiting for become success or become
    # password prompt."), not this action's "no exit status came back", which would mean it ran.
    assert "password prompt" in ran["msg"] and "no exit status" not in ran["msg"], ran
