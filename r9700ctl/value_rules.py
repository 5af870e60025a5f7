"""What the roles' argument specs cannot say about a value: the one place of those checks.

`variables.check_values` runs every r9700_* value through the roles' meta/argument_specs.yml
(Ansible's own validator) and then through the rule registered here for its name, so the
inventory check refuses a bad value before any host is contacted (exit 64, one line naming
the variable, where it was set and the fix), and preflight (`preflight.checked_vars`, on the
controller too) reports the same sentence for a value that reached it another way.

A rule takes the value as the spec converted it (never None, "" or a Jinja template: those
are unset, or judged by Ansible once templated) and returns None or a Problem.
A spec types power caps as `raw` and PSU maps as `dict`: any shape passes it; these rules are
what stops `r9700_power_cap_w: "abc"` or a PSU without watts on the controller.
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Problem:
    """What is wrong (a sentence naming the variable) and how to fix it."""

    what: str
    fix: str


Rule = Callable[[Any], "Problem | None"]
RULES: dict[str, Rule] = {}

# Numbers whose spec says only int/float: (least, greatest), None = unbounded.
RANGES: dict[str, tuple[float | None, float | None]] = {
    "r9700_expected_gpus": (1, None),
    "r9700_min_free_gb": (0, None),
    "r9700_apt_lock_timeout": (0, None),
    "r9700_preflight_apt_cache_valid_time": (0, None),
    "r9700_driver_dkms_jobs": (0, None),  # 0 = dkms's own choice
    "r9700_reboot_timeout": (1, None),
    "r9700_collect_timeout": (1, None),
    "r9700_validate_timeout": (1, None),
    # A TCP port: 1-65535 (0 asks the kernel for any free port, which no scraper could find).
    "r9700_monitoring_node_exporter_port": (1, 65535),
}


def rule(*names: str) -> Callable[[Rule], Rule]:
    def register(function: Rule) -> Rule:
        for name in names:
            RULES[name] = function
        return function

    return register


def problem_of(name: str, value: Any) -> Problem | None:
    """The registered rule's verdict on `value` for variable `name` (None: nothing to say)."""
    check = RULES.get(name)
    return check(value) if check is not None else None


def _first(problems: list[str], fix: str) -> Problem | None:
    return Problem(problems[0], fix) if problems else None


# --- r9700_power: caps and PSU budgets (the model in r9700ctl/agent/power_budget.py) ---------------------

_QUOTE_ADDRESSES = "; quote each PCI address: YAML 1.1 reads an unquoted 0000:03:00.0 as a number"


def _read_as_number(key: Any) -> bool:
    """True for what YAML made of an unquoted PCI address (a base-60 float: 03:00.0 -> 10800.0)."""
    return isinstance(key, (int, float)) or bool(re.fullmatch(r"[0-9]+\.[0-9]+", str(key)))


@rule("r9700_power_cap_w")
def _power_cap(value: Any) -> Problem | None:
    from r9700ctl.agent import power_budget as power

    _, _, problems = power.parse_caps(value, None)
    return _first(
        problems, "set r9700_power_cap_w to whole watts such as 250, or null for each card's default"
    )


@rule("r9700_power_cap_w_by_gpu")
def _power_cap_by_gpu(value: Any) -> Problem | None:
    from r9700ctl.agent import power_budget as power

    _, _, problems = power.parse_caps(None, value)
    fix = "map each GPU's PCI address to whole watts, e.g. {'0000:03:00.0': 250}"
    if isinstance(value, Mapping) and any(_read_as_number(key) for key in value):
        fix += _QUOTE_ADDRESSES
    return _first(problems, fix)


@rule("r9700_psus")
def _psus(value: Any) -> Problem | None:
    from r9700ctl.agent import power_budget as power

    _, problems = power.parse_psus(value)
    fix = (
        "describe each PSU as NAME: {watts: its rating, gpus: [the PCI addresses it feeds], "
        "host_w: the host's share}, each GPU under one PSU"
    )
    entries = value.values() if isinstance(value, Mapping) else []
    if any(
        _read_as_number(address)
        for entry in entries
        if isinstance(entry, Mapping) and isinstance(entry.get("gpus"), list)
        for address in entry["gpus"]
    ):
        fix += _QUOTE_ADDRESSES
    return _first(problems, fix)


@rule("r9700_psu_margin")
def _psu_margin(value: Any) -> Problem | None:
    from r9700ctl.agent import power_budget as power

    _, problems = power.parse_margin(value)
    return _first(problems, "set r9700_psu_margin to a fraction such as 0.1")


# --- r9700_containers ----------------------------------------------------------------------------

# docker run's --shm-size: "<number><unit>, number must be greater than 0, unit b, k, m or g"
# (docker/cli docs/reference/run.md, "IPC settings"); the role's preflight takes the same form.
_SHM_SIZE = re.compile(r"^([0-9]+)[bkmgBKMG]?$")


@rule("r9700_container_shm_size")
def _shm_size(value: Any) -> Problem | None:
    match = _SHM_SIZE.match(str(value).strip())
    if match and int(match.group(1)) > 0:
        return None
    return Problem(
        f"r9700_container_shm_size={value!r} is not a size",
        "set it as docker's --shm-size takes it: a number > 0 and a unit b, k, m or g, e.g. 8G",
    )


