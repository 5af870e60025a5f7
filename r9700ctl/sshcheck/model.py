"""What the SSH checks produce: a CheckResult per step, the target they connect to, the open session."""

from __future__ import annotations

import select
import time
from dataclasses import dataclass, field
from typing import Any

from r9700ctl.agent.result import CheckResult  # the one verdict of doctor and preflight


@dataclass(frozen=True)
class SshTarget:
    """Everything needed to connect to one inventory host the way Ansible will."""

    name: str
    hostname: str  # what is resolved and connected to (ansible_host, or HostName from the ssh config)
    port: int
    user: str
    identity_files: tuple[str, ...]
    known_hosts_files: tuple[str, ...]  # user files first: new keys are recorded in the first one
    host_key_alias: str | None = None
    identities_only: bool = False
    password: str | None = field(default=None, repr=False)
    become: bool = False
    become_method: str = "sudo"
    become_password: str | None = field(default=None, repr=False)
    python: str = "python3"
    ssh_config: str | None = None
    proxy_command: str | None = None
    proxy_jump: str | None = None

    @property
    def host_key_name(self) -> str:
        """The name OpenSSH looks up in known_hosts for this host."""
        name = self.host_key_alias or self.hostname
        return name if self.port == 22 else f"[{name}]:{self.port}"

    @property
    def is_root(self) -> bool:
        return self.user == "root"


@dataclass
class CommandResult:
    rc: int
    stdout: str
    stderr: str


class Session:
    """An authenticated SSH connection that runs commands, each in its own channel."""

    def __init__(self, transport: Any, target: SshTarget) -> None:
        self._transport = transport
        self.target = target

    def run(self, command: str, stdin: bytes = b"", timeout: float = 30.0) -> CommandResult:
        """Run `command` with `stdin`; raises TimeoutError when it does not finish within `timeout` s."""
        channel = self._transport.open_session(timeout=timeout)
        try:
            channel.exec_command(command)
            if stdin:
                channel.sendall(stdin)
            channel.shutdown_write()
            out, err = bytearray(), bytearray()
            deadline = time.monotonic() + timeout
            while True:
                if channel.recv_ready():
                    out += channel.recv(65536)
                elif channel.recv_stderr_ready():
                    err += channel.recv_stderr(65536)
                elif channel.exit_status_ready() and channel.eof_received:
                    break
                else:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        raise TimeoutError(f"'{command}' did not finish within {timeout:g} s")
                    # the channel's file descriptor becomes readable on data, stderr, EOF or exit
                    select.select([channel], [], [], min(remaining, 1.0))
            return CommandResult(
                rc=channel.recv_exit_status(),
                stdout=out.decode("utf-8", "replace"),
                stderr=err.decode("utf-8", "replace"),
            )
        finally:
            channel.close()

    def close(self) -> None:
        self._transport.close()


@dataclass
class ConnectionOutcome:
    """The connection checks of one host and, when login worked, the open session."""

    checks: list[CheckResult]
    session: Session | None = None

    @property
    def reached(self) -> bool:
        return self.session is not None
