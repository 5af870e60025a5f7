"""Load and check an Ansible inventory with Ansible's own parser, before any host is contacted.

Ansible itself is lenient: an unparsable file is a warning and an empty inventory, a typo in a
variable name is silently ignored, and two entries for one machine run it twice. Here every
such mistake is bad input: one line naming the file (and line where known), what is wrong
and how to fix it (BadInput, exit 64).

Ansible is imported inside the functions so `r9700ctl --help` stays fast.
"""

from __future__ import annotations

import codecs
import contextlib
import io
import re
import stat
import traceback
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from r9700ctl import variables
from r9700ctl.errors import BadInput

DEFAULT_GROUP = "r9700_nodes"
DEFAULT_SSH_PORT = 22

# Variables that would put a secret on a command line, in shell history and in the run's artifacts.
SECRET_VARIABLES = (
    "ansible_password",
    "ansible_ssh_pass",
    "ansible_ssh_password",
    "ansible_become_pass",
    "ansible_become_password",
    "ansible_sudo_pass",
    "ansible_sudo_password",
)


@dataclass(frozen=True)
class InventoryHost:
    name: str
    address: str
    port: int
    vars: dict[str, Any] = field(default_factory=dict, compare=False)


@dataclass(frozen=True)
class Inventory:
    """The checked inventory: the hosts of `group` (after `limit`), in inventory order."""

    path: Path
    group: str
    hosts: list[InventoryHost]
    groups: list[str]
    limit: str | None = None

    @property
    def host_names(self) -> list[str]:
        return [host.name for host in self.hosts]


def load_inventory(
    path: Path | str,
    group: str = DEFAULT_GROUP,
    limit: str | None = None,
    extra_vars: Mapping[str, Any] | None = None,
    roles_dir: Path | None = None,
) -> Inventory:
    """Parse `path` strictly and check every host of `group`; raise BadInput on the first problem."""
    path = Path(path)
    _check_path(path)
    extra_vars = dict(extra_vars or {})
    known = variables.known_variables(roles_dir)
    _check_extra_vars(extra_vars, known, roles_dir)

    with _quiet_ansible():
        manager, variable_manager = _parse(path.resolve())
    groups = sorted(str(name) for name in manager.groups if name not in ("all", "ungrouped"))
    if group not in manager.groups:
        listed = ", ".join(groups) if groups else "none"
        raise BadInput(
            what=f"no group '{group}' in this inventory (groups: {listed})",
            where=str(path),
            hint=f"put the nodes under [{group}], or name their group with --group",
        )
    members = manager.groups[group].get_hosts()
    if not members:
        raise BadInput(
            what=f"group '{group}' has no hosts",
            where=str(path),
            hint=f"list the nodes under [{group}], one per line",
        )

    with _quiet_ansible():
        hosts = [
            _checked_host(host, variable_manager, extra_vars, known, path, roles_dir) for host in members
        ]
        _check_unique_addresses(hosts, path)
        selected = _apply_limit(manager, hosts, group, limit)
    return Inventory(path=path, group=group, hosts=selected, groups=groups, limit=limit)


