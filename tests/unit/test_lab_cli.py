"""`r9700ctl lab` as a user runs it: a real child process, exit code and output together."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from r9700ctl.errors import CannotRun
from r9700ctl.lab import hostcheck

IS_ROOT = os.geteuid() == 0


# The installed console script, as users run it (its name appears in usage hints).
SCRIPT = Path(sys.executable).with_name("r9700ctl")


def r9700ctl(*args: str, user: int | None = None, cwd=None) -> subprocess.CompletedProcess:
    argv = [str(SCRIPT), *args] if SCRIPT.exists() else [sys.executable, "-m", "r9700ctl", *args]
    if user is not None:
        argv = ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups", *argv]
    env = {**os.environ, "NO_COLOR": "1"}
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=cwd, env=env)


@pytest.mark.skipif(IS_ROOT and shutil.which("setpriv") is None, reason="needs setpriv to drop root")
def test_lab_up_without_root_says_so_in_one_line_and_exits_3(tmp_path):
    result = r9700ctl("lab", "up", "--dir", str(tmp_path / "lab"), user=65534 if IS_ROOT else None, cwd="/")
    assert result.returncode == 3, result.stderr
    assert result.stdout == ""
    # The venv's r9700ctl is not on sudo's PATH: the fix names the program by its full path.
    program = str(SCRIPT) if SCRIPT.exists() else f"{sys.executable} -m r9700ctl"
    assert result.stderr == (
        "error: 'r9700ctl lab up' needs root: it creates network namespaces, mounts and daemons "
        "(run it as root by its full path, as sudo's PATH does not hold your virtual environment: "
        f"sudo {program} lab up)\n"
    )
    assert not (tmp_path / "lab").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--nodes", "0"], "Invalid value for '--nodes': 0 is not in the range 1<=x<=200."),
        (["--gpus", "17"], "Invalid value for '--gpus': 17 is not in the range 1<=x<=16."),
    ],
)
def test_out_of_range_counts_are_bad_input(tmp_path, args, message):
    result = r9700ctl("lab", "up", "--dir", str(tmp_path / "lab"), *args)
    assert result.returncode == 64
    assert result.stderr == f"error: {message} (try 'r9700ctl lab up --help')\n"


def test_an_unknown_recording_is_bad_input_naming_the_known_ones(tmp_path):
    result = r9700ctl("lab", "up", "--dir", str(tmp_path / "lab"), "--recorded", "r9700-99x")
    assert result.returncode == 64
    assert result.stderr.startswith("error: no recorded scenario 'r9700-99x' (recorded scenarios: ")
    assert result.stderr.count("\n") == 1
    assert not (tmp_path / "lab").exists()


def test_status_of_a_directory_without_a_lab_exits_3(tmp_path):
    result = r9700ctl("lab", "status", "--dir", str(tmp_path))
    assert (result.returncode, result.stdout, result.stderr) == (
        3,
        f"no lab in {tmp_path} (start one: sudo r9700ctl lab up --dir {tmp_path})\n",
        "",
    )


def test_status_json_dash_prints_the_json_alone_and_a_path_writes_it_beside_the_text(tmp_path):
    """--json PATH as in every other command: '-' is standard output, a path is a file."""
    as_json = r9700ctl("lab", "status", "--dir", str(tmp_path), "--json", "-")
    assert (as_json.returncode, as_json.stderr) == (3, "")
    data = json.loads(as_json.stdout)  # nothing but the document on stdout
    assert data["schema"] == "r9700ctl.lab.status/1"
    assert (data["exists"], data["healthy"]) == (False, False)
    path = tmp_path / "status.json"
    to_file = r9700ctl("lab", "status", "--dir", str(tmp_path), "--json", str(path))
    assert (to_file.returncode, to_file.stdout) == (
        3,
        f"no lab in {tmp_path} (start one: sudo r9700ctl lab up --dir {tmp_path})\n",
    )
    assert json.loads(path.read_text()) == data
    missing = r9700ctl("lab", "status", "--dir", str(tmp_path), "--json", str(tmp_path / "no" / "s.json"))
    assert missing.returncode == 64 and missing.stderr.count("\n") == 1


def test_missing_host_tools_are_named_with_the_apt_get_command(monkeypatch):
    monkeypatch.setattr(hostcheck, "HOST_TOOLS", {"ip": "iproute2", "r97-no-such-tool": "r97-pkg"})
    with pytest.raises(CannotRun) as caught:
        hostcheck.require_tools()
    assert caught.value.one_line() == (
        "the lab needs host tools that are missing: r97-no-such-tool "
        "(install them: apt-get install -y r97-pkg)"
    )
    assert caught.value.exit_code == 3


@pytest.mark.skipif(not IS_ROOT, reason="lab down needs root")
def test_down_where_there_is_no_lab_removes_nothing_and_succeeds(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    result = r9700ctl("lab", "down", "--dir", str(tmp_path))
    assert (result.returncode, result.stdout, result.stderr) == (
        0,
        f"no lab in {tmp_path}: nothing to remove\n",
        "",
    )
    assert (tmp_path / "notes.txt").read_text() == "mine"


@pytest.mark.skipif(not IS_ROOT or hostcheck.missing_tools(), reason="needs root and the lab's host tools")
def test_up_refuses_a_directory_whose_files_it_would_overwrite(tmp_path):
    """Bug pinned: `lab up --dir ~/project` would overwrite, and `down` delete, the user's inventory.ini."""
    (tmp_path / "inventory.ini").write_text("[mine]\n")
    result = r9700ctl("lab", "up", "--dir", str(tmp_path))
    assert result.returncode == 64
    assert result.stderr == (
        f"error: {tmp_path} is not a lab directory but holds inventory.ini "
        "(choose an empty or new directory with --dir)\n"
    )
    assert (tmp_path / "inventory.ini").read_text() == "[mine]\n"


def test_help_says_it_is_a_test_environment_and_shows_examples():
    result = r9700ctl("lab", "--help")
    assert result.returncode == 0
    assert "TEST and DEMO environment, never production" in " ".join(result.stdout.split())
    assert "sudo r9700ctl lab up --nodes 2" in result.stdout
    for command in ("up", "status", "down"):
        sub = r9700ctl("lab", command, "--help")
        assert sub.returncode == 0 and "Example:" in sub.stdout and "R9700CTL_LAB_DIR" in sub.stdout
