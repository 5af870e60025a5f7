"""ROCm containers (role r9700_containers): the engine, a merged daemon.json, the pinned image in
r9700-run's configuration and the Dockerfile, the same environment list as the host's files.

Whether dockerd runs is a runtime step (systemd nodes only); everything else holds everywhere.
"""

from __future__ import annotations

import json
import shlex
from typing import Any

import pytest

CONFIG = "/etc/r9700ctl/container.json"
DOCKERFILE = "/etc/r9700ctl/Dockerfile"
ENV_FILE = "/etc/r9700ctl/container.env"
WRAPPER = "/usr/local/bin/r9700-run"
DAEMON_JSON = "/etc/docker/daemon.json"
PACKAGES = {"distribution": ["docker.io"], "docker": ["docker-ce", "docker-ce-cli", "containerd.io"]}
CDI_SPEC = "/etc/cdi/amd.json"
# The card and render nodes of the GPUs bound to amdgpu now: what amd-ctk puts in its spec (one
# device per directory under the driver, ROCm/container-toolkit internal/amdgpu GetAMDGPUs).
GPU_DEVICES = (
    "for d in /sys/module/amdgpu/drivers/pci:amdgpu/????:*/drm/*; do "
    'n=${d##*/}; case $n in card*|renderD*) echo "/dev/dri/$n";; esac; done; true'
)


@pytest.fixture(autouse=True)
def _enabled(node: Any) -> None:
    if str(node.var("r9700_containers_enabled")).lower() in ("false", "0", "no"):
        pytest.skip("r9700_containers_enabled is false: no containers were provisioned")


def _json_var(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) and value.strip()[:1] in ("{", "[") else value


def expected_image(node: Any) -> str:
    override = node.var("r9700_container_image")
    if override:
        return str(override)
    release = node.release.raw
    digest = release.get("pytorch_image_digest")
    return release["pytorch_image"] + (f"@{digest}" if digest else "")


def test_the_container_engine_is_installed(host, node):
    source = str(node.var("r9700_docker_source") or "distribution")
    for package in PACKAGES[source]:
        assert host.package(package).is_installed, f"{package} ({source}) is not installed"
    assert host.group("docker").exists


def test_daemon_json_is_json_and_carries_the_configured_options(host, node):
    options = _json_var(node.var("r9700_docker_daemon_options")) or {}
    mirror = node.var("r9700_container_registry_mirror")
    daemon = host.file(DAEMON_JSON)
    if not options and not mirror:
        if daemon.exists:  # the operator's own file, left as it was
            json.loads(daemon.content_string)
        return
    merged = json.loads(daemon.content_string)
    for key, value in options.items():
        if isinstance(value, dict):
            assert value.items() <= merged.get(key, {}).items(), f"{key}: {merged.get(key)}"
        else:
            assert merged.get(key) == value, f"{key}: {merged.get(key)}"
    if mirror:
        assert mirror in merged.get("registry-mirrors", [])


def test_r9700_run_runs_the_pinned_image_with_the_gpu_access(host, node):
    wrapper = host.file(WRAPPER)
    assert wrapper.exists and wrapper.user == "root" and wrapper.mode == 0o755
    config = json.loads(host.file(CONFIG).content_string)
    assert config["image"] == expected_image(node)
    assert config["gpu_access"] == str(node.var("r9700_container_gpu_access") or "devices")
    shown = host.run(f"cd / && {WRAPPER} -n python3 -c 'import torch'")
    assert shown.rc == 0, shown.stderr
    argv = shlex.split(shown.stdout)
    assert argv[:3] == ["docker", "run", "--rm"] and config["image"] in argv
    assert "--ipc=host" in argv and argv[argv.index("--shm-size") + 1] == config["shm_size"]
    seccomp = str(node.var("r9700_container_seccomp_unconfined")).lower() in ("true", "1", "yes")
    assert ("seccomp=unconfined" in argv) == seccomp


