"""The connection steps, in OpenSSH's order, each stopping at its precise failure: the name resolves,
the port answers, the server speaks SSH, its host key is known and unchanged, a login works."""

from __future__ import annotations

import errno
import logging
import os
import socket
import time
from pathlib import Path
from typing import Any

from r9700ctl.agent.result import ERROR, PASS, finding
from r9700ctl.sshcheck.known_hosts import KnownHostKey, fingerprint_of, known_keys_for, record_host_key
from r9700ctl.sshcheck.model import CheckResult, ConnectionOutcome, Session, SshTarget
from r9700ctl.sshcheck.target import DEFAULT_IDENTITY_FILES, dedupe

# paramiko's transport thread logs each failed handshake with a traceback; with no handler anywhere
# Python prints that to stderr. The failure is reported as a check instead: keep its log quiet.
logging.getLogger("paramiko").addHandler(logging.NullHandler())


def check_connection(
    target: SshTarget, *, accept_new_host_keys: bool = False, timeout: float = 10.0
) -> ConnectionOutcome:
    """Resolve, connect, check the host key and log in; stop at the first step that fails."""
    import paramiko

    checks: list[CheckResult] = []
    if target.proxy_jump and not target.proxy_command:
        checks.append(
            finding(
                "ssh.connect",
                ERROR,
                f"the ssh config uses ProxyJump {target.proxy_jump}, which these checks cannot follow",
                fix=f"use 'ProxyCommand ssh -W %h:%p {target.proxy_jump}' in the ssh config "
                f"for {target.name}",
                code="SSH_PROXYJUMP_UNSUPPORTED",
            )
        )
        return ConnectionOutcome(checks)

    if target.proxy_command:
        sock: Any = paramiko.ProxyCommand(target.proxy_command)
        checks.append(finding("ssh.connect", PASS, f"through ProxyCommand {target.proxy_command}"))
    else:
        resolved = _resolve(target, checks)
        if resolved is None:
            return ConnectionOutcome(checks)
        sock = _connect(target, resolved, timeout, checks)
        if sock is None:
            return ConnectionOutcome(checks)

    transport = paramiko.Transport(sock)
    try:
        known = known_keys_for(target.host_key_name, target.known_hosts_files)
        _prefer_known_key_types(transport, known)
        if not _handshake(target, transport, timeout, checks):
            transport.close()
            return ConnectionOutcome(checks)
        if not _check_host_key(target, transport, known, accept_new_host_keys, checks):
            transport.close()
            return ConnectionOutcome(checks)
        if not _authenticate(target, transport, timeout, checks):
            transport.close()
            return ConnectionOutcome(checks)
    except Exception:
        transport.close()
        raise
    return ConnectionOutcome(checks, Session(transport, target))