def parse_extra_vars(values: Iterable[str]) -> dict[str, Any]:
    """Merge -e values the way ansible-playbook does: key=value, @file.yml, or YAML/JSON text."""
    from ansible.errors import AnsibleError
    from ansible.parsing.dataloader import DataLoader
    from ansible.parsing.splitter import parse_kv

    loader = DataLoader()
    merged: dict[str, Any] = {}
    for value in values:
        value = value.strip()
        if not value:
            continue
        try:
            if value.startswith("@"):
                file_path = Path(value[1:]).expanduser()
                if not file_path.is_file():
                    kind = "is a directory" if file_path.is_dir() else "not a regular file"
                    raise BadInput(
                        what=f"-e {value}: {kind if file_path.exists() else 'file not found'}",
                        where=str(file_path),
                        hint="give the path of a YAML or JSON file after @",
                    )
                try:
                    file_path.read_bytes().decode("utf-8")
                except (OSError, UnicodeDecodeError) as exc:
                    raise BadInput(
                        what=f"-e {value}: not a UTF-8 text file"
                        + (f" ({exc.strerror})" if isinstance(exc, OSError) else ""),
                        where=str(file_path),
                        hint="give the path of a YAML or JSON file after @",
                    ) from None
                data = loader.load_from_file(str(file_path.resolve()))
            elif value[0] in "[{":
                data = loader.load(value)
            elif value[0] in "/." and "=" not in value:
                raise BadInput(what=f"-e {value}: a file needs a leading @", hint=f"write -e @{value}")
            else:
                data = parse_kv(value)
        except AnsibleError as exc:
            where, message = _error_location(exc)
            raise BadInput(
                what=f"-e {value}: {message}",
                where=where,
                hint="use key=value, @file.yml or a JSON object",
            ) from exc
        if not isinstance(data, Mapping):
            raise BadInput(
                what=f"-e {value}: not a set of variables",
                hint="use key=value, @file.yml or a JSON object such as '{\"r9700_expected_gpus\": 4}'",
            )
        merged.update(data)
    return merged


# --- checks -------------------------------------------------------------------------------


def _check_path(path: Path) -> None:
    if path.is_dir():
        raise BadInput(
            what="is a directory, not an inventory file",
            where=str(path),
            hint="give the inventory file inside it, for example inventory.ini",
        )
    if not path.exists():
        raise BadInput(
            what="inventory file not found",
            where=str(path),
            hint="give the path of an INI or YAML inventory; inventory/example.ini shows the format",
        )
    if not path.is_file():
        # A shell's <(...) is a pipe: the first reader empties it, and Ansible reads an inventory
        # more than once (and again on every host of the run).
        kind = "a pipe" if stat.S_ISFIFO(path.stat().st_mode) else "not a regular file"
        raise BadInput(
            what=f"the inventory is {kind}",
            where=str(path),
            hint="save it to a file first (e.g. `... > inventory.ini`) and give that file",
        )
    _check_text(path)


