"""Filters of r9700_containers: daemon.json merged, and the environment as the container sees it.

r9700_cdi_spec_check: whether AMD's CDI spec still lists the node's GPUs.
r9700_docker_daemon_json: /etc/docker/daemon.json merged with the role's options.

The classic mistake (nvidia-docker's installer, many roles) is to write daemon.json whole and
lose what the operator put there (data-root, log-opts, a mirror). Here every key already in
the file stays; the role's options are merged in (nested objects key by key, the registry lists
as a union), and a key whose value the options change is named, so the play can say so.
Runs on the controller; the role writes the result with a backup of the old file.
"""

from __future__ import annotations

import json
from typing import Any

from ansible.errors import AnsibleFilterError
from ansible_collections.r9700ctl.nodes.plugins.plugin_utils.r9700ctl_package import require

# Lists where every entry counts: the operator's entries are kept and ours appended.
UNION_KEYS = ("registry-mirrors", "insecure-registries")


def merge_daemon_options(
    existing: dict[str, Any], options: dict[str, Any], path: str = ""
) -> tuple[dict[str, Any], list[str]]:
    """existing with options merged in; returns (merged, changed keys as 'key: old -> new')."""
    merged = dict(existing)
    changed: list[str] = []
    for key, value in options.items():
        where = f"{path}{key}"
        if key not in merged:
            merged[key] = value
        elif isinstance(merged[key], dict) and isinstance(value, dict):
            merged[key], inner = merge_daemon_options(merged[key], value, f"{where}.")
            changed += inner
        elif key in UNION_KEYS and isinstance(merged[key], list) and isinstance(value, list):
            merged[key] = merged[key] + [v for v in value if v not in merged[key]]
        elif merged[key] != value:
            changed.append(f"{where}: {json.dumps(merged[key])} -> {json.dumps(value)}")
            merged[key] = value
    return merged, changed


def r9700_docker_daemon_json(existing_text: Any, options: Any, mirrors: Any = None) -> dict[str, Any]:
    """{"content", "write", "replaced"} for daemon.json.

    existing_text: the file as it is ("" when absent). options: r9700_docker_daemon_options.
    mirrors: registry mirrors to add (r9700_container_registry_mirror). write is False when the
    merge changes nothing (then content is the old text byte for byte and the file is left alone;
    an absent file stays absent).
    """
    if not isinstance(options, dict):
        raise AnsibleFilterError(f"r9700_docker_daemon_options must be a mapping, got {options!r}")
    text = str(existing_text or "")
    try:
        existing = json.loads(text) if text.strip() else {}
    except ValueError as exc:
        raise AnsibleFilterError(
            f"/etc/docker/daemon.json is not valid JSON ({exc}); dockerd would not start with it either: "
            "fix or remove it, then provision again (it is never overwritten)"
        ) from None
    if not isinstance(existing, dict):
        raise AnsibleFilterError("/etc/docker/daemon.json holds no JSON object; fix or remove it")
    wanted = dict(options)
    extra = [m for m in (mirrors or []) if m]
    if extra:
        wanted["registry-mirrors"] = list(wanted.get("registry-mirrors") or []) + extra
    merged, replaced = merge_daemon_options(existing, wanted)
    if merged == existing:
        return {"content": text, "write": False, "replaced": []}
    return {
        "content": json.dumps(merged, indent=2, sort_keys=True) + "\n",
        "write": True,
        "replaced": replaced,
    }


def r9700_container_environment(
    environment: Any, gpus: Any, render_nodes: str, gpu_access: str
) -> list[dict[str, Any]]:
    """The node's environment list as r9700-run's container sees its GPUs (container.env, Dockerfile ENV).

    environment: r9700_environment. gpus: r9700_resolved.gpus (every AMD GPU, PCI order, with
    `discrete`). With `devices` access and render_nodes "gpus" the container gets only the discrete
    GPUs' render nodes (r9700ctl/agent/container_run.py device_args), and ROCR_VISIBLE_DEVICES is
    renumbered for what it sees (r9700ctl.envlist.container_visible_devices); all of /dev/dri, or
    CDI's amd.com/gpu=all (every GPU bound to amdgpu: ROCm/container-toolkit internal/amdgpu), keep
    the host's numbers.
    """
    (envlist,) = require(AnsibleFilterError, "r9700ctl.envlist")
    visible = envlist.VISIBLE
    entries = [dict(e) for e in environment or []]
    if gpu_access == "cdi" or render_nodes != "gpus":
        return entries
    addresses = [str(g["address"]) for g in gpus or []]
    seen = [str(g["address"]) for g in gpus or [] if g.get("discrete")]
    for entry in entries:
        if entry.get("name") == visible:
            host = str(entry["value"])
            entry["value"] = envlist.container_visible_devices(host, addresses, seen)
            seen_text = "as the container sees only the cards"
            entry["reason"] = f"{entry.get('reason', '')}; {host} on the host, {seen_text}"
    return [e for e in entries if not (e.get("name") == visible and e["value"] == "")]


def r9700_cdi_spec_check(
    spec_text: Any, devices: Any, spec_path: str = "/etc/cdi/amd.json"
) -> dict[str, Any]:
    """{"generate": bool, "reason": str}: whether AMD's CDI spec must be (re)generated.

    AMD's CDI guide: "Regenerate the CDI specification whenever you add or remove GPU devices"
    (ROCm/container-toolkit docs/container-runtime/cdi-guide.rst). amd-ctk's spec has one device per
    GPU bound to amdgpu (its /dev/dri/card* and renderD* nodes, plus /dev/kfd) and "all" with every
    GPU's nodes (internal/cdi GenerateSpec, internal/amdgpu GetAMDGPUs); `devices` are the card and
    render nodes of the GPUs bound to amdgpu now, listed the same way. Unchanged: no new spec, so a
    second run changes nothing. No GPU bound now (the driver not loaded before the reboot): a spec
    made now would list none, so the old one stays and the reason says so.
    """
    now = {str(d).strip() for d in devices or [] if str(d).strip()}
    if not now:
        return {
            "generate": False,
            "reason": f"no GPU is bound to amdgpu now (driver not loaded yet?): {spec_path} is left as it "
            "is; provision again once the driver runs",
        }
    text = str(spec_text or "")
    if not text.strip():
        return {"generate": True, "reason": f"no CDI spec at {spec_path} yet"}
    try:
        spec = json.loads(text)
        entries = [d for d in spec.get("devices") or [] if isinstance(d, dict)]
    except (ValueError, AttributeError):
        return {"generate": True, "reason": f"{spec_path} is not a CDI spec in JSON"}
    chosen = [d for d in entries if d.get("name") == "all"] or entries
    listed = {
        str(node.get("path"))
        for d in chosen
        for node in (d.get("containerEdits") or {}).get("deviceNodes") or []
        if isinstance(node, dict) and str(node.get("path", "")).startswith("/dev/dri/")
    }
    gone, new = sorted(listed - now), sorted(now - listed)
    if gone:
        return {
            "generate": True,
            "reason": f"{spec_path} lists GPU devices the node no longer has: {', '.join(gone)}",
        }
    if new:
        return {
            "generate": True,
            "reason": f"the node has GPU devices {spec_path} does not list: {', '.join(new)}",
        }
    return {"generate": False, "reason": ""}


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "r9700_docker_daemon_json": r9700_docker_daemon_json,
            "r9700_container_environment": r9700_container_environment,
            "r9700_cdi_spec_check": r9700_cdi_spec_check,
        }
