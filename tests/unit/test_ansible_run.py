"""The runner against a real ansible-playbook: `localhost ansible_connection=local`, tiny playbooks.

What is pinned: Ansible's counts per host (as its PLAY RECAP has them), the first error line of
a failed task, the reboot-pending convention, the kept run directory, the become password and
secret-looking environment values absent from every file of it, and Ctrl-C stopping the run.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from datetime import datetime, timezone
from pathlib import Path

import psutil
import pytest
from child_process import interruptible

from r9700ctl.ansible_run import (
    CHANGED,
    FAILED,
    INTERRUPTED,
    MAX_FORKS,
    OK,
    RunRequest,
    _new_run_dir,
    first_error_line,
    forks_for,
    quiet_python_warnings,
    run_playbook,
)
from r9700ctl.provision import RoleFacts
from r9700ctl.report.provision import known_issue_lines


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return path


@pytest.fixture
def inventory(tmp_path: Path) -> Path:
    return write(
        tmp_path / "inventory.ini",
        f"[r9700_nodes]\nlocalhost ansible_connection=local ansible_python_interpreter={sys.executable}\n",
    )


def play(tmp_path: Path, tasks: str, name: str = "play.yml") -> Path:
    body = textwrap.indent(textwrap.dedent(tasks).strip("\n"), "    ")
    return write(
        tmp_path / name,
        "- name: Test play\n  hosts: r9700_nodes\n  gather_facts: false\n  tasks:\n" + body + "\n",
    )


def test_counts_first_error_line_and_reboot_flag_come_from_the_events(
    tmp_path: Path, inventory: Path
) -> None:
    """Counts follow Ansible's recap (ok includes changed); an ignored failure is not a failure;
    a command's first stderr line says more than 'non-zero return code'."""
    playbook = play(
        tmp_path,
        """
        - name: Nothing to do
          ansible.builtin.command: "true"
          changed_when: false
        - name: Change something
          ansible.builtin.command: "true"
        - name: Ask for a reboot the role may not do itself
          ansible.builtin.set_fact:
            r9700_reboot_pending: true
            r9700_reboot_reasons: [amdgpu-dkms installed]
            r9700_versions: {before: {}, after: {rocm: "6.4.1.60401-83~24.04"}}
            r9700_some_new_role: {said: hello}
            unrelated_fact: not kept
            r9700_resolved:
              p2p: {state: "off", reason: "off: 1 GPU(s), no peer to talk to"}
              rocm_choice: "auto -> ROCm 7.1.1 (newest supporting gfx1201; skipped 7.2.3: known issue x)"
              known_issues: [{id: x, title: X hangs, blocking: true, in_force: "applied: A=1", source: "https://e/1"}]
        - name: Not on this host
          ansible.builtin.command: "true"
          when: false
        - name: Allowed to fail
          ansible.builtin.command: "false"
          ignore_errors: true
        - name: Break
          ansible.builtin.shell: "echo 'first line of trouble' >&2; echo second >&2; exit 3"
        - name: Never reached
          ansible.builtin.command: "true"
        """,
    )
    seen = []
    result = run_playbook(
        RunRequest(playbook=playbook, inventory=inventory, runs_dir=tmp_path / "runs"),
        on_progress=lambda p: seen.append((p.kind, p.task, p.counts.ok)),
    )
    host = result.hosts["localhost"]
    assert (result.status, result.rc, result.stats_complete) == ("failed", 2, True)
    assert (host.ok, host.changed, host.failed, host.skipped, host.ignored, host.unreachable) == (
        4,
        2,
        1,
        1,
        1,
        0,
    )
    assert host.status == FAILED
    assert (host.reboot_pending, host.reboot_reasons) == (True, ["amdgpu-dkms installed"])
    # Every r9700_* fact the play set, a role the runner never heard of included; nothing else.
    assert host.fact("r9700_some_new_role") == {"said": "hello"} and "unrelated_fact" not in host.facts
    facts = RoleFacts.of(host)  # what provision picks from them
    assert facts.versions == {"before": {}, "after": {"rocm": "6.4.1.60401-83~24.04"}}
    assert facts.p2p == {"state": "off", "reason": "off: 1 GPU(s), no peer to talk to"}
    assert known_issue_lines([host]) == [
        "localhost: auto -> ROCm 7.1.1 (newest supporting gfx1201; skipped 7.2.3: known issue x)",
        "localhost: known issue x: X hangs; workaround applied: A=1; see https://e/1",
    ]
    assert [(t.task, t.message) for t in host.failed_tasks] == [("Break", "rc 3: first line of trouble")]
    assert host.first_error == "Break: rc 3: first line of trouble"
    assert seen[:4] == [
        ("start", "Nothing to do", 0),
        ("ok", "Nothing to do", 1),
        ("start", "Change something", 1),
        ("changed", "Change something", 2),
    ]
    assert ("failed", "Break", 4) in seen and all(task != "Never reached" for _, task, _ in seen)


