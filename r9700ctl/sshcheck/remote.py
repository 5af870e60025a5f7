"""Checks once logged in: the login shell runs commands, sudo works without a password, python3."""

from __future__ import annotations

import re
import shlex

from r9700ctl.agent.result import FAIL, PASS, SKIP, finding
from r9700ctl.sshcheck.model import CheckResult, Session

# ansible-core 2.19 runs modules with Python 3.8 or newer on the target.
MIN_TARGET_PYTHON = (3, 8)


def check_shell(session: Session, timeout: float = 15.0) -> CheckResult:
    """A key can be accepted for an account whose login shell refuses commands (nologin)."""
    target = session.target
    try:
        result = session.run("echo r9700ctl-shell-ok", timeout=timeout)
    except TimeoutError as exc:
        return finding("ssh.shell", FAIL, f"a plain 'echo' did not finish: {exc}", code="SSH_SHELL_REFUSES")
    if result.rc == 0 and "r9700ctl-shell-ok" in result.stdout:
        return finding("ssh.shell", PASS, f"{target.user}'s login shell runs commands")
    said = _last_line(result.stdout + "\n" + result.stderr) or f"exit status {result.rc}"
    return finding(
        "ssh.shell",
        FAIL,
        f"the login shell of {target.user} on {target.name} refuses commands ({said})",
        fix=f"give {target.user} a real shell (chsh -s /bin/bash {target.user}) or log in as another user",
        code="SSH_SHELL_REFUSES",
    )


def check_sudo(session: Session, timeout: float = 15.0) -> CheckResult:
    """Provisioning needs root: logged in as root, or sudo without a password (`sudo -n true`)."""
    target = session.target
    if target.is_root:
        return finding("ssh.sudo", PASS, "logged in as root: no sudo needed")
    if target.become_method != "sudo":
        return finding(
            "ssh.sudo",
            SKIP,
            f"become method '{target.become_method}' is not checked (only sudo is)",
            code="SUDO_NOT_CHECKED",
        )
    fix = (
        f"give {target.user} passwordless sudo on {target.name} "
        f"(echo '{target.user} ALL=(ALL) NOPASSWD:ALL' > /etc/sudoers.d/{target.user}) or log in as root"
    )
    try:
        result = session.run("sudo -n true", timeout=timeout)
    except TimeoutError as exc:
        return finding(
            "ssh.sudo", FAIL, f"sudo -n true did not finish: {exc}", fix=fix, code="SUDO_NOT_AVAILABLE"
        )
    if result.rc == 0:
        return finding("ssh.sudo", PASS, f"{target.user} may run sudo without a password")
    said = _sudo_line(result.stderr) or f"exit status {result.rc}"
    if result.rc == 127 or "not found" in said:
        return finding(
            "ssh.sudo",
            FAIL,
            f"sudo is not installed on {target.name} ({said})",
            fix="apt-get install sudo, " + fix,
            code="SUDO_NOT_AVAILABLE",
        )
    if target.become_password:
        checked = session.run(
            "sudo -S -p '' true", stdin=target.become_password.encode() + b"\n", timeout=timeout
        )
        if checked.rc == 0:
            return finding(
                "ssh.sudo", PASS, f"{target.user} may run sudo with the inventory's become password"
            )
    return finding(
        "ssh.sudo",
        FAIL,
        f"no sudo without a password for {target.user}: sudo -n true says '{said}'",
        fix=fix,
        evidence={"rc": result.rc, "stderr": result.stderr.strip()},
        code="SUDO_NOT_AVAILABLE",
    )


def check_python(session: Session, timeout: float = 15.0) -> CheckResult:
    """Ansible's modules and the preflight facts need Python 3.8+ on the node."""
    target = session.target
    fix = f"apt-get install python3 on {target.name}, or set ansible_python_interpreter to a Python 3 path"
    probe = "import sys; print('%d.%d.%d' % sys.version_info[:3])"
    try:
        result = session.run(f"{shlex.quote(target.python)} -c {shlex.quote(probe)}", timeout=timeout)
    except TimeoutError as exc:
        return finding(
            "ssh.python", FAIL, f"{target.python} did not answer: {exc}", fix=fix, code="PYTHON_MISSING"
        )
    version = result.stdout.strip()
    if result.rc != 0 or not re.fullmatch(r"\d+\.\d+\.\d+", version):
        said = _last_line(result.stderr) or f"exit status {result.rc}"
        return finding(
            "ssh.python",
            FAIL,
            f"no {target.python} on {target.name} ({said})",
            fix=fix,
            code="PYTHON_MISSING",
        )
    parts = tuple(int(p) for p in version.split("."))
    if parts[:2] < MIN_TARGET_PYTHON:
        return finding(
            "ssh.python",
            FAIL,
            f"{target.python} is {version}; Ansible needs {'.'.join(map(str, MIN_TARGET_PYTHON))} or newer",
            fix=fix,
            code="PYTHON_TOO_OLD",
        )
    return finding("ssh.python", PASS, f"{target.python} {version}", evidence={"version": version})


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""


def _sudo_line(stderr: str) -> str:
    """sudo's own complaint, not a motd or home-directory warning printed before it."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    return next((line for line in lines if "sudo" in line), lines[-1] if lines else "")