def _check_text(path: Path) -> None:
    """An inventory is UTF-8 text; Ansible reads anything else as garbled host names."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise BadInput(what=f"cannot read the inventory: {exc.strerror}", where=str(path)) from None
    head = data[:200]
    # UTF-16 (what Windows editors call "Unicode"): a byte-order mark, or ASCII with a NUL after
    # (little-endian) or before (big-endian) every character.
    utf16 = ""
    if head.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        utf16 = "UTF-16"
    elif len(head) >= 2 and not any(head[1::2]):
        utf16 = "UTF-16LE"
    elif len(head) >= 2 and not any(head[0::2]):
        utf16 = "UTF-16BE"
    if utf16:
        raise BadInput(
            what="the inventory is UTF-16 text, not UTF-8",
            where=str(path),
            hint=f"save it as UTF-8: iconv -f {utf16} -t UTF-8 {path} > inventory.ini",
        )
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise BadInput(
            what="the inventory is not UTF-8 text", where=f"{path}:{line}", hint="save it as UTF-8"
        ) from None
    if b"\0" in data:
        raise BadInput(
            what="the inventory holds NUL bytes: not a text file",
            where=str(path),
            hint="give an INI or YAML inventory; inventory/example.ini shows the format",
        )


def _check_extra_vars(
    extra_vars: Mapping[str, Any],
    known: Mapping[str, variables.KnownVariable],
    roles_dir: Path | None = None,
) -> None:
    for name in extra_vars:
        if name in SECRET_VARIABLES:
            raise BadInput(
                what=f"-e {name}: a secret on the command line ends up in shell history and run artifacts",
                hint="use --ask-become-pass, or SSH keys for the connection",
            )
        _check_name(str(name), known, where="--extra-vars")
    _check_values(extra_vars, where_of=lambda name: "--extra-vars", subject="", roles_dir=roles_dir)


def _checked_host(
    host: Any,
    variable_manager: Any,
    extra_vars: Mapping[str, Any],
    known: Mapping[str, variables.KnownVariable],
    path: Path,
    roles_dir: Path | None = None,
) -> InventoryHost:
    from ansible.errors import AnsibleError

    try:
        host_vars = dict(variable_manager.get_vars(host=host, include_hostvars=False))
    except AnsibleError as exc:
        where, message = _error_location(exc, default=str(path))
        raise BadInput(what=f"{host.name}: cannot read its variables: {message}", where=where) from exc

    own = {name: value for name, value in host_vars.items() if str(name).startswith(variables.PREFIX)}
    for name, value in own.items():
        _check_name(name, known, where=_origin(value, path), subject=host.name)
    effective = {**own, **{k: v for k, v in extra_vars.items() if str(k).startswith(variables.PREFIX)}}
    _check_values(
        effective,
        where_of=lambda name: "--extra-vars" if name in extra_vars else _origin(own[name], path),
        subject=host.name,
        roles_dir=roles_dir,
    )

    address = str(host_vars.get("ansible_host") or host.name)
    port = _port(host_vars, host.name, path)
    kept = {
        name: variables.plain(value)
        for name, value in host_vars.items()
        if str(name).startswith((variables.PREFIX, "ansible_")) and name not in ("ansible_facts",)
    }
    kept.update({k: variables.plain(v) for k, v in extra_vars.items() if str(k).startswith(variables.PREFIX)})
    # Plain str: Ansible's own tagged string type cannot be written by yaml.safe_dump or json.
    return InventoryHost(name=str(host.name), address=address, port=port, vars=kept)


def _check_name(
    name: str, known: Mapping[str, variables.KnownVariable], where: str, subject: str = ""
) -> None:
    if not name.startswith(variables.PREFIX):
        return
    owner = f"{subject}: " if subject else ""
    if name in variables.CONTROLLER_SET:
        raise BadInput(
            what=f"{owner}{name} is set by r9700ctl itself",
            where=where,
            hint=f"remove it; r9700ctl sets it from {variables.CONTROLLER_SET[name]}",
        )
    if name in known:
        return
    guess = variables.closest(name, known)
    raise BadInput(
        what=f"{owner}unknown variable {name}",
        where=where,
        hint=f"did you mean {guess}?"
        if guess
        else "fix its name or remove it; inventory/group_vars/all.yml lists the known variables",
    )


def _check_values(
    values: Mapping[str, Any], where_of: Callable[[str], str], subject: str, roles_dir: Path | None = None
) -> None:
    """Each value as the roles' argument specs take it (Ansible's own validator), then the release."""
    owner = f"{subject}: " if subject else ""
    _, bad = variables.check_values(values, roles_dir)
    if bad:
        first = bad[0]
        raise BadInput(what=f"{owner}{first.what()}", where=where_of(first.name), hint=first.fix())
    if "r9700_rocm_version" in values:
        _check_rocm_version(values["r9700_rocm_version"], owner, where_of("r9700_rocm_version"))


def _check_rocm_version(value: Any, owner: str, where: str) -> None:
    from r9700ctl import manifest

    known = manifest.load().release_names()
    if str(value) == "auto" or str(value) in known:
        return
    raise BadInput(
        what=f"{owner}r9700_rocm_version {_shown(value)} is not a ROCm release r9700ctl knows",
        where=where,
        hint=f"use auto or one of: {', '.join(known)}",
    )


def _check_unique_addresses(hosts: list[InventoryHost], path: Path) -> None:
    seen: dict[tuple[str, int], str] = {}
    for host in hosts:
        key = (host.address.lower(), host.port)
        if key in seen:
            raise BadInput(
                what=f"hosts {seen[key]} and {host.name} both connect to {host.address} port {host.port}",
                where=str(path),
                hint="give each host its own ansible_host (or ansible_port), or remove the duplicate entry",
            )
        seen[key] = host.name


def _apply_limit(
    manager: Any, hosts: list[InventoryHost], group: str, limit: str | None
) -> list[InventoryHost]:
    if not limit:
        return hosts
    from ansible.errors import AnsibleError

    try:
        manager.subset(limit)
        allowed = {host.name for host in manager.get_hosts(group)}
    except AnsibleError as exc:
        raise BadInput(what=f"--limit {limit}: {exc.message}", hint="use a host or group pattern") from exc
    finally:
        manager.subset(None)
    selected = [host for host in hosts if host.name in allowed]
    if not selected:
        names = ", ".join(host.name for host in hosts)
        raise BadInput(
            what=f"--limit {limit} matches no host of group '{group}' (hosts: {names})",
            hint="name hosts or groups of the inventory, for example --limit node1,node2",
        )
    return selected


# --- Ansible's parser, made strict ----------------------------------------------------------


class _ParseFailed(BaseException):
    """Carries a plugin's parse error past InventoryManager, which would only print a warning.

    A BaseException on purpose: InventoryManager catches Exception from each plugin, prints it
    and goes on with an empty inventory; this must reach load_inventory() instead.
    """

    def __init__(self, plugin: str, error: BaseException, line: int | None) -> None:
        super().__init__(str(error))
        self.plugin = plugin
        self.error = error
        self.line = line


class _Refused(BaseException):
    """Carries a BadInput found while a plugin parses past InventoryManager (see _ParseFailed)."""

    def __init__(self, error: BadInput) -> None:
        super().__init__(str(error))
        self.error = error


# Host variables that say where a host is: two different values for one host are two machines.
_ADDRESS_VARIABLES = ("ansible_host", "ansible_ssh_host", "ansible_port", "ansible_ssh_port")


class _AddressWatch:
    """Notes every address a plugin gives a host. Ansible merges a host listed twice, and the
    later address silently wins: the run would reach one machine where the user meant two."""

    def __init__(self, inventory: Any) -> None:
        self.inventory = inventory
        self.seen: dict[tuple[str, str], Any] = {}
        self.conflict: BadInput | None = None

    def __enter__(self) -> _AddressWatch:
        original = self.inventory.set_variable

        def set_variable(entity: str, varname: str, value: Any) -> Any:
            if varname in _ADDRESS_VARIABLES and entity in self.inventory.hosts:
                self._note(str(entity), varname, value)
            return original(entity, varname, value)

        self.inventory.set_variable = set_variable
        return self

    def __exit__(self, *exc: object) -> None:
        del self.inventory.set_variable

    def _note(self, host: str, varname: str, value: Any) -> None:
        earlier = self.seen.setdefault((host, varname), value)
        if self.conflict is None and str(earlier) != str(value):
            first, second = _origin_parts(earlier), _origin_parts(value)
            same_file = first is not None and second is not None and first[0] == second[0]

            def place(parts: tuple[str, int | None] | None) -> str:
                if parts is None or not parts[1]:
                    return ""
                return f" (line {parts[1]})" if same_file else f" ({parts[0]}:{parts[1]})"

            self.conflict = BadInput(
                what=f"{host} is listed twice with different {varname}: "
                f"{_shown(earlier)}{place(first)} and {_shown(value)}{place(second)}",
                where=second[0] if second is not None else "",
                hint="give each machine its own host name, or set its address in one place only",
            )


class _StrictPlugin:
    """Wraps one inventory plugin: a parse error stops the load, with the line being read."""

    def __init__(self, plugin: Any) -> None:
        self._plugin = plugin

    def __getattr__(self, name: str) -> Any:
        return getattr(self._plugin, name)

    def parse(self, inventory: Any, *args: Any, **kwargs: Any) -> Any:
        with _AddressWatch(inventory) as watch:
            parsed = self._parse(inventory, *args, **kwargs)
        if watch.conflict is not None:
            raise _Refused(watch.conflict)
        return parsed

    def _parse(self, *args: Any, **kwargs: Any) -> Any:
        line_seen: list[int] = []
        inner = getattr(self._plugin, "_parse", None)
        if callable(inner):
            # The ini plugin forgets the line number it failed on before it re-raises; note it here.
            def remembering(*a: Any, **k: Any) -> Any:
                try:
                    return inner(*a, **k)
                except Exception:
                    origin = getattr(self._plugin, "_origin", None)
                    number = getattr(origin, "line_num", None) or getattr(self._plugin, "lineno", None)
                    if number:
                        line_seen.append(int(number))
                    raise

            self._plugin._parse = remembering
        try:
            return self._plugin.parse(*args, **kwargs)
        except Exception as exc:
            raise _ParseFailed(
                getattr(self._plugin, "_load_name", "inventory"), exc, next(iter(line_seen), None)
            ) from exc
        finally:
            if callable(inner):
                del self._plugin._parse


def _plugin_name(path: Path) -> str:
    """yaml for .yml/.yaml/.json files and extension-less YAML mappings, ini for everything else."""
    if path.suffix.lower() in (".yml", ".yaml", ".json"):
        return "yaml"
    if path.suffix:
        return "ini"
    import yaml

    try:
        return "yaml" if isinstance(yaml.safe_load(path.read_text(encoding="utf-8")), dict) else "ini"
    except (yaml.YAMLError, UnicodeDecodeError):
        return "ini"


def _parse(path: Path) -> tuple[Any, Any]:
    from ansible.errors import AnsibleError
    from ansible.inventory.manager import InventoryManager
    from ansible.parsing.dataloader import DataLoader
    from ansible.plugins.loader import inventory_loader
    from ansible.vars.manager import VariableManager

    plugin_name = _plugin_name(path)

    class StrictInventoryManager(InventoryManager):
        # Only the INI or YAML plugin: never `script`, which would execute an executable file.
        # No public path does this per manager: the public knob, [inventory] enable_plugins
        # (ansible.constants.INVENTORY_ENABLED), is process-wide configuration, and the plugin must
        # also be wrapped (_StrictPlugin) to keep the line of a parse error, which Ansible's own
        # "unparsed" handling turns into a warning. So this private method is overridden on purpose.
        def _fetch_inventory_plugins(self) -> list[Any]:
            return [_StrictPlugin(inventory_loader.get(plugin_name))]

    loader = DataLoader()
    try:
        manager = StrictInventoryManager(loader=loader, sources=[str(path)])
    except _Refused as refused:
        raise refused.error from None
    except _ParseFailed as failed:
        where, message = _error_location(failed.error, default=str(path))
        if failed.line and where == str(path):
            where = f"{path}:{failed.line}"
        if failed.line and _python_internal(failed.error, message):
            # A Python error from inside the plugin ("not enough values to unpack") says nothing
            # to the user; the line it choked on does.
            message = _bad_line_message(path, failed.line) or message
        undefined = re.search(r"undefined group '([^']+)'", message)
        raise BadInput(
            what=f"cannot parse as {plugin_name.upper()} inventory: "
            + (message.rstrip(".") if undefined else message),
            where=where,
            hint=f"add a [{undefined[1]}] section with its hosts, or remove that reference"
            if undefined
            else f"fix the syntax; `ansible-inventory -i {path} --graph` shows how Ansible reads it",
        ) from None
    except AnsibleError as exc:
        where, message = _error_location(exc, default=str(path))
        raise BadInput(what=f"cannot load inventory: {message}", where=where) from exc
    return manager, VariableManager(loader=loader, inventory=manager)


def _python_internal(error: BaseException, message: str) -> bool:
    """True when the plugin's message is only a Python exception's text, with no Ansible words.

    A plugin's own `raise ValueError("Section [x:children] includes undefined group ...")` is
    Ansible speaking and is kept; a ValueError that Python raised inside the plugin ("not enough
    values to unpack") is not: the line the traceback ends on is no `raise` statement.
    """
    from ansible.errors import AnsibleError

    if not isinstance(error, AnsibleError):
        return not _raised_on_purpose(error)
    cause = error.__cause__
    return (
        cause is not None
        and not isinstance(cause, AnsibleError)
        and message == str(cause).strip()
        and not _raised_on_purpose(cause)
    )


def _raised_on_purpose(error: BaseException) -> bool:
    frames = traceback.extract_tb(error.__traceback__)
    return bool(frames) and (frames[-1].line or "").lstrip().startswith("raise ")


def _bad_line_message(path: Path, number: int) -> str | None:
    """What is wrong with line NUMBER of an INI inventory, in the user's words, or None."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace").splitlines()[number - 1].strip()
    except (OSError, IndexError):
        return None
    if text.startswith("[") and "]" not in text:
        return f"'{text}' opens a [group] header but never closes it (add the ']')"
    return f"'{text}' is not a [group] header, a host line or a key=value line"


def _error_location(exc: BaseException, default: str = "") -> tuple[str, str]:
    """(file[:line], message) from an Ansible error chain: origin tags and YAML marks give the place."""
    path, line = "", None
    current: BaseException | None = exc
    while current is not None:
        origin = _origin_parts(getattr(current, "obj", None))
        if origin is not None:
            path = path or origin[0]
            line = line or origin[1]
        # YAML errors: where the construct began (context) reads better than where parsing gave up.
        mark = getattr(current, "context_mark", None) or getattr(current, "problem_mark", None)
        if mark is not None and line is None:
            line = mark.line + 1
        current = current.__cause__ or current.__context__
    path = path or default
    where = f"{path}:{line}" if path and line else path
    message = str(getattr(exc, "message", None) or exc).split("\n")[0].strip()
    message = message.removeprefix("Failed to parse inventory: ")
    message = re.sub(r"<class '(?:[\w.]*\.)?(?:_AnsibleTagged)?(\w+)'>", lambda m: m[1].lower(), message)
    return where, message or type(exc).__name__


# --- small helpers --------------------------------------------------------------------------


@contextlib.contextmanager
def _quiet_ansible() -> Iterator[None]:
    """Ansible's Display prints warnings to stderr as it parses; the checks here speak instead.

    (The same warnings still appear in ansible-playbook's output kept with each run.)
    """
    with contextlib.redirect_stderr(io.StringIO()):
        yield


def _origin_parts(value: Any) -> tuple[str, int | None] | None:
    """(file, line) where Ansible (2.19+ data tags) saw this value, or None."""
    if value is None:
        return None
    try:
        from ansible._internal._datatag._tags import Origin
    except ImportError:  # older ansible-core: no origins; callers fall back to the inventory path
        return None
    origin = value if isinstance(value, Origin) else Origin.get_tag(value)
    if origin is None or not origin.path:
        return None
    return str(origin.path), origin.line_num or None


def _origin(value: Any, path: Path) -> str:
    """'file:line' of a variable's value, or the inventory path when Ansible does not say."""
    parts = _origin_parts(value)
    if parts is None:
        return str(path)
    return f"{parts[0]}:{parts[1]}" if parts[1] else parts[0]


def _port(host_vars: Mapping[str, Any], name: str, path: Path) -> int:
    raw = host_vars.get("ansible_port", host_vars.get("ansible_ssh_port", DEFAULT_SSH_PORT))
    try:
        return int(str(raw))
    except ValueError:
        raise BadInput(
            what=f"{name}: ansible_port must be a number, not {_shown(raw)}",
            where=_origin(raw, path),
            hint="set ansible_port=22 or the port sshd listens on",
        ) from None


def _shown(value: Any) -> str:
    return repr(variables.plain(value))
