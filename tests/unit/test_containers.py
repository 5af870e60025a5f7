"""The r9700_containers role's own code: the daemon.json merge filter and the r9700-run wrapper.

r9700-run runs as the node runs it (python3 FILE), against a configuration and fake device
files in a temporary directory; `-n` prints the docker command, which is what is checked.
"""

from __future__ import annotations

import contextlib
import grp
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import collection_plugins
import pytest
from agent_stage import installed_as
from ansible.errors import AnsibleFilterError

ROLE = Path(__file__).resolve().parents[2] / "roles" / "r9700_containers"
WRAPPER = installed_as("r9700-run")  # the node program under that name, as the role installs it
IMAGE = "rocm/pytorch:rocm7.1.1_ubuntu24.04_py3.12_pytorch_release_2.9.1"


merge = collection_plugins.plugin("filter", "r9700_containers").r9700_docker_daemon_json


# -- daemon.json ---------------------------------------------------------------------------------


def test_an_absent_daemon_json_gets_only_the_options():
    result = merge("", {"log-driver": "local"})
    assert result["write"] and json.loads(result["content"]) == {"log-driver": "local"}
    assert result["replaced"] == []


def test_an_absent_daemon_json_stays_absent_when_there_is_nothing_to_set():
    assert merge("", {}) == {"content": "", "write": False, "replaced": []}


def test_every_existing_key_is_kept_and_nested_objects_merge_key_by_key():
    old = json.dumps(
        {"data-root": "/srv/docker", "log-opts": {"max-size": "10m"}, "registry-mirrors": ["https://a"]}
    )
    result = merge(old, {"log-opts": {"max-file": "3"}}, ["http://10.213.0.1:5000", "https://a"])
    assert json.loads(result["content"]) == {
        "data-root": "/srv/docker",
        "log-opts": {"max-size": "10m", "max-file": "3"},
        "registry-mirrors": ["https://a", "http://10.213.0.1:5000"],
    }
    assert result["write"] and result["replaced"] == []


def test_a_conflicting_key_takes_the_options_value_and_is_named():
    old = json.dumps({"log-driver": "json-file", "log-opts": {"max-size": "10m"}, "data-root": "/srv/docker"})
    result = merge(old, {"log-driver": "local", "log-opts": {"max-size": "50m"}})
    assert json.loads(result["content"]) == {
        "log-driver": "local",
        "log-opts": {"max-size": "50m"},
        "data-root": "/srv/docker",
    }
    assert result["replaced"] == ['log-driver: "json-file" -> "local"', 'log-opts.max-size: "10m" -> "50m"']


def test_an_equal_file_is_left_byte_for_byte_whatever_its_formatting():
    old = '{"registry-mirrors":["http://m:5000"],   "data-root":"/srv/docker"}'
    result = merge(old, {"data-root": "/srv/docker"}, ["http://m:5000"])
    assert result == {"content": old, "write": False, "replaced": []}


@pytest.mark.parametrize("text", ['{"data-root": ', "[1, 2]"])
def test_a_broken_daemon_json_is_refused_never_overwritten(text):
    with pytest.raises(AnsibleFilterError, match="fix or remove it"):
        merge(text, {"log-driver": "local"})


# -- r9700-run ------------------------------------------------------------------------------------


def _config(tmp_path: Path, **overrides) -> Path:
    dev = tmp_path / "dev"
    (dev / "dri" / "by-path").mkdir(parents=True, exist_ok=True)
    (dev / "kfd").touch()
    for index, address in enumerate(["0000:03:00.0", "0000:04:00.0"]):
        node = dev / "dri" / f"renderD{128 + index}"
        node.touch()
        link = dev / "dri" / "by-path" / f"pci-{address}-render"
        if not link.exists():
            link.symlink_to(f"../renderD{128 + index}")
    env_file = tmp_path / "container.env"
    env_file.write_text("# env\nNCCL_P2P_DISABLE=1\n")
    config = {
        "image": IMAGE,
        "gpu_access": "devices",
        "render_nodes": "all",
        "pci": ["0000:03:00.0", "0000:04:00.0"],
        "groups": ["video", "render"],
        "ipc_host": True,
        "shm_size": "8G",
        "seccomp_unconfined": False,
        "env_file": str(env_file),
        "kfd": str(dev / "kfd"),
        "dri": str(dev / "dri"),
    }
    config.update(overrides)
    path = tmp_path / "container.json"
    path.write_text(json.dumps(config))
    return path