# An image reference, from the grammar of distribution/reference (reference.go, v0.5.0):
#   reference := name [":" tag] ["@" digest];  name := [domain "/"] path-component ["/" path-component]*
#   domain := domain-component ["." domain-component]* [":" port-number]   (or an [IPv6] host)
#   path-component := [a-z0-9]+ (separator [a-z0-9]+)*;  separator := [_.] | "__" | "-"+
#   tag := [\w][\w.-]{0,127};  digest := algorithm ":" hex (32 or more hex digits)
# A name is at most 255 characters (NameTotalLengthMax in the same file).
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[[0-9a-fA-F:.]+\])(?::[0-9]+)?"
_PATH_COMPONENT = r"[a-z0-9]+(?:(?:[_.]|__|-+)[a-z0-9]+)*"
_NAME = rf"(?:{_DOMAIN}/)?{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*"
_TAG = r"[\w][\w.-]{0,127}"
_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"
_REFERENCE = re.compile(rf"^(?P<name>{_NAME})(?::{_TAG})?(?:@{_DIGEST})?$")
NAME_TOTAL_LENGTH_MAX = 255


@rule("r9700_container_image")
def _image(value: Any) -> Problem | None:
    text = str(value).strip()
    match = _REFERENCE.match(text)
    if match and len(match.group("name")) <= NAME_TOTAL_LENGTH_MAX:
        return None
    return Problem(
        f"r9700_container_image={value!r} is not an image reference",
        "write it as docker pull takes it (lower-case path), e.g. rocm/pytorch:<tag> or "
        "registry.example:5000/rocm/pytorch@sha256:<digest>; empty takes the tag the manifest pairs",
    )


@rule("r9700_container_image_archive")
def _image_archive(value: Any) -> Problem | None:
    """The role copies the archive from the controller: it must be a readable file here."""
    path = Path(str(value))
    fix = "give the absolute path of a `docker save` archive on this machine, or leave it empty to pull"
    if not path.is_absolute():
        return Problem(f"r9700_container_image_archive={value!r} is not an absolute path", fix)
    if not path.exists():
        return Problem(f"r9700_container_image_archive: {path} does not exist on this machine", fix)
    if not path.is_file():
        return Problem(f"r9700_container_image_archive: {path} is not a regular file", fix)
    try:
        with path.open("rb") as archive:
            archive.read(1)
    except OSError as exc:
        return Problem(f"r9700_container_image_archive: cannot read {path} ({exc.strerror})", fix)
    return None


@rule("r9700_container_registry_mirror")
def _registry_mirror(value: Any) -> Problem | None:
    # dockerd refuses its own start on a bad registry-mirrors entry: http or https, a host, no
    # user, query or fragment, and (Debian's docker.io 20.10) no path (moby registry/config.go,
    # ValidateMirror).
    text = str(value).strip()
    fix = "set r9700_container_registry_mirror to http://HOST[:PORT] or https://HOST[:PORT]"
    parts = urllib.parse.urlsplit(text)
    if parts.scheme not in ("http", "https") or "://" not in text:
        return Problem(f"r9700_container_registry_mirror={value!r} has no http:// or https:// scheme", fix)
    if not parts.hostname or parts.username or parts.query or parts.fragment or parts.path not in ("", "/"):
        return Problem(f"r9700_container_registry_mirror={value!r} is not a registry's base URL", fix)
    return None


# --- r9700_monitoring ----------------------------------------------------------------------------

# systemd.time(7), "Parsing time spans": a number with one of these units, several summed
# ("1h 30min"); a bare number is seconds.
_SPAN_UNITS = (
    "usec|us|µs|msec|ms|seconds|second|sec|s|minutes|minute|min|m|hours|hour|hr|h|days|day|d|"
    "weeks|week|w|months|month|M|years|year|y"
)
_SPAN_PART = re.compile(rf"\s*([0-9]+(?:\.[0-9]+)?)\s*({_SPAN_UNITS})?(?![A-Za-zµ])")


@rule("r9700_monitoring_interval")
def _monitoring_interval(value: Any) -> Problem | None:
    text, position, total = str(value).strip(), 0, 0.0
    while position < len(text):
        part = _SPAN_PART.match(text, position)
        if part is None or part.end() == position:
            break
        total += float(part.group(1))
        position = part.end()
    fix = "set r9700_monitoring_interval to a systemd time span above zero, e.g. 15min, 1h or 30s"
    if not text or position < len(text):
        return Problem(f"r9700_monitoring_interval={value!r} is not a systemd time span", fix)
    if total <= 0:
        return Problem(f"r9700_monitoring_interval={value!r} is zero: the timer would never wait", fix)
    return None


@rule("r9700_monitoring_textfile_dir", "r9700_node_record_path")
def _absolute_path(value: Any) -> Problem | None:
    return (
        None
        if str(value).startswith("/")
        else Problem(f"{value!r} is not an absolute path", "give a path starting with /")
    )