def _resolve(target: SshTarget, checks: list[CheckResult]) -> list[tuple[Any, ...]] | None:
    try:
        infos = socket.getaddrinfo(target.hostname, target.port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        reason = exc.strerror if isinstance(exc, socket.gaierror) else str(exc)
        checks.append(
            finding(
                "ssh.resolve",
                ERROR,
                f"name '{target.hostname}' does not resolve ({reason})",
                fix=f"set ansible_host for {target.name} to its address, "
                "or add the name to DNS or /etc/hosts",
                code="SSH_NAME_UNRESOLVED",
            )
        )
        return None
    addresses = dedupe(info[4][0] for info in infos)
    detail = (
        target.hostname if addresses == [target.hostname] else f"{target.hostname} -> {', '.join(addresses)}"
    )
    checks.append(finding("ssh.resolve", PASS, detail))
    return infos


def _connect(
    target: SshTarget, infos: list[tuple[Any, ...]], timeout: float, checks: list[CheckResult]
) -> Any:
    where = f"{target.hostname} port {target.port}"
    failure: CheckResult | None = None
    for family, socktype, proto, _canon, sockaddr in infos:
        sock = socket.socket(family, socktype, proto)
        sock.settimeout(timeout)
        started = time.monotonic()
        try:
            sock.connect(sockaddr)
        except ConnectionRefusedError:
            failure = finding(
                "ssh.connect",
                ERROR,
                f"connection refused by {where}: nothing listens there",
                fix=f"start sshd on {target.name} (systemctl start ssh) or set ansible_port to its SSH port",
                code="SSH_REFUSED",
            )
        except TimeoutError:
            failure = finding(
                "ssh.connect",
                ERROR,
                f"no answer from {where} within {timeout:g} s (timeout)",
                fix=f"check that {target.name} is up and {sockaddr[0]} is its address; "
                "a firewall may drop SSH packets",
                code="SSH_TIMEOUT",
            )
        except OSError as exc:
            if exc.errno in (errno.EHOSTUNREACH, errno.ENETUNREACH, errno.EHOSTDOWN):
                reason = "no route to host" if exc.errno != errno.ENETUNREACH else "network unreachable"
                failure = finding(
                    "ssh.connect",
                    ERROR,
                    f"{where}: {reason} after {time.monotonic() - started:.1f} s "
                    "(nothing answers at that address)",
                    fix=f"check that {target.name} is up and that {sockaddr[0]} is its address",
                    code="SSH_UNREACHABLE",
                )
            else:
                failure = finding(
                    "ssh.connect",
                    ERROR,
                    f"cannot connect to {where}: {exc.strerror or exc}",
                    code="SSH_CONNECT_FAILED",
                )
        else:
            sock.settimeout(None)
            checks.append(
                finding("ssh.connect", PASS, f"{sockaddr[0]} port {target.port} accepts connections")
            )
            return sock
        sock.close()
    assert failure is not None
    checks.append(failure)
    return None


def _prefer_known_key_types(transport: Any, known: list[KnownHostKey]) -> None:
    """Ask the server first for a key type already recorded, as OpenSSH does, so a host with several
    host keys is not reported "unknown" merely because it offered a type we have not seen."""
    if not known:
        return
    options = transport.get_security_options()
    wanted = []
    for key in known:
        wanted += ["rsa-sha2-512", "rsa-sha2-256", "ssh-rsa"] if key.key_type == "ssh-rsa" else [key.key_type]
    offered = list(options.key_types)
    first = [k for k in dedupe(wanted) if k in offered]
    options.key_types = first + [k for k in offered if k not in first]


def _handshake(target: SshTarget, transport: Any, timeout: float, checks: list[CheckResult]) -> bool:
    import paramiko

    transport.banner_timeout = timeout
    try:
        transport.start_client(timeout=timeout)
    except (paramiko.SSHException, EOFError, OSError) as exc:
        text = str(exc) or type(exc).__name__
        if "banner" in text.lower() or isinstance(exc, EOFError):
            detail = (
                f"{target.hostname} port {target.port} accepts connections but does not speak SSH ({text})"
            )
            fix = f"check ansible_port for {target.name}: another service listens on port {target.port}"
        else:
            detail = f"SSH negotiation with {target.hostname} failed: {text}"
            fix = "the server and paramiko share no key exchange, cipher or host key algorithm"
        checks.append(finding("ssh.handshake", ERROR, detail, fix=fix, code="SSH_HANDSHAKE_FAILED"))
        return False
    return True


def _check_host_key(
    target: SshTarget, transport: Any, known: list[KnownHostKey], accept_new: bool, checks: list[CheckResult]
) -> bool:
    server_key = transport.get_remote_server_key()
    key_type, key_base64 = server_key.get_name(), server_key.get_base64()
    fingerprint = fingerprint_of(key_base64)
    name = target.host_key_name
    evidence: dict[str, Any] = {"name": name, "key_type": key_type, "fingerprint": fingerprint}
    same_type = [k for k in known if k.key_type == key_type]
    if any(k.key_base64 == key_base64 for k in same_type):
        match = next(k for k in same_type if k.key_base64 == key_base64)
        checks.append(
            finding(
                "ssh.hostkey",
                PASS,
                f"{key_type} {fingerprint} matches {match.file}:{match.line}",
                evidence=evidence,
            )
        )
        return True
    if same_type:
        old = same_type[0]
        evidence.update(recorded=f"{old.file}:{old.line}", recorded_fingerprint=old.fingerprint)
        checks.append(
            finding(
                "ssh.hostkey",
                ERROR,
                f"host key CHANGED for {name}: the server offers {key_type} {fingerprint}, "
                f"{old.file}:{old.line} records {old.fingerprint} (reinstalled host, or someone in between)",
                fix=f"if {target.name} was reinstalled, confirm the new key on its console, then "
                f"ssh-keygen -R '{name}' -f {old.file}; never accepted automatically",
                evidence=evidence,
                code="SSH_HOSTKEY_CHANGED",
            )
        )
        return False
    record_in = target.known_hosts_files[0]
    if accept_new:
        try:
            record_host_key(record_in, name, key_type, key_base64)
        except OSError as exc:
            checks.append(
                finding(
                    "ssh.hostkey",
                    ERROR,
                    f"cannot record the new host key of {name} in {record_in}: {exc}",
                    code="SSH_HOSTKEY_NOT_RECORDED",
                )
            )
            return False
        checks.append(
            finding(
                "ssh.hostkey",
                PASS,
                f"new host key {key_type} {fingerprint} recorded in {record_in} (--accept-new-host-keys)",
                evidence=evidence,
            )
        )
        return True
    checks.append(
        finding(
            "ssh.hostkey",
            ERROR,
            f"host key of {name} is unknown ({key_type} {fingerprint}): "
            f"not in {', '.join(target.known_hosts_files)}",
            fix=f"compare {fingerprint} with 'ssh-keygen -lf /etc/ssh/ssh_host_*_key.pub' on {target.name}'s "
            "console, then rerun with --accept-new-host-keys",
            evidence=evidence,
            code="SSH_HOSTKEY_UNKNOWN",
        )
    )
    return False


def _authenticate(target: SshTarget, transport: Any, timeout: float, checks: list[CheckResult]) -> bool:
    import paramiko

    transport.auth_timeout = timeout
    user = target.user
    try:
        transport.auth_none(user)
        checks.append(finding("ssh.auth", PASS, f"logged in as {user} (no authentication required)"))
        return True
    except paramiko.BadAuthenticationType as exc:
        allowed = list(exc.allowed_types)
    except (paramiko.SSHException, OSError, EOFError) as exc:
        checks.append(
            finding(
                "ssh.auth", ERROR, f"the server closed the connection at login: {exc}", code="SSH_AUTH_FAILED"
            )
        )
        return False

    tried: list[str] = []
    for label, key in _candidate_keys(target, tried):
        if "publickey" not in allowed:
            tried.append(f"publickey {label} (not offered: the server does not accept publickey)")
            break
        try:
            transport.auth_publickey(user, key)
        except paramiko.AuthenticationException:
            tried.append(f"publickey {label} (rejected)")
            continue
        except (paramiko.SSHException, OSError, EOFError) as exc:
            tried.append(f"publickey {label} ({exc})")
            continue
        if transport.is_authenticated():
            checks.append(finding("ssh.auth", PASS, f"logged in as {user} with publickey {label}"))
            return True
        tried.append(f"publickey {label} (accepted, but the server asks for a second factor)")

    if target.password:
        if "password" in allowed:
            try:
                transport.auth_password(user, target.password)
            except paramiko.AuthenticationException:
                tried.append("password from the inventory (rejected)")
            else:
                if transport.is_authenticated():
                    checks.append(
                        finding("ssh.auth", PASS, f"logged in as {user} with the inventory's password")
                    )
                    return True
        else:
            tried.append("password from the inventory (not offered: the server does not accept passwords)")

    key_hint = target.identity_files[0] if target.identity_files else "~/.ssh/id_ed25519"
    checks.append(
        finding(
            "ssh.auth",
            ERROR,
            f"authentication failed for {user}@{target.hostname}: tried {'; '.join(tried) or 'nothing'}; "
            f"the server accepts: {', '.join(allowed) or 'nothing'}",
            fix=f"install the public key in ~{user}/.ssh/authorized_keys on {target.name} "
            f"(ssh-copy-id -i {key_hint}.pub {user}@{target.hostname}) or point ansible_ssh_private_key_file "
            "at the right key",
            evidence={"tried": tried, "allowed": allowed, "user": user},
            code="SSH_AUTH_FAILED",
        )
    )
    return False


def _candidate_keys(target: SshTarget, tried: list[str]) -> Any:
    """Yield (label, key) in OpenSSH's order: identity files, then agent keys unless IdentitiesOnly."""
    import paramiko

    for path in target.identity_files:
        if not Path(path).is_file():
            if path not in [os.path.expanduser(p) for p in DEFAULT_IDENTITY_FILES]:
                tried.append(f"publickey {path} (file not found)")
            continue
        try:
            key = paramiko.PKey.from_path(path)
        except paramiko.PasswordRequiredException:
            tried.append(f"publickey {path} (encrypted: load it into ssh-agent with ssh-add)")
            continue
        except (paramiko.SSHException, OSError, ValueError) as exc:
            tried.append(f"publickey {path} (unreadable: {exc})")
            continue
        yield path, key
    if target.identities_only or not os.environ.get("SSH_AUTH_SOCK"):
        return
    try:
        agent_keys = paramiko.Agent().get_keys()
    except (paramiko.SSHException, OSError):
        return
    for key in agent_keys:
        comment = getattr(key, "comment", "") or fingerprint_of(key.get_base64())
        yield f"ssh-agent key {comment}", key
