"""The SSH checks' pure parts and the failures a loopback socket can show for real.

Which address, port, user, keys and known_hosts files a host is checked with must be what
Ansible's ssh will use (inventory vars over the -F ssh config over defaults), or the doctor
would test a different path than provision takes. Host-key matching follows OpenSSH
("[host]:port" names, hashed entries, patterns). Failures that need an SSH server (unknown or
changed key, wrong key, no sudo, timeout) are pinned in tests/lab/test_doctor.py against lab
nodes; connection refused and "not SSH" need only a loopback socket, so they are pinned here.
"""

from __future__ import annotations

import base64
import shutil
import socket
import stat
import subprocess
import threading

import paramiko
import pytest

from r9700ctl import sshcheck
from r9700ctl.sshcheck import known_keys_for, parse_ssh_args, record_host_key, target_for

KEY_A = base64.b64encode(b"\x00\x00\x00\x0bssh-ed25519\x00\x00\x00\x20" + b"A" * 32).decode()
KEY_B = base64.b64encode(b"\x00\x00\x00\x0bssh-ed25519\x00\x00\x00\x20" + b"B" * 32).decode()


# ---------------------------------------------------------------- ssh command-line options


def test_ssh_args_from_ansible_ssh_common_args_are_read_in_every_spelling():
    args = parse_ssh_args(
        "-F /lab/ssh_config -o UserKnownHostsFile=/lab/known_hosts -oIdentitiesOnly=yes -i k -p 2222"
    )

    assert args.config_file == "/lab/ssh_config"
    assert args.options == {"userknownhostsfile": "/lab/known_hosts", "identitiesonly": "yes"}
    assert args.identity_files == ["k"]
    assert args.port == "2222"


def test_quoted_option_values_with_spaces_survive():
    args = parse_ssh_args("-o 'ProxyCommand=ssh -W %h:%p jump'")

    assert args.options["proxycommand"] == "ssh -W %h:%p jump"


# ---------------------------------------------------------------- the target Ansible would use


def write_config(tmp_path, text):
    path = tmp_path / "ssh_config"
    path.write_text(text)
    return path


def test_the_ssh_config_named_with_dash_F_gives_known_hosts_key_and_user(tmp_path):
    """Pins the lab's layout: ansible_ssh_common_args='-F DIR/ssh_config' and the config names
    UserKnownHostsFile and IdentityFile; the doctor must check keys against that file."""
    config = write_config(
        tmp_path,
        "Host 10.213.*\n  User r9700\n  IdentityFile /lab/id_ed25519\n  IdentitiesOnly yes\n"
        "  UserKnownHostsFile /lab/known_hosts\n  GlobalKnownHostsFile /dev/null\n"
        "  StrictHostKeyChecking yes\n",
    )

    target = target_for(
        "node1", "10.213.7.11", None, {"ansible_ssh_common_args": f"-F {config}"}, home=tmp_path
    )

    assert (target.hostname, target.port, target.user) == ("10.213.7.11", 22, "r9700")
    assert target.identity_files == ("/lab/id_ed25519",)
    assert target.identities_only is True
    # GlobalKnownHostsFile /dev/null: no global file at all, as the lab's ssh_config says
    assert target.known_hosts_files == ("/lab/known_hosts", str(tmp_path / ".ssh" / "known_hosts"))
    assert target.ssh_config == str(config)


def test_inventory_values_win_over_the_ssh_config_as_they_do_on_ansibles_command_line(tmp_path):
    config = write_config(tmp_path, "Host *\n  User fromconfig\n  Port 2200\n  IdentityFile /cfg/key\n")
    host_vars = {
        "ansible_ssh_common_args": f"-F {config}",
        "ansible_user": "root",
        "ansible_ssh_private_key_file": "/inv/key",
        "ansible_become": "yes",
        "ansible_python_interpreter": "/usr/bin/python3.11",
    }

    target = target_for("n", "192.0.2.5", 2222, host_vars, home=tmp_path)

    assert (target.port, target.user) == (2222, "root")
    assert target.identity_files == ("/inv/key", "/cfg/key")
    assert target.become is True
    assert target.python == "/usr/bin/python3.11"


def test_hostname_and_hostkeyalias_from_the_config_decide_the_known_hosts_name(tmp_path):
    config = write_config(
        tmp_path, "Host gpu01\n  HostName 192.0.2.9\n  Port 2022\n  HostKeyAlias gpu01-key\n"
    )

    target = target_for("gpu01", "gpu01", None, {"ansible_ssh_common_args": f"-F {config}"}, home=tmp_path)

    assert target.hostname == "192.0.2.9"
    assert target.host_key_name == "[gpu01-key]:2022"


def test_without_any_key_setting_the_default_identity_files_are_tried(tmp_path):
    target = target_for("n", "192.0.2.5", None, {}, home=tmp_path)

    assert target.identity_files == tuple(
        str(tmp_path / ".ssh" / n) for n in ("id_ed25519", "id_ecdsa", "id_rsa")
    )
    assert target.known_hosts_files == (str(tmp_path / ".ssh" / "known_hosts"), "/etc/ssh/ssh_known_hosts")
    assert target.python == "python3"


def test_an_auto_interpreter_setting_means_python3():
    target = target_for("n", "192.0.2.5", None, {"ansible_python_interpreter": "auto_silent"})

    assert target.python == "python3"


def test_the_passwords_stay_out_of_the_targets_repr():
    target = target_for(
        "n", "192.0.2.5", None, {"ansible_password": "s3cret", "ansible_become_pass": "s3cret2"}
    )

    assert target.password == "s3cret"
    assert "s3cret" not in repr(target)