# --- r9700_access, r9700_kernel, r9700_repos, r9700_env, r9700_preflight --------------------------


@rule("r9700_device_mode")
def _device_mode(value: Any) -> Problem | None:
    if re.fullmatch(r"0?[0-7]{3}", str(value).strip()):
        return None
    return Problem(
        f"r9700_device_mode={value!r} is not an octal file mode", 'set it as octal text, e.g. "0660"'
    )


@rule("r9700_device_group")
def _device_group(value: Any) -> Problem | None:
    # useradd(8)/groupadd(8): a name of letters, digits, _ and -, not starting with '-'; or a gid.
    if isinstance(value, (bool, list, dict)):
        ok = False
    elif isinstance(value, int):
        ok = value >= 0
    else:
        ok = bool(re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.-]*\$?|[0-9]+", str(value).strip()))
    if ok:
        return None
    return Problem(
        f"r9700_device_group={value!r} is not a group",
        "set it to a group name such as render, or a numeric gid",
    )


@rule("r9700_users", "r9700_docker_users", "r9700_access_groups")
def _account_names(value: Any) -> Problem | None:
    bad = [
        item for item in value or [] if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.-]*\$?", str(item).strip())
    ]
    if not bad:
        return None
    return Problem(
        f"{bad[0]!r} is not a user or group name",
        "list names such as alice or render (no spaces, ':' or ',')",
    )


@rule("r9700_kernel_params")
def _kernel_params(value: Any) -> Problem | None:
    # The same words r9700_kernel's preflight takes (roles/r9700_kernel/tasks/main.yml).
    bad = [item for item in value or [] if not re.fullmatch(r"[A-Za-z0-9_.,:=+/-]+", str(item))]
    if not bad:
        return None
    return Problem(
        f"r9700_kernel_params: {bad[0]!r} is not one kernel parameter",
        "list one word per parameter, e.g. [iommu=pt, amdgpu.ppfeaturemask=0xffffffff]",
    )


@rule("r9700_repo_key_fingerprint", "r9700_docker_repo_key_fingerprint")
def _fingerprint(value: Any) -> Problem | None:
    # The roles compare it, without spaces and in upper case, with gpg's 40-hex-digit fingerprint.
    if re.fullmatch(r"[0-9A-F]{40}", re.sub(r"\s", "", str(value)).upper()):
        return None
    return Problem(
        f"{value!r} is not an OpenPGP fingerprint", "copy the 40 hex digits `gpg --show-keys KEYFILE` prints"
    )


@rule("r9700_repo_base_url", "r9700_repo_key_url", "r9700_docker_repo_base_url", "r9700_docker_repo_key_url")
def _download_url(value: Any) -> Problem | None:
    parts = urllib.parse.urlsplit(str(value).strip())
    if (parts.scheme in ("http", "https") and parts.hostname) or (parts.scheme == "file" and parts.path):
        return None
    return Problem(
        f"{value!r} is not an http://, https:// or file:// URL",
        "give the full URL, e.g. https://repo.radeon.com",
    )


@rule("r9700_proxy", "r9700_docker_proxy")
def _proxy(value: Any) -> Problem | None:
    parts = urllib.parse.urlsplit(str(value).strip())
    if parts.scheme in ("http", "https") and parts.hostname:
        return None
    return Problem(f"{value!r} is not a proxy URL", "give it as http://HOST:PORT")


@rule("r9700_env", "r9700_env_extra")
def _environment(value: Any) -> Problem | None:
    from r9700ctl import envlist

    problems = envlist.knob_problems(value) if isinstance(value, Mapping) else []
    return _first(problems, "correct or remove that variable")


@rule("r9700_hsa_override_gfx_version")
def _hsa_override(value: Any) -> Problem | None:
    from r9700ctl.envlist import HSA_VERSION

    if HSA_VERSION.match(str(value).strip()):
        return None
    return Problem(
        f"r9700_hsa_override_gfx_version={value!r} is not major.minor.stepping",
        "leave it empty (an R9700 needs no override) or write e.g. 12.0.1",
    )


@rule("r9700_rocr_visible_devices")
def _visible_devices(value: Any) -> Problem | None:
    from r9700ctl.envlist import VISIBLE_ITEM

    text = str(value).strip()
    if text == "auto" or all(VISIBLE_ITEM.match(item.strip()) for item in text.split(",")):
        return None
    return Problem(
        f"r9700_rocr_visible_devices={value!r} is not auto or a list of GPU indices or UUIDs",
        "write auto, or e.g. 0,1 or GPU-<uuid>",
    )


@rule("r9700_known_issue_workarounds_skip")
def _workarounds_skip(value: Any) -> Problem | None:
    from r9700ctl import known_issues, manifest

    known = [issue.id for issue in known_issues.issues(manifest.load())]
    unknown = [str(item) for item in value or [] if str(item).strip() not in (*known, "all")]
    if not unknown:
        return None
    return Problem(
        f"r9700_known_issue_workarounds_skip names {unknown[0]!r}, which is no known issue",
        "list ids `r9700ctl known-issues` shows, or all",
    )