def test_a_rescued_failure_leaves_the_host_ok(tmp_path: Path, inventory: Path) -> None:
    playbook = play(
        tmp_path,
        """
        - name: Try and recover
          block:
            - name: Fail inside a block
              ansible.builtin.command: "false"
              changed_when: false
          rescue:
            - name: Recover
              ansible.builtin.debug:
                msg: recovered
        """,
    )
    result = run_playbook(RunRequest(playbook=playbook, inventory=inventory, runs_dir=tmp_path / "runs"))
    host = result.hosts["localhost"]
    assert (result.status, host.failed, host.rescued, host.status) == ("successful", 0, 1, OK)
    assert host.failed_tasks[0].rescued and host.first_error == ""


def test_the_run_directory_is_kept_private_with_request_events_and_output(
    tmp_path: Path, inventory: Path
) -> None:
    playbook = play(tmp_path, '- name: Change\n  ansible.builtin.command: "true"\n')
    result = run_playbook(
        RunRequest(playbook=playbook, inventory=inventory, runs_dir=tmp_path / "runs", extra_vars={"x": 1})
    )
    assert result.hosts["localhost"].status == CHANGED
    assert result.run_dir.parent == tmp_path / "runs"
    assert result.run_dir.stat().st_mode & 0o777 == 0o700
    assert result.artifact_dir == result.run_dir / "artifacts" / "ansible"
    request = json.loads((result.run_dir / "request.json").read_text())
    assert request["playbook"] == str(playbook) and request["extra_vars"] == {"x": 1}
    assert request["become_password"] is None
    assert (result.artifact_dir / "rc").read_text() == "0"
    assert (result.artifact_dir / "status").read_text() == "successful"
    assert "PLAY RECAP" in (result.artifact_dir / "stdout").read_text()
    events = [json.loads(p.read_text()) for p in (result.artifact_dir / "job_events").glob("*.json")]
    assert {"playbook_on_start", "runner_on_ok", "playbook_on_stats"} <= {e["event"] for e in events}
    assert result.started_at <= result.finished_at and result.duration_s > 0


