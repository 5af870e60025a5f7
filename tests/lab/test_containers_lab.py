"""Role r9700_containers on real lab nodes: docker.io through the lab's proxy, daemon.json merged,
r9700-run and the Dockerfile in place, and a second provision that changes nothing.

The nodes have no init system, so the role installs and configures everything and says
"docker installed, service not started: no init system"; the smoke check is SKIP with that reason.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import pytest
from test_roles import hosts, provision

IMAGE = "rocm/pytorch:rocm7.1.1_ubuntu24.04_py3.12_pytorch_release_2.9.1"  # the manifest's tag for 7.1.1
SEEDED = {"data-root": "/srv/docker", "log-opts": {"max-size": "10m", "max-file": "3"}}


@pytest.fixture(scope="module")
def provisioned(
    make_lab_module: Any, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Any, Any, dict, Path]:
    lab = make_lab_module(nodes=2)
    # An operator's daemon.json the role must keep (node1 only; node2 has none).
    seeded = lab.ssh(
        "node1",
        f"sudo sh -c 'mkdir -p /etc/docker && echo {shlex.quote(json.dumps(SEEDED))} > /etc/docker/daemon.json'",
    )
    assert seeded.returncode == 0, seeded.stderr
    work = tmp_path_factory.mktemp("containers")
    done, report = provision(
        lab.inventory,
        work,
        "-e",
        '{"r9700_docker_daemon_options": {"log-opts": {"compress": "true"}}}',
        name="first",
    )
    return lab, done, report, work


def test_docker_io_comes_from_the_proxy_and_the_engine_state_is_said(provisioned):
    lab, done, report, _ = provisioned
    assert done.returncode == 0, done.stdout + done.stderr
    for name, _ in lab.nodes:
        policy = lab.ssh(name, "dpkg-query -W -f='${Status} ${Version}' docker.io")
        assert policy.stdout.startswith("install ok installed 20.10"), policy.stdout + policy.stderr
        assert lab.ssh(name, "getent group docker").returncode == 0
    log = (Path(lab.directory) / "acng" / "log" / "apache.log") if hasattr(lab, "directory") else None
    if log is not None and log.is_file():
        assert "docker.io_" in log.read_text()


def test_a_pre_seeded_daemon_json_keeps_data_root_and_log_opts(provisioned):
    lab, done, _, _ = provisioned
    assert done.returncode == 0, done.stdout + done.stderr
    kept = json.loads(lab.ssh("node1", "sudo cat /etc/docker/daemon.json").stdout)
    assert kept == {
        "data-root": "/srv/docker",
        "log-opts": {"max-size": "10m", "max-file": "3", "compress": "true"},
    }
    backups = lab.ssh("node1", "sudo sh -c 'ls /etc/docker/daemon.json.*~'")
    assert (
        backups.returncode == 0
        and json.loads(lab.ssh("node1", f"sudo cat {backups.stdout.split()[0]}").stdout) == SEEDED
    )
    fresh = json.loads(lab.ssh("node2", "sudo cat /etc/docker/daemon.json").stdout)
    assert fresh == {"log-opts": {"compress": "true"}}


def test_r9700_run_prints_the_command_and_the_dockerfile_carries_the_environment(provisioned):
    lab, done, _, _ = provisioned
    assert done.returncode == 0, done.stdout + done.stderr
    shown = lab.ssh(
        "node1", "cd /tmp && r9700-run -n python3 -c 'import torch; print(torch.cuda.device_count())'"
    )
    assert shown.returncode == 0, shown.stderr
    argv = shlex.split(shown.stdout)
    gids = lab.ssh("node1", "getent group video render | cut -d: -f3").stdout.split()
    expected = ["docker", "run", "--rm", "--label", "io.r9700ctl.started-by=r9700-run"]
    for gid in gids:
        expected += ["--group-add", gid]
    expected += ["--ipc=host", "--shm-size", "8G", "--env-file", "/etc/r9700ctl/container.env",
                 "-v", "/tmp:/tmp", "-w", "/tmp", IMAGE, "python3", "-c", "import torch; print(torch.cuda.device_count())"]  # fmt: skip
    assert argv == expected  # the lab's nodes have no /dev/kfd and no /dev/dri: left out, and said so
    assert "/dev/kfd is missing on this host" in shown.stderr
    dockerfile = lab.ssh("node1", "cat /etc/r9700ctl/Dockerfile").stdout.splitlines()
    assert f"FROM {IMAGE}" in dockerfile
    assert "ENV HSA_ENABLE_IPC_MODE_LEGACY=0 \\" in dockerfile and "    NCCL_P2P_DISABLE=1" in dockerfile


def test_without_an_init_system_the_smoke_check_is_skip_with_the_reason(provisioned):
    lab, done, _, _ = provisioned
    assert done.returncode == 0, done.stdout + done.stderr
    for name, _ in lab.nodes:
        assert f"{name}: docker installed, service not started: no init system" in done.stdout or (
            "docker installed, service not started: no init system" in done.stdout
        )


def test_a_second_provision_changes_nothing(provisioned):
    lab, done, _, work = provisioned
    assert done.returncode == 0, done.stdout + done.stderr
    again, report = provision(
        lab.inventory,
        work,
        "-e",
        '{"r9700_docker_daemon_options": {"log-opts": {"compress": "true"}}}',
        name="second",
    )
    assert again.returncode == 0, again.stdout + again.stderr
    assert {n: (h["status"], h["changed"]) for n, h in hosts(report).items()} == {
        n: ("OK", 0) for n, _ in lab.nodes
    }
