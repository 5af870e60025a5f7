"""`r9700ctl doctor` as a user runs it: exit codes, the lines printed, --json, and bad input as one
line with exit 64 before any host is contacted. Bad input goes through the real entry point (a
child process) because only cli.main() turns errors into one line; the rest uses CliRunner."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from child_process import interruptible
from click.testing import CliRunner

from r9700ctl.cli import cli

RECORDED = Path(__file__).resolve().parents[2] / "r9700ctl" / "data" / "recorded"


def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """The installed console script, as a user types it (python -m r9700ctl where there is none)."""
    script = Path(sys.executable).with_name("r9700ctl")
    command = [str(script)] if script.exists() else [sys.executable, "-m", "r9700ctl"]
    env = dict(os.environ, NO_COLOR="1", COLUMNS="100")
    return subprocess.run(
        [*command, "doctor", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=120,
        check=False,
    )


def invoke(*args: str):
    return CliRunner().invoke(cli, ["doctor", *args], catch_exceptions=False)


# ---------------------------------------------------------------- bad input: one line, exit 64


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (
            [],
            "error: missing INVENTORY (or --bundle DIR) (r9700ctl doctor inventory.ini, or r9700ctl doctor "
            "--bundle ./support)",
        ),
        (
            ["inv.ini", "--bundle", "x"],
            "error: give either INVENTORY (inv.ini) or --bundle DIR, not both (--bundle reads recorded "
            "outputs "
            "offline; INVENTORY checks live hosts)",
        ),
        (
            ["--bundle", "x", "--accept-new-host-keys"],
            "error: --accept-new-host-keys has no meaning with --bundle (--bundle contacts no host; drop the "
            "option)",
        ),
        (
            ["--bundle", "no-such-dir"],
            "error: no-such-dir: bundle directory not found (give the directory `r9700ctl collect --out` "
            "wrote, "
            "or one node's directory in it)",
        ),
        (
            ["inv.ini", "--timeout", "0"],
            "error: --timeout must be more than 0 seconds, not 0 (try --timeout 10)",
        ),
        (
            ["inv.ini", "--json", "nodir/out.json"],
            "error: nodir/out.json: --json: directory nodir does not exist (create the directory first or "
            "give "
            "another path)",
        ),
        (
            ["missing.ini"],
            "error: missing.ini: inventory file not found (give the path of an INI or YAML inventory; "
            "inventory/example.ini shows the format)",
        ),
        (
            ["inv.ini", "--timeout", "soon"],
            "error: Invalid value for '--timeout': 'soon' is not a valid float. (try 'r9700ctl doctor "
            "--help')",
        ),
    ],
    ids=[
        "nothing",
        "both",
        "accept-with-bundle",
        "no-bundle-dir",
        "timeout-0",
        "json-dir",
        "no-inventory",
        "timeout-word",
    ],
)
def test_bad_input_is_one_line_and_exit_64(tmp_path, args, line):
    (tmp_path / "inv.ini").write_text("[r9700_nodes]\nnode1 ansible_host=192.0.2.1\n")

    result = run(*args, cwd=tmp_path)

    assert result.returncode == 64, result.stderr
    assert result.stdout == ""
    assert result.stderr.splitlines() == [line]


def test_an_empty_directory_as_bundle_is_bad_input(tmp_path):
    result = run("--bundle", str(tmp_path))

    assert result.returncode == 64
    assert result.stderr.startswith(f"error: {tmp_path}: no bundle files here or in its subdirectories")
    assert len(result.stderr.splitlines()) == 1


# ---------------------------------------------------------------- --bundle


def test_a_recorded_bundle_prints_gpus_findings_with_evidence_and_what_was_not_judged():
    result = invoke("--bundle", str(RECORDED / "r9700-igpu"))

    assert result.exit_code == 1, result.output
    lines = result.output.splitlines()
    assert lines[0] == f"bundle {RECORDED / 'r9700-igpu'} (node r9700-igpu)"
    assert lines[1:4] == [
        "  GPUs: 1 discrete: 1 x AMD Radeon AI PRO R9700 (gfx1201)",
        "    0000:03:00.0  AMD Radeon AI PRO R9700 (1002:7551, gfx1201, 29.9 GiB)",
        "    0000:0d:00.0  AMD Radeon Graphics (?, ?, 2 GiB, integrated)",
    ]
    assert (
        "  WARN  an integrated GPU (AMD Radeon Graphics, ? at 0000:0d:00.0) sits beside 1 discrete card(s)"
        in (result.output)
    )
    assert "        evidence: amd-smi.txt:13: | 0000:0d:00.0    AMD Radeon Graphics |" in result.output
    assert "        code: IGPU_BESIDE_DISCRETE" in lines  # issue 20: the reason code, for explain
    assert "  could not judge the IOMMU mode because cmdline.txt is missing" in lines
    assert lines[-1] == "  r9700-igpu: WARN (0 failed, 1 warnings, 0 notes, 8 not judged)"  # + aer.txt


def test_tool_output_in_brackets_is_printed_as_it_is_not_as_markup():
    """Regression: rich swallowed '[gfxhub]' from dmesg evidence as a style tag."""
    result = invoke("--bundle", str(RECORDED / "rx9070xt-igpu"))

    assert "amdgpu: [gfxhub] page fault (src_id:0 ring:40 vmid:8 pasid:32781)" in result.output


def test_json_to_stdout_replaces_the_text_and_keeps_the_exit_code():
    result = invoke("--bundle", str(RECORDED / "r9700-vm-initfail"), "--json", "-")

    assert result.exit_code == 2
    document = json.loads(result.output)
    assert (document["schema"], document["mode"], document["exit_code"]) == ("r9700ctl.doctor/1", "bundle", 2)
    bundle = document["bundles"][0]
    assert bundle["status"] == "FAIL"
    probe = next(f for f in bundle["findings"] if f["id"] == "dmesg.amdgpu_probe_failed")
    assert probe["evidence"] == [
        {
            "file": "dmesg.txt",
            "line": 10,
            "text": "[    7.292763] amdgpu: probe of 0000:01:00.0 failed with error -22",
        }
    ]
    assert {"topic", "files", "reason", "text"} <= set(bundle["not_judged"][0])


def test_json_to_a_file_is_written_and_the_table_still_printed(tmp_path):
    out = tmp_path / "doctor.json"

    result = invoke("--bundle", str(RECORDED / "r9700-3x"), "--json", str(out))

    assert result.exit_code == 4
    assert "r9700-3x: INCONCLUSIVE" in result.output
    assert json.loads(out.read_text())["bundles"][0]["gpus"][2]["bdf"] == "0000:45:00.0"
    assert not list(tmp_path.glob("*.tmp"))


def test_a_collect_directory_gets_one_report_per_node_and_a_summary(tmp_path):
    shutil.copytree(RECORDED / "r9700-vm-initfail", tmp_path / "node2")
    shutil.copytree(RECORDED / "r9700-3x", tmp_path / "node1")

    result = invoke("--bundle", str(tmp_path))

    assert result.exit_code == 2  # node2's FAIL outranks node1's INCONCLUSIVE, as in validate
    assert result.output.index("(node node1)") < result.output.index("(node node2)")
    assert result.output.splitlines()[-1] == (
        "2 bundles: 0 passed, 1 failed, 0 with warnings only, 1 inconclusive (failed: node2; "
        "inconclusive (no GPU listed, or too few checks judged): node1)"
    )


def test_notes_are_hidden_unless_verbose():
    quiet = invoke("--bundle", str(RECORDED / "rx6600-1x"))
    verbose = invoke("--bundle", str(RECORDED / "rx6600-1x"), "--verbose")

    assert "2 note(s) not shown (--verbose shows them)" in quiet.output
    # the manifest's device_targets name the RX 6600 (its true target behind an override), not as a model
    assert (
        "  INFO  1002:73ff (AMD Radeon RX 6600 / 6600 XT / 6600M) at 0000:0b:00.0 is not a model in"
        in verbose.output
    )


# ---------------------------------------------------------------- hosts, on loopback


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_a_host_whose_port_refuses_is_reported_unreachable_with_exit_3_and_json(tmp_path):
    """A real run end to end without the lab: inventory check, parallel SSH checks, table, JSON."""
    port = closed_port()
    inv = tmp_path / "inventory.ini"
    inv.write_text(
        f"[r9700_nodes]\nnode1 ansible_host=127.0.0.1 ansible_port={port}\n"
        f"node2 ansible_host=127.0.0.1 ansible_port={closed_port()}\n"
    )
    out = tmp_path / "doctor.json"

    result = run(str(inv), "--json", str(out))

    assert result.returncode == 3, result.stderr
    assert result.stdout.rstrip().splitlines()[-1] == (
        "2 host(s): 0 ready; 2 could not be reached or logged in to (node1, node2); exit 3"
    )
    assert sorted(line.split(" (")[0] for line in result.stderr.splitlines()) == [
        "node1: ERROR",
        "node2: ERROR",
    ]
    document = json.loads(out.read_text())
    assert (document["schema"], document["mode"], document["exit_code"]) == ("r9700ctl.doctor/1", "hosts", 3)
    node1 = document["hosts"][0]
    assert (node1["host"], node1["reached"], node1["status"]) == ("node1", False, "ERROR")
    assert [(c["id"], c["status"]) for c in node1["checks"]] == [
        ("ssh.resolve", "PASS"),
        ("ssh.connect", "ERROR"),
    ]
    assert (
        node1["checks"][1]["fix"]
        == "start sshd on node1 (systemctl start ssh) or set ansible_port to its SSH port"
    )


def test_the_help_teaches_both_modes_and_the_exit_codes():
    result = invoke("--help")

    assert result.exit_code == 0
    for needle in (
        "r9700ctl doctor inventory.ini",
        "r9700ctl doctor --bundle ./support",
        "--accept-new-host-keys",
        "3 a host could not be reached",
        "64 bad input",
        "R9700CTL_GROUP",
    ):
        assert needle in result.output


@pytest.fixture
def web_server_port():
    """A loopback TCP server answering like a web server: SSH handshakes against it fail."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(4)
    server.settimeout(0.2)
    stop = threading.Event()

    def serve():
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            with conn:
                conn.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stop.set()
    thread.join(timeout=5)
    server.close()