def test_the_become_password_and_secret_environment_values_never_reach_a_file(
    tmp_path: Path, inventory: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The password answers ansible-playbook's prompt through pexpect; ansible-runner would
    otherwise write it to env/passwords, and it records the whole environment in `command`."""
    password = "pw-7f3c9a1e-not-in-any-file"
    token = "tok-5b2d8c4f-not-in-any-file"
    monkeypatch.setenv("SOME_API_TOKEN", token)
    playbook = play(tmp_path, '- name: Change\n  ansible.builtin.command: "true"\n')
    result = run_playbook(
        RunRequest(
            playbook=playbook,
            inventory=inventory,
            runs_dir=tmp_path / "runs",
            become_password=password,
            envvars={"OTHER_SECRET": token},
        )
    )
    assert result.status == "successful"  # the prompt was answered, or the run would have hung
    stdout = (result.artifact_dir / "stdout").read_text()
    assert stdout.startswith("BECOME password:")
    command = json.loads((result.artifact_dir / "command").read_text())
    assert "--ask-become-pass" in command["command"]
    assert command["env"]["SOME_API_TOKEN"] == "<redacted>"
    files = [p for p in result.run_dir.rglob("*") if p.is_file()]
    assert len(files) > 10
    for path in files:
        content = path.read_bytes()
        assert password.encode() not in content, path
        assert token.encode() not in content, path
    assert json.loads((result.run_dir / "request.json").read_text())["become_password"] == "<redacted>"


def test_host_key_checking_stays_on_whatever_the_environment_says(
    tmp_path: Path, inventory: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANSIBLE_HOST_KEY_CHECKING", "False")
    playbook = play(tmp_path, '- name: Nothing\n  ansible.builtin.command: "true"\n  changed_when: false\n')
    result = run_playbook(RunRequest(playbook=playbook, inventory=inventory, runs_dir=tmp_path / "runs"))
    env = json.loads((result.artifact_dir / "command").read_text())["env"]
    assert env["ANSIBLE_HOST_KEY_CHECKING"] == "True"
    assert env["ANSIBLE_PIPELINING"] == "True"
    assert env["PATH"].split(os.pathsep)[0] == str(Path(sys.executable).parent)
    assert len(env["ANSIBLE_SSH_CONTROL_PATH_DIR"]) < 40  # + 40-char hash stays under the socket limit


def test_ansibles_unactionable_deprecation_warning_is_silenced_and_the_users_filters_kept(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """cryptography 51 warns "DSA is deprecated" when ansible-core imports it: a stderr line at every
    start of ansible-playbook that a user cannot act on (and that read as the reason a run stopped)."""
    monkeypatch.setenv("PYTHONWARNINGS", "error::ResourceWarning")
    warnings = quiet_python_warnings()
    assert warnings.startswith("error::ResourceWarning,")
    script = (
        "import warnings\n"
        "class CryptographyDeprecationWarning(UserWarning): pass\n"
        "warnings.warn('DSA is deprecated and support will be removed', CryptographyDeprecationWarning)\n"
        "warnings.warn('another warning', UserWarning)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], env={**os.environ, "PYTHONWARNINGS": warnings},
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert "DSA" not in done.stderr and "another warning" in done.stderr


def test_a_playbook_that_stops_before_any_host_gives_its_first_error_line(
    tmp_path: Path, inventory: Path
) -> None:
    playbook = write(
        tmp_path / "broken.yml",
        "- name: Broken\n  hosts: r9700_nodes\n  roles:\n    - role: r9700_no_such_role\n",
    )
    result = run_playbook(RunRequest(playbook=playbook, inventory=inventory, runs_dir=tmp_path / "runs"))
    assert result.status == "failed" and result.hosts == {}
    assert result.error.startswith("[ERROR]: the role 'r9700_no_such_role' was not found"), result.error


def test_two_runs_in_the_same_second_get_their_own_directories(tmp_path: Path) -> None:
    moment = datetime(2026, 12, 2, 13, 0, 0, tzinfo=timezone.utc)
    first, second = _new_run_dir(tmp_path, moment), _new_run_dir(tmp_path, moment)
    assert (first.name, second.name) == ("20261202T130000Z", "20261202T130000Z-1")


@pytest.mark.parametrize(
    ("res", "line"),
    [
        pytest.param(
            {"msg": "Could not find the requested service foo: host"},
            "Could not find the requested service foo: host",
            id="a module's own message",
        ),
        pytest.param(
            {"msg": "Task failed: Failed to connect to the host via ssh: refused\nmore"},
            "Failed to connect to the host via ssh: refused",
            id="ansible 2.19 prefix dropped",
        ),
        pytest.param(
            {"msg": "non-zero return code", "rc": 100, "stderr": "\nE: Unable to locate package rocm\n"},
            "rc 100: E: Unable to locate package rocm",
            id="a command's stderr",
        ),
        pytest.param(
            {"msg": "MODULE FAILURE\nSee stdout/stderr", "module_stderr": "Traceback (most recent call)"},
            "MODULE FAILURE: Traceback (most recent call)",
            id="a crashed module",
        ),
        pytest.param(
            {
                "msg": "One or more items failed",
                "results": [{"failed": False}, {"failed": True, "msg": "No package matching 'rocm-x'"}],
            },
            "No package matching 'rocm-x'",
            id="the failed item of a loop",
        ),
        pytest.param({}, "failed (no message)", id="nothing to say"),
    ],
)
def test_the_first_error_line_is_the_one_that_explains(res: dict, line: str) -> None:
    assert first_error_line(res) == line


CTRL_C_DRIVER = """
import json, sys
from pathlib import Path
from r9700ctl.ansible_run import RunRequest, run_playbook

def show(progress):
    print(json.dumps([progress.host, progress.kind, progress.task]), flush=True)

playbook, inventory, runs = (Path(arg) for arg in sys.argv[1:4])
result = run_playbook(RunRequest(playbook=playbook, inventory=inventory, runs_dir=runs), on_progress=show)
hosts = {h.host: [h.status, h.current_task] for h in result.hosts.values()}
interrupted = [h.host for h in result.interrupted_hosts]
print(json.dumps({"status": result.status, "hosts": hosts, "interrupted": interrupted}))
"""


def test_ctrl_c_stops_ansible_and_names_the_hosts_left_mid_way(tmp_path: Path, inventory: Path) -> None:
    """A real child process gets SIGINT while a host sleeps in a task: ansible-playbook must stop
    (not run the task to its end), and the result says which host was left in which task."""
    marker = "317.25"  # a sleep no other process on this machine runs
    playbook = play(
        tmp_path,
        f"""
        - name: Quick step
          ansible.builtin.command: "true"
        - name: Long step
          ansible.builtin.command: sleep {marker}
        - name: After the long step
          ansible.builtin.command: "true"
        """,
    )
    driver = write(tmp_path / "driver.py", CTRL_C_DRIVER)
    child = subprocess.Popen(
        [sys.executable, str(driver), str(playbook), str(inventory), str(tmp_path / "runs")],
        stdout=subprocess.PIPE,
        text=True,
        preexec_fn=interruptible,  # SIGINT as at a terminal
    )
    assert child.stdout is not None
    lines = []
    interrupted_at = None
    for line in child.stdout:
        lines.append(line)
        if '"start", "Long step"' in line and interrupted_at is None:
            deadline = time.monotonic() + 30
            while not _sleep_running(marker) and time.monotonic() < deadline:
                time.sleep(0.1)
            child.send_signal(signal.SIGINT)
            interrupted_at = time.monotonic()
    child.wait(timeout=60)
    assert interrupted_at is not None, "".join(lines)
    assert time.monotonic() - interrupted_at < 20, "the run was not stopped"
    summary = json.loads(lines[-1])
    assert summary["status"] == "canceled"
    assert summary["hosts"]["localhost"] == [INTERRUPTED, "Long step"]
    assert summary["interrupted"] == ["localhost"]
    assert not any("After the long step" in line for line in lines[:-1])
    assert not _sleep_running(marker), "ansible left its task running"


def _sleep_running(marker: str) -> bool:
    return any(process.info["cmdline"] == ["sleep", marker] for process in psutil.process_iter(["cmdline"]))


def test_an_unreachable_hosts_first_error_is_the_connection_failure_not_the_task_that_met_it() -> None:
    from r9700ctl.ansible_run import FailedTask, HostResult

    host = HostResult(host="n1", unreachable=1, started=True)
    host.failed_tasks.append(
        FailedTask(
            task="Validate | Ensure a private scratch directory exists on the node.",
            message="Failed to connect to the host via ssh: "
            "ssh: connect to host 10.0.0.5 port 22: Connection refused",
            unreachable=True,
        )
    )
    assert host.first_error == "ssh: connect to host 10.0.0.5 port 22: Connection refused"


def test_a_first_run_on_a_fresh_node_prints_no_remote_tmp_warning(
    tmp_path: Path, inventory: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Bug pinned: every node of a first provision printed "Module remote_tmp /root/.ansible/tmp did
    not exist and was created with a mode of 0700": with pipelining, a module needing a scratch
    directory (get_url here, r9700_repos' key download on a node) creates ~/.ansible/tmp and warns.
    A fresh home directory plays the fresh node."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    # The controller's own scratch directory is ~/.ansible/tmp too; on a real node they differ.
    monkeypatch.setenv("ANSIBLE_LOCAL_TEMP", str(tmp_path / "controller-tmp"))
    for name in ("ANSIBLE_REMOTE_TMP", "ANSIBLE_REMOTE_TEMP", "ANSIBLE_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    source = write(tmp_path / "key.asc", "a key\n")
    playbook = play(
        tmp_path,
        f"""
        - name: Fetch a file as r9700_repos fetches the signing key
          ansible.builtin.get_url:
            url: file://{source}
            dest: {tmp_path / "fetched.asc"}
            mode: "0644"
        """,
    )
    result = run_playbook(RunRequest(playbook=playbook, inventory=inventory, runs_dir=tmp_path / "runs"))
    assert result.status == "successful", result.error
    assert (tmp_path / "fetched.asc").read_text() == "a key\n"
    stdout = (result.artifact_dir / "stdout").read_text()
    assert "remote_tmp" not in stdout and "WARNING" not in stdout, stdout


def test_a_remote_tmp_the_user_configured_is_kept(
    tmp_path: Path, inventory: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """r9700ctl picks remote_tmp only where the user did not: their ansible.cfg's value stands."""
    from r9700ctl.ansible_run import _environment

    for name in ("ANSIBLE_REMOTE_TMP", "ANSIBLE_REMOTE_TEMP", "ANSIBLE_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    request = RunRequest(playbook=tmp_path / "p.yml", inventory=inventory)
    assert _environment(request, tmp_path)["ANSIBLE_REMOTE_TMP"] == "/tmp"
    write(tmp_path / "ansible.cfg", "[defaults]\nremote_tmp = /var/tmp/ops\n")
    assert "ANSIBLE_REMOTE_TMP" not in _environment(request, tmp_path)


def test_a_collection_playbook_runs_from_this_installation_even_where_the_user_has_another_copy(
    tmp_path: Path, inventory: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """r9700ctl runs its collection's playbooks by name (r9700ctl.nodes.collect): the copy it runs is
    the one installed with it, ahead of an r9700ctl.nodes in the user's ANSIBLE_COLLECTIONS_PATH (an
    older release installed with ansible-galaxy), which stays on the path after it."""
    from r9700ctl import paths

    theirs = tmp_path / "their-collections"
    old = theirs / "ansible_collections" / "r9700ctl" / "nodes"
    write(old / "galaxy.yml", "namespace: r9700ctl\nname: nodes\nversion: 0.0.1\n")
    write(
        old / "playbooks" / "collect.yml",
        "- name: Old copy\n  hosts: all\n  gather_facts: false\n  tasks:\n"
        "    - name: The user's old copy ran\n      ansible.builtin.fail:\n        msg: old copy\n",
    )
    monkeypatch.setenv("ANSIBLE_COLLECTIONS_PATH", str(theirs))
    result = run_playbook(
        RunRequest(playbook=paths.playbook("collect.yml"), inventory=inventory, runs_dir=tmp_path / "runs")
    )
    # r9700_collect's own first check: r9700_collect_dest was not given.
    assert result.hosts["localhost"].first_error.startswith(
        "Preflight | Ensure the bundle destination is an absolute path on the controller.: "
        "r9700_collect_dest must be an absolute directory on the controller"
    ), result.hosts["localhost"].first_error
    command = json.loads((result.artifact_dir / "command").read_text())
    assert "r9700ctl.nodes.collect" in command["command"]
    ours, user = command["env"]["ANSIBLE_COLLECTIONS_PATH"].split(os.pathsep)
    assert (Path(ours) / "ansible_collections/r9700ctl/nodes").resolve() == paths.collection_root()
    assert user == str(theirs)


@pytest.mark.parametrize(
    ("forks", "hosts", "used"),
    [
        pytest.param(None, 3, 3, id="one per host"),
        pytest.param(None, 0, 1, id="no count given: one"),
        pytest.param(None, 120, MAX_FORKS, id="a large fleet: at most MAX_FORKS"),
        pytest.param(7, 120, 7, id="the number asked for"),
    ],
)
def test_forks_default_to_one_per_host_up_to_max_forks(forks: int | None, hosts: int, used: int) -> None:
    """Issue 20 item 7: every caller wrote max(1, min(hosts, 50)) itself, uninstall a bare 50."""
    assert (
        forks_for(RunRequest(playbook=Path("p.yml"), inventory=Path("i"), forks=forks, hosts=hosts)) == used
    )