# ---------------------------------------------------------------- known_hosts, the OpenSSH way


def test_a_non_standard_port_is_looked_up_as_bracketed_host_and_port(tmp_path):
    """Regression: '[' in '[10.0.0.1]:2222' was once read as a glob character class."""
    known = tmp_path / "known_hosts"
    known.write_text(f"10.0.0.1 ssh-ed25519 {KEY_B}\n[10.0.0.1]:2222 ssh-ed25519 {KEY_A}\n")

    found = known_keys_for("[10.0.0.1]:2222", (str(known),))

    assert [(k.line, k.key_base64) for k in found] == [(2, KEY_A)]


def test_hashed_entries_patterns_and_negations_match_like_openssh(tmp_path):
    hashed = paramiko.HostKeys.hash_host("10.0.0.7")
    known = tmp_path / "known_hosts"
    known.write_text(
        "# comment\n"
        f"{hashed} ssh-ed25519 {KEY_A}\n"
        f"10.0.0.*,!10.0.0.8 ssh-ed25519 {KEY_B}\n"
        f"@revoked 10.0.0.7 ssh-ed25519 {KEY_B}\n"
        "garbage\n"
    )

    assert [k.line for k in known_keys_for("10.0.0.7", (str(known),))] == [2, 3]
    assert known_keys_for("10.0.0.8", (str(known),)) == []


def test_missing_known_hosts_files_are_simply_empty(tmp_path):
    assert known_keys_for("h", (str(tmp_path / "none"),)) == []


def test_recording_a_new_key_makes_a_private_file_and_never_a_duplicate(tmp_path):
    target = tmp_path / "new" / "known_hosts"

    record_host_key(str(target), "[10.0.0.1]:2222", "ssh-ed25519", KEY_A)
    record_host_key(str(target), "[10.0.0.1]:2222", "ssh-ed25519", KEY_A)

    assert target.read_text() == f"[10.0.0.1]:2222 ssh-ed25519 {KEY_A}\n"
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert stat.S_IMODE(target.parent.stat().st_mode) == 0o700


def test_a_recorded_key_is_appended_on_its_own_line_after_a_file_without_final_newline(tmp_path):
    target = tmp_path / "known_hosts"
    target.write_text(f"other ssh-ed25519 {KEY_B}")

    record_host_key(str(target), "h", "ssh-ed25519", KEY_A)

    assert target.read_text().splitlines() == [f"other ssh-ed25519 {KEY_B}", f"h ssh-ed25519 {KEY_A}"]


@pytest.mark.skipif(shutil.which("ssh-keygen") is None, reason="ssh-keygen (openssh-client) is not installed")
def test_fingerprints_are_printed_as_ssh_keygen_prints_them(tmp_path):
    """The operator compares the doctor's fingerprint with `ssh-keygen -lf` on the console."""
    key = tmp_path / "k"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    blob = (tmp_path / "k.pub").read_text().split()[1]
    printed = subprocess.run(
        ["ssh-keygen", "-lf", str(key) + ".pub"], capture_output=True, text=True, check=True
    )

    assert sshcheck.fingerprint_of(blob) == printed.stdout.split()[1]


# ---------------------------------------------------------------- failures a loopback socket shows


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_a_port_nobody_listens_on_is_connection_refused_with_the_fix():
    target = target_for("node9", "127.0.0.1", closed_port(), {})

    outcome = sshcheck.check_connection(target, timeout=5)

    assert not outcome.reached
    last = outcome.checks[-1]
    assert (last.id, last.status) == ("ssh.connect", "ERROR")
    assert last.detail == f"connection refused by 127.0.0.1 port {target.port}: nothing listens there"
    assert last.hint == "start sshd on node9 (systemctl start ssh) or set ansible_port to its SSH port"


@pytest.fixture
def not_ssh_server():
    """A real TCP server on loopback that answers like a web server, not like sshd."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(4)
    stop = threading.Event()

    def serve():
        server.settimeout(0.2)
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


def test_a_port_that_answers_but_not_with_ssh_is_named_as_such(not_ssh_server):
    target = target_for("node9", "127.0.0.1", not_ssh_server, {})

    outcome = sshcheck.check_connection(target, timeout=3)

    last = outcome.checks[-1]
    assert (last.id, last.status) == ("ssh.handshake", "ERROR")
    assert f"127.0.0.1 port {not_ssh_server} accepts connections but does not speak SSH" in last.detail
    assert "another service listens" in last.hint


def test_proxyjump_is_refused_with_the_proxycommand_to_use_instead(tmp_path):
    config = write_config(tmp_path, "Host *\n  ProxyJump bastion\n")
    target = target_for("n", "192.0.2.5", None, {"ansible_ssh_common_args": f"-F {config}"}, home=tmp_path)

    outcome = sshcheck.check_connection(target, timeout=1)

    assert outcome.checks[-1].hint == "use 'ProxyCommand ssh -W %h:%p bastion' in the ssh config for n"


def test_check_results_serialise_with_id_status_detail_fix_and_code():
    from r9700ctl.agent.result import finding
    from r9700ctl.preflight import check_dict

    check = finding(
        "ssh.sudo", "FAIL", "no sudo", fix="add NOPASSWD", evidence={"rc": 1}, code="SUDO_NOT_AVAILABLE"
    )

    assert check_dict(check) == {
        "id": "ssh.sudo",
        "status": "FAIL",
        "detail": "no sudo",
        "fix": "add NOPASSWD",
        "evidence": {"rc": 1},
        "code": "SUDO_NOT_AVAILABLE",
    }
