"""The SSH target of one inventory host, built the way Ansible's ssh will connect.

Ansible runs `ssh [ansible_ssh_common_args/extra_args] -o Port= -o User= -i KEY <ansible_host>`:
command-line values win over the ssh config file (-F FILE, else ~/.ssh/config), whose Host
patterns match the ansible_host address; OpenSSH's defaults fill the rest.
"""

from __future__ import annotations

import getpass
import os
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from r9700ctl.sshcheck.model import SshTarget

# Keys OpenSSH tries when no IdentityFile is configured anywhere (ssh(1), -i), newest type first.
DEFAULT_IDENTITY_FILES = ("~/.ssh/id_ed25519", "~/.ssh/id_ecdsa", "~/.ssh/id_rsa")


def _truthy(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    return str(value).strip().lower() in ("1", "true", "yes", "on", "y")


def _first(mapping: Mapping[str, Any], *keys: str) -> Any:
    for key in keys:
        value = mapping.get(key)
        if value not in (None, ""):
            return value
    return None


@dataclass
class _SshArgs:
    """What an ssh command line given in ansible_ssh_common_args/extra_args says."""

    config_file: str | None = None
    options: dict[str, str] = field(default_factory=dict)  # -o Key=Value, keys lower-case
    identity_files: list[str] = field(default_factory=list)
    port: str | None = None
    user: str | None = None
    jump: str | None = None


def parse_ssh_args(text: str) -> _SshArgs:
    """Read the options of an ssh command line that matter for connecting ("-F f -o K=V -i key ...")."""
    args = _SshArgs()
    words = shlex.split(text or "")
    with_value = {
        "-F": "config_file",
        "-i": "identity",
        "-p": "port",
        "-l": "user",
        "-J": "jump",
        "-o": "option",
    }
    i = 0
    while i < len(words):
        word = words[i]
        flag, value = word[:2], word[2:]
        if flag in with_value:
            if not value:
                i += 1
                value = words[i] if i < len(words) else ""
            kind = with_value[flag]
            if kind == "option":
                key, sep, val = value.partition("=")
                if not sep:
                    key, sep, val = value.partition(" ")
                args.options[key.strip().lower()] = val.strip()
            elif kind == "identity":
                args.identity_files.append(value)
            else:
                setattr(args, kind, value)
        i += 1
    return args


def target_for(
    name: str,
    address: str | None,
    port: int | None,
    host_vars: Mapping[str, Any],
    home: Path | None = None,
) -> SshTarget:
    """Build the SSH target of one inventory host: inventory vars first, then its ssh config, then defaults.

    Ansible runs `ssh [common/extra args] -o Port= -o User= -i KEY <ansible_host>`: command-line values win
    over the config file, and the config's Host patterns match the ansible_host address.
    """
    import paramiko

    home = home or Path.home()
    cli = _SshArgs()
    for key in ("ansible_ssh_common_args", "ansible_ssh_extra_args", "ansible_ssh_args"):
        parsed = parse_ssh_args(str(host_vars.get(key) or ""))
        cli.config_file = parsed.config_file or cli.config_file
        cli.options.update(parsed.options)
        cli.identity_files += parsed.identity_files
        cli.port = parsed.port or cli.port
        cli.user = parsed.user or cli.user
        cli.jump = parsed.jump or cli.jump

    connect_name = str(address or _first(host_vars, "ansible_host", "ansible_ssh_host") or name)
    config: dict[str, Any] = {}
    config_path = _expand(cli.config_file, home) if cli.config_file else None
    default_config = home / ".ssh" / "config"
    source = config_path or (str(default_config) if default_config.is_file() else None)
    if source:
        # An unreadable -F file is reported by the doctor's input check, not here.
        try:
            config = dict(paramiko.SSHConfig.from_path(source).lookup(connect_name))
        except (OSError, paramiko.ConfigParseError):
            config = {}

    def option(key: str) -> Any:
        return cli.options.get(key, config.get(key))

    hostname = str(cli.options.get("hostname") or config.get("hostname") or connect_name)
    port_value = port or _first(host_vars, "ansible_port", "ansible_ssh_port") or cli.port or option("port")
    user = str(
        _first(host_vars, "ansible_user", "ansible_ssh_user")
        or cli.user
        or option("user")
        or getpass.getuser()
    )

    identities = []
    inventory_key = _first(host_vars, "ansible_ssh_private_key_file", "ansible_private_key_file")
    if inventory_key:
        identities.append(str(inventory_key))
    identities += cli.identity_files
    if "identityfile" in cli.options:
        identities.append(cli.options["identityfile"])
    identities += list(config.get("identityfile", []))
    if not identities:
        identities = list(DEFAULT_IDENTITY_FILES)

    # A file set to none or /dev/null means none; an unset one means OpenSSH's default.
    user_files, global_files = option("userknownhostsfile"), option("globalknownhostsfile")
    known = _split_files(user_files) if user_files else ["~/.ssh/known_hosts"]
    known.append("~/.ssh/known_hosts")  # always consulted too, as the operator's own trust store
    known += _split_files(global_files) if global_files else ["/etc/ssh/ssh_known_hosts"]

    python = str(host_vars.get("ansible_python_interpreter") or "python3")
    if python.startswith("auto"):
        python = "python3"

    return SshTarget(
        name=name,
        hostname=hostname,
        port=int(port_value or 22),
        user=user,
        identity_files=tuple(dedupe(_expand(p, home) for p in identities)),
        known_hosts_files=tuple(dedupe(_expand(p, home) for p in known)),
        host_key_alias=option("hostkeyalias"),
        identities_only=_truthy(option("identitiesonly") or "no"),
        password=_first(host_vars, "ansible_password", "ansible_ssh_pass", "ansible_ssh_password"),
        become=_truthy(host_vars.get("ansible_become", False)),
        become_method=str(host_vars.get("ansible_become_method") or "sudo"),
        become_password=_first(host_vars, "ansible_become_password", "ansible_become_pass"),
        python=python,
        ssh_config=source,
        proxy_command=option("proxycommand"),
        proxy_jump=cli.jump or option("proxyjump"),
    )


def _split_files(value: Any) -> list[str]:
    if not value:
        return []
    return [p for p in str(value).split() if p.lower() != "none" and p != "/dev/null"]


def _expand(path: str, home: Path) -> str:
    if path == "~" or path.startswith("~/"):
        return str(home / path[2:])
    return os.path.expandvars(path)


def dedupe(items: Any) -> list[str]:
    seen: list[str] = []
    for item in items:
        if item not in seen:
            seen.append(item)
    return seen