def run_wrapper(config: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "R9700_RUN_CONFIG": str(config)}
    return subprocess.run(
        [sys.executable, str(WRAPPER), *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=30,
        check=False,
    )


def _gids() -> list[str]:
    gids = []
    for name in ("video", "render"):
        with contextlib.suppress(KeyError):
            gids += ["--group-add", str(grp.getgrnam(name).gr_gid)]
    return gids


def test_dry_run_prints_the_devices_command_with_host_gids_ipc_shm_env_and_the_current_directory(tmp_path):
    config = _config(tmp_path)
    done = run_wrapper(
        config, "-n", "python3", "-c", "import torch; print(torch.cuda.device_count())", cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    dev = tmp_path / "dev"
    expected = [
        "docker", "run", "--rm", "--label", "io.r9700ctl.started-by=r9700-run",
        "--device", str(dev / "kfd"), "--device", str(dev / "dri"),
        *_gids(),
        "--ipc=host", "--shm-size", "8G",
        "--env-file", str(tmp_path / "container.env"),
        "-v", f"{tmp_path}:{tmp_path}", "-w", str(tmp_path),
        IMAGE, "python3", "-c", "import torch; print(torch.cuda.device_count())",
    ]  # fmt: skip
    assert shlex.split(done.stdout) == expected
    assert "seccomp" not in done.stdout


def test_render_nodes_of_the_nodes_gpus_only_and_seccomp_when_asked(tmp_path):
    config = _config(tmp_path, render_nodes="gpus", pci=["0000:04:00.0"], seccomp_unconfined=True)
    done = run_wrapper(config, "-n", "-e", "HIP_VISIBLE_DEVICES=0", "-v", "/data:/data", "true", cwd=tmp_path)
    argv = shlex.split(done.stdout)
    devices = [argv[i + 1] for i, a in enumerate(argv) if a == "--device"]
    assert devices == [str(tmp_path / "dev" / "kfd"), str(tmp_path / "dev" / "dri" / "renderD129")]
    assert argv[argv.index("--security-opt") + 1] == "seccomp=unconfined"
    assert argv[argv.index("-e") + 1] == "HIP_VISIBLE_DEVICES=0"
    assert argv[argv.index(IMAGE) - 2 : argv.index(IMAGE)] == ["-v", "/data:/data"]


def test_cdi_access_asks_for_amd_gpu_all_and_no_device_files(tmp_path):
    config = _config(tmp_path, gpu_access="cdi")
    argv = shlex.split(run_wrapper(config, "-n", "true", cwd=tmp_path).stdout)
    assert [argv[i + 1] for i, a in enumerate(argv) if a == "--device"] == ["amd.com/gpu=all"]
    assert "/dev" not in " ".join(argv)


def test_a_missing_device_is_left_out_and_named(tmp_path):
    config = _config(tmp_path)
    (tmp_path / "dev" / "kfd").unlink()
    done = run_wrapper(config, "-n", "true", cwd=tmp_path)
    assert done.returncode == 0
    assert "kfd" not in done.stdout and "is missing on this host" in done.stderr


def test_without_a_configuration_it_says_to_provision_and_exits_3(tmp_path):
    done = run_wrapper(tmp_path / "absent.json", "true", cwd=tmp_path)
    assert done.returncode == 3 and "provision the node" in done.stderr
    assert run_wrapper(_config(tmp_path), "--bogus", cwd=tmp_path).returncode == 64


def test_from_the_root_directory_nothing_is_mounted_on_slash(tmp_path):
    """docker refuses '/' as a destination; Ansible's smoke check runs the wrapper from '/'."""
    argv = shlex.split(run_wrapper(_config(tmp_path), "-n", "true", cwd=Path("/")).stdout)
    assert "/:/" not in argv and "-w" not in argv
    assert argv[-2:] == [IMAGE, "true"]


def test_host_network_runs_on_the_hosts_network_with_memlock_unlimited(tmp_path):
    """validate --cluster's torch phases run in the image through `r9700-run --host-network`: the
    cluster NIC is the host's (Docker's bridge hides it) and RDMA needs locked memory without limit."""
    argv = shlex.split(run_wrapper(_config(tmp_path), "-n", "--host-network", "python3", cwd=tmp_path).stdout)
    image = argv.index(IMAGE)
    options = argv[:image]
    assert "--network=host" in options
    assert options[options.index("--ulimit") + 1] == "memlock=-1"
    assert argv[image:] == [IMAGE, "python3"]
    plain = shlex.split(run_wrapper(_config(tmp_path), "-n", "python3", cwd=tmp_path).stdout)
    assert "--network=host" not in plain and "--ulimit" not in plain


def test_image_id_prints_the_builds_id_from_docker(tmp_path):
    """Two nodes can hold one tag built twice: the ID (docker image inspect .Id) tells them apart."""
    docker = tmp_path / "docker"
    docker.write_text(
        "#!/bin/sh\n"
        '[ "$1 $2 $3 $4" = "image inspect --format {{.Id}}" ] || exit 9\n'
        "echo sha256:" + "c" * 64 + "\n"
    )
    docker.chmod(0o755)
    config = _config(tmp_path, docker=str(docker))
    done = run_wrapper(config, "--image-id", cwd=tmp_path)
    assert (done.returncode, done.stdout) == (0, "sha256:" + "c" * 64 + "\n"), done.stderr
    assert run_wrapper(config, "--check", cwd=tmp_path).stdout == IMAGE + "\n"