def container_environment(node: Any, config: dict[str, Any]) -> dict[str, str]:
    """The node's environment list as r9700-run's container sees the GPUs.

    Given only the cards' render nodes (devices access, render_nodes gpus), ROCr inside numbers only
    the GPUs whose render node it can open (ROCT-Thunk-Interface topology.c), so a host index of
    ROCR_VISIBLE_DEVICES becomes that card's place among the passed ones; a GPU-<uuid> and every
    other variable are the host's. All of /dev/dri, or CDI, keep the host's numbers.
    """
    environment = {e["name"]: e["value"] for e in node.record.get("environment", [])}
    value = environment.get("ROCR_VISIBLE_DEVICES")
    if value is None or config.get("gpu_access") == "cdi" or config.get("render_nodes") != "gpus":
        return environment
    amd = sorted(g["address"] for g in node.record.get("gpus", []) if g.get("vendor") == "0x1002")
    passed = set(config.get("pci") or [])
    place = {address: str(i) for i, address in enumerate(a for a in amd if a in passed)}
    inside = [
        item if not item.isdigit() else place.get(amd[int(item)] if int(item) < len(amd) else "", "")
        for item in value.split(",")
    ]
    environment["ROCR_VISIBLE_DEVICES"] = ",".join(item for item in inside if item)
    if not environment["ROCR_VISIBLE_DEVICES"]:
        del environment["ROCR_VISIBLE_DEVICES"]
    return environment


def test_the_dockerfile_and_the_env_file_carry_the_nodes_environment_list(host, node):
    """The recorded list, ROCR_VISIBLE_DEVICES numbered as the container sees the GPUs (issue 22 item 8)."""
    config = json.loads(host.file(CONFIG).content_string)
    environment = container_environment(node, config)
    lines = host.file(DOCKERFILE).content_string.splitlines()
    assert f"FROM {expected_image(node)}" in lines
    env_lines = [line for line in host.file(ENV_FILE).content_string.splitlines() if line and line[0] != "#"]
    assert dict(line.split("=", 1) for line in env_lines) == environment
    dockerfile = host.file(DOCKERFILE).content_string
    env_block = (
        dockerfile[dockerfile.index("ENV ") + 4 :].replace("\\\n", " ").split()
        if "ENV " in dockerfile
        else []
    )
    assert dict(item.split("=", 1) for item in env_block) == environment


def test_docker_runs_where_the_init_system_does(host, node):
    if not node.runtime:
        pytest.skip("no init system on this node: docker is installed, not started (runtime steps off)")
    service = host.service("docker")
    assert service.is_enabled and service.is_running


def test_the_cdi_spec_lists_the_gpus_the_node_has_now(host, node):
    """AMD's CDI guide: regenerate the spec whenever GPUs are added or removed (ROCm/container-toolkit
    cdi-guide.rst); a spec made before a card was added or pulled hands containers the wrong devices
    (issue 22 item 7)."""
    if str(node.var("r9700_container_gpu_access") or "devices") != "cdi":
        pytest.skip("r9700_container_gpu_access is devices: no CDI spec to hold to the GPUs")
    spec = host.file(CDI_SPEC)
    assert spec.exists, f"{CDI_SPEC} is missing although r9700_container_gpu_access is cdi"
    now = set(host.run(GPU_DEVICES).stdout.split())
    if not now:
        pytest.skip("no GPU is bound to amdgpu on this node: the spec cannot be held to its GPUs")
    devices = json.loads(spec.content_string).get("devices") or []
    chosen = [d for d in devices if d.get("name") == "all"] or devices
    listed = {
        node_["path"]
        for d in chosen
        for node_ in (d.get("containerEdits") or {}).get("deviceNodes") or []
        if str(node_.get("path", "")).startswith("/dev/dri/")
    }
    assert listed == now, (
        f"{CDI_SPEC} lists {sorted(listed - now) or 'nothing more'} the node does not have and misses "
        f"{sorted(now - listed) or 'nothing'}: provision again (or: amd-ctk cdi generate --output={CDI_SPEC})"
    )
