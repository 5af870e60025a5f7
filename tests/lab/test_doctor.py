"""`r9700ctl doctor` against real lab nodes over real SSH: each way a host can be out of reach or
unfit gets its own precise message (the point of the doctor: "UNREACHABLE" tells nobody anything).

Runs the installed CLI as a child process (exit code + output, as a user sees them). Inventories
for the broken cases are written to tmp_path, pointing at the lab's nodes with one thing wrong;
HOME is a temporary directory so the operator's own ~/.ssh keys and known_hosts play no part.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import paramiko
import pytest
from child_process import r9700ctl

from r9700ctl.lab import NodeOptions


def doctor(*args: str, home: Path, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    """HOME is `home` and no ssh-agent is offered (the child's environment lacks SSH_AUTH_SOCK)."""
    return r9700ctl("doctor", *args, env={"HOME": str(home)}, without=("SSH_AUTH_SOCK",), columns=200,
                    timeout=timeout)  # fmt: skip


def inventory(tmp_path: Path, hosts: list[str], **group_vars: str) -> Path:
    path = tmp_path / "inventory.ini"
    lines = ["[r9700_nodes]", *hosts, "", "[r9700_nodes:vars]", *(f"{k}={v}" for k, v in group_vars.items())]
    path.write_text("\n".join(lines) + "\n")
    return path


def report_of(path: Path) -> dict[str, dict]:
    document = json.loads(path.read_text())
    assert document["schema"] == "r9700ctl.doctor/1"
    return {host["host"]: host for host in document["hosts"]}


def check(host: dict, check_id: str) -> dict:
    found = [c for c in host["checks"] if c["id"] == check_id]
    assert found, [c["id"] for c in host["checks"]]
    return found[-1]


def without_dash_f(
    lab, tmp_path: Path, known_hosts: Path | None = None, key: Path | None = None
) -> dict[str, str]:
    """Group vars reaching the lab without its ssh_config: so the key and known_hosts are ours."""
    return {
        "ansible_user": "r9700",
        "ansible_become": "true",
        "ansible_python_interpreter": "/usr/bin/python3",
        "ansible_ssh_private_key_file": str(key or lab.key),
        "ansible_ssh_common_args": f"'-o UserKnownHostsFile={known_hosts or lab.known_hosts}'",
    }


def test_the_healthy_lab_passes_every_ssh_check_and_runs_the_preflight(lab, tmp_path):
    """The lab's own inventory (-F ssh_config, its known_hosts, the r9700 user with sudo): every
    SSH step passes with the host key checked, and the shared preflight runs on the facts."""
    out = tmp_path / "doctor.json"

    result = doctor(str(lab.inventory), "--json", str(out), home=tmp_path)

    hosts = report_of(out)
    assert sorted(hosts) == [name for name, _ in lab.nodes]
    for name, _address in lab.nodes:
        host = hosts[name]
        assert host["reached"] is True, host
        for step in (
            "ssh.resolve",
            "ssh.connect",
            "ssh.hostkey",
            "ssh.auth",
            "ssh.shell",
            "ssh.sudo",
            "ssh.python",
        ):
            assert check(host, step)["status"] == "PASS", check(host, step)
        assert f"matches {lab.known_hosts}:" in check(host, "ssh.hostkey")["detail"]
        assert check(host, "ssh.auth")["detail"] == f"logged in as r9700 with publickey {lab.key}"
        assert check(host, "preflight.gpu.count")["status"] == "PASS"  # the lab's stand-in R9700s
        assert check(host, "preflight.kernel.headers")["status"] == "PASS"  # after apt-get update
        assert {c["status"] for c in host["checks"]} <= {"PASS", "WARN", "SKIP"}
        assert host["resolved"]["gfx_targets"] == ["gfx1201"]
        # Issue 14: the known issues of 4 R9700s, listed per host with the workaround; auto skips 7.2.x.
        assert host["resolved"]["rocm_version"] == "7.1.1"
        ids = [k["id"] for k in host["resolved"]["known_issues"]]
        assert "r9700-p2p-host-hang" in ids and "r9700-rccl-72-hang" not in ids
        assert f"{host['host']}: known issue r9700-p2p-host-hang (ROCm 7.1.1): " in result.stdout
        # Issue 9 item 9: AMD lists Debian 12 for Instinct GPUs only; an R9700 node on it is best effort.
        listed = check(host, "preflight.rocm.os_listed")
        assert listed["status"] == "WARN" and "debian-12 is best effort" in listed["detail"], listed
        assert "AMD lists Debian 12 for Instinct GPUs only, never for a Radeon" in listed["detail"]
    assert result.returncode == 1, result.stdout + result.stderr  # Debian 12: a warning, never a refusal
    assert result.stdout.splitlines()[-1].startswith("2 host(s): 2 ready")


def test_a_node_without_sshd_is_connection_refused(make_lab, tmp_path):
    other = make_lab(nodes=1, node_options={"node1": NodeOptions(sshd=False)})
    _name, address = other.nodes[0]

    result = doctor(str(other.inventory), "--json", str(tmp_path / "refused.json"), home=tmp_path)

    connect = check(report_of(tmp_path / "refused.json")["node1"], "ssh.connect")
    assert result.returncode == 3, result.stdout + result.stderr
    assert connect["detail"] == f"connection refused by {address} port 22: nothing listens there"
    assert connect["fix"].startswith("start sshd on node1")
    assert (
        result.stdout.splitlines()[-1]
        == "1 host(s): 0 ready; 1 could not be reached or logged in to (node1); exit 3"
    )


def test_no_passwordless_sudo_and_no_kernel_headers_each_fail_their_check(make_lab, tmp_path):
    """node1: the r9700 user lost its sudo rights; node2: the running kernel has no headers
    package (the shared preflight's verdict, reached over the same SSH session)."""
    other = make_lab(
        nodes=2, node_options={"node1": NodeOptions(sudo=False), "node2": NodeOptions(kernel_headers=False)}
    )
    out = tmp_path / "doctor.json"

    result = doctor(str(other.inventory), "--json", str(out), home=tmp_path)

    headers = check(report_of(out)["node2"], "preflight.kernel.headers")
    assert headers["status"] == "FAIL"
    assert "has no apt candidate" in headers["detail"]
    assert check(report_of(out)["node2"], "ssh.sudo")["status"] == "PASS"
    sudo = check(report_of(out)["node1"], "ssh.sudo")
    assert sudo["status"] == "FAIL"
    assert sudo["detail"].startswith("no sudo without a password for r9700: sudo -n true says")
    assert "NOPASSWD" in sudo["fix"]
    assert result.returncode == 2, result.stdout + result.stderr


def test_a_wrong_key_fails_authentication_naming_the_key_tried(lab, tmp_path):
    wrong = tmp_path / "wrong_key"
    paramiko.RSAKey.generate(2048).write_private_key_file(str(wrong))
    name, address = lab.nodes[0]
    inv = inventory(tmp_path, [f"{name} ansible_host={address}"], **without_dash_f(lab, tmp_path, key=wrong))

    result = doctor(str(inv), "--json", str(tmp_path / "auth.json"), home=tmp_path)

    auth = check(report_of(tmp_path / "auth.json")[name], "ssh.auth")
    assert result.returncode == 3
    assert auth["status"] == "ERROR"
    assert auth["detail"] == (
        f"authentication failed for r9700@{address}: tried publickey {wrong} (rejected); "
        "the server accepts: publickey"
    )
    assert "ssh.auth" in result.stdout


def test_an_unknown_host_key_is_refused_then_recorded_only_when_asked(lab, tmp_path):
    known = tmp_path / "empty_known_hosts"
    name, address = lab.nodes[0]
    inv = inventory(
        tmp_path, [f"{name} ansible_host={address}"], **without_dash_f(lab, tmp_path, known_hosts=known)
    )

    refused = doctor(str(inv), "--json", str(tmp_path / "a.json"), home=tmp_path)
    accepted = doctor(str(inv), "--accept-new-host-keys", "--json", str(tmp_path / "b.json"), home=tmp_path)
    again = doctor(str(inv), "--json", str(tmp_path / "c.json"), home=tmp_path)

    unknown = check(report_of(tmp_path / "a.json")[name], "ssh.hostkey")
    assert refused.returncode == 3
    assert unknown["status"] == "ERROR"
    assert unknown["detail"].startswith(f"host key of {address} is unknown (ssh-ed25519 SHA256:")
    assert "--accept-new-host-keys" in unknown["fix"]
    recorded = check(report_of(tmp_path / "b.json")[name], "ssh.hostkey")
    assert recorded["status"] == "PASS" and f"recorded in {known}" in recorded["detail"]
    assert known.read_text().startswith(f"{address} ssh-ed25519 ")
    assert check(report_of(tmp_path / "c.json")[name], "ssh.hostkey")["detail"].endswith(f"matches {known}:1")
    assert accepted.returncode != 3 and again.returncode != 3


def test_a_changed_host_key_is_refused_even_with_accept_new_host_keys(lab, tmp_path):
    known = tmp_path / "known_hosts"
    name, address = lab.nodes[0]
    impostor = paramiko.RSAKey.generate(2048)
    real_line = next(line for line in lab.known_hosts.read_text().splitlines() if address in line)
    key_type = real_line.split()[1]
    other = _other_key_of_type(key_type, impostor)
    known.write_text(f"{address} {key_type} {other}\n")
    inv = inventory(
        tmp_path, [f"{name} ansible_host={address}"], **without_dash_f(lab, tmp_path, known_hosts=known)
    )

    result = doctor(str(inv), "--accept-new-host-keys", "--json", str(tmp_path / "d.json"), home=tmp_path)

    hostkey = check(report_of(tmp_path / "d.json")[name], "ssh.hostkey")
    assert result.returncode == 3
    assert hostkey["status"] == "ERROR"
    assert hostkey["detail"].startswith(f"host key CHANGED for {address}")
    assert f"{known}:1 records SHA256:" in hostkey["detail"]
    assert known.read_text().count("\n") == 1  # nothing was added


def _other_key_of_type(key_type: str, fallback: paramiko.PKey) -> str:
    """A public key of the same type as the node's, but not the node's (an ed25519 one from ssh-keygen)."""
    if key_type == "ssh-rsa":
        return fallback.get_base64()
    import shutil
    import tempfile

    assert shutil.which("ssh-keygen"), "ssh-keygen is one of the lab's host tools"
    with tempfile.TemporaryDirectory() as scratch:
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", f"{scratch}/k"], check=True)
        return Path(f"{scratch}/k.pub").read_text().split()[1]


def test_an_unresolvable_name_and_an_address_with_nothing_behind_it(lab, tmp_path):
    name, address = lab.nodes[0]
    hosts = [
        "ghost ansible_host=node-that-does-not-exist.invalid",
        f"silent ansible_host={lab.unused_address()}",
        f"{name} ansible_host={address}",
    ]
    inv = inventory(tmp_path, hosts, **without_dash_f(lab, tmp_path))

    result = doctor(str(inv), "--timeout", "2", "--json", str(tmp_path / "e.json"), home=tmp_path)

    hosts_seen = report_of(tmp_path / "e.json")
    resolve = check(hosts_seen["ghost"], "ssh.resolve")
    assert resolve["detail"].startswith("name 'node-that-does-not-exist.invalid' does not resolve")
    connect = check(hosts_seen["silent"], "ssh.connect")
    assert connect["detail"] == f"no answer from {lab.unused_address()} port 22 within 2 s (timeout)"
    assert hosts_seen[name]["reached"] is True  # the others are checked all the same
    assert result.returncode == 3


def test_no_python3_at_the_configured_interpreter_is_named(lab, tmp_path):
    name, address = lab.nodes[0]
    settings = without_dash_f(lab, tmp_path)
    settings["ansible_python_interpreter"] = "/usr/bin/python9"
    inv = inventory(tmp_path, [f"{name} ansible_host={address}"], **settings)

    result = doctor(str(inv), "--json", str(tmp_path / "f.json"), home=tmp_path)

    host = report_of(tmp_path / "f.json")[name]
    python = check(host, "ssh.python")
    assert python["status"] == "FAIL"
    assert python["detail"].startswith(f"no /usr/bin/python9 on {name}")
    assert check(host, "preflight")["status"] == "SKIP"
    assert result.returncode == 2


@pytest.mark.parametrize("bad", ["--timeout=0", "--bundle=/nonexistent-r9700ctl-dir"])
def test_bad_options_touch_no_host(lab, tmp_path, bad):
    args = [bad] if bad.startswith("--bundle") else [str(lab.inventory), bad]

    result = doctor(*args, home=tmp_path, timeout=60)

    assert result.returncode == 64
    assert result.stdout == ""
    assert len(result.stderr.strip().splitlines()) == 1