def test_a_failed_handshake_leaves_no_paramiko_traceback_on_stderr(tmp_path, web_server_port):
    """Regression: paramiko's transport thread logged a traceback that Python printed to stderr."""
    inv = tmp_path / "inventory.ini"
    inv.write_text(f"[r9700_nodes]\nweb ansible_host=127.0.0.1 ansible_port={web_server_port}\n")

    result = run(str(inv), "--timeout", "3", "--json", str(tmp_path / "d.json"))

    assert result.returncode == 3
    assert result.stderr.splitlines() == [
        line for line in result.stderr.splitlines() if line.startswith("web: ERROR")
    ]
    handshake = json.loads((tmp_path / "d.json").read_text())["hosts"][0]["checks"][-1]
    assert handshake["id"] == "ssh.handshake"
    assert "accepts connections but does not speak SSH" in handshake["detail"]


def test_ctrl_c_ends_a_run_at_once_with_exit_130(tmp_path):
    """Regression: a thread pool waited for every host's SSH timeout (here 60 s) after Ctrl-C."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(4)  # accepts into the backlog and never answers: the SSH banner never comes
    inv = tmp_path / "inventory.ini"
    inv.write_text(f"[r9700_nodes]\nmute ansible_host=127.0.0.1 ansible_port={server.getsockname()[1]}\n")
    child = subprocess.Popen(
        [sys.executable, "-m", "r9700ctl", "doctor", str(inv), "--timeout", "60"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ, NO_COLOR="1"),
        preexec_fn=interruptible,
    )
    try:
        server.settimeout(60)
        connection, _ = server.accept()
        connection.settimeout(60)
        assert connection.recv(64).startswith(b"SSH-")  # doctor's own banner: it now waits for ours
        started = time.monotonic()
        child.send_signal(signal.SIGINT)
        out, err = child.communicate(timeout=30)
    finally:
        child.kill()
        server.close()
    connection.close()

    assert child.returncode == 130
    assert time.monotonic() - started < 10
    assert err.strip().splitlines() == ["interrupted"]
    assert out == ""


def test_a_host_whose_checks_all_skipped_is_not_called_passed():
    """Nothing that was not checked prints PASS (issue 9 item 7): skips alone judge nothing."""
    from r9700ctl.agent.result import SKIP, finding
    from r9700ctl.doctor import HostReport

    skipped = finding("gpu.count", SKIP, "r9700_expected_gpus not set", code="GPU_COUNT_UNCHECKED")
    host = HostReport("node1", "10.0.0.1", checks=[skipped])
    assert host.status == "INCONCLUSIVE"
    assert HostReport("node2", "10.0.0.2").status == "INCONCLUSIVE"
