"""Role r9700_containers and `validate --runtime container` on real lab nodes.

The flow a user of an init-less host goes through, on nodes that start provisioned (docker.io
installed by that cold run): provision the containers role (daemon.json merged, r9700-run and the
Dockerfile written; "docker installed, service not started: no init system", smoke check SKIP
with that reason); start dockerd by hand (the lab gives nodes
what dockerd needs: r9700ctl/lab/dockerd.py); provision again (dockerd answers now: the pinned
image is pulled through the lab's registry, set as r9700_container_registry_mirror); a third
provision changes nothing; then the agent runs inside the image on every node.

The image is the lab's stand-in (Debian + python3, no torch): only the config level runs in it.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import pytest
from child_process import r9700ctl
from test_roles import hosts, provision

IMAGE = "rocm/pytorch:rocm7.1.1_ubuntu24.04_py3.12_pytorch_release_2.9.1"  # the manifest's tag for 7.1.1
SEEDED = {"data-root": "/var/lib/docker", "log-opts": {"max-size": "10m", "max-file": "3"}}
# A conflicting key on node1 (max-size 10m there): the option's value wins and the old file is
# backed up. (dockerd itself refuses some combinations, e.g. compress without max-size.)
OPTIONS = '{"r9700_docker_daemon_options": {"log-opts": {"max-size": "20m"}}}'
NO_INIT = "docker installed, service not started: no init system"
# The role under test and the preflight it reads (the resolved release, the GPUs and the environment
# list for the Dockerfile and container.env; without r9700_env in the tags the role takes that list
# from preflight, as a user's `--tags r9700_containers` run does): the nodes start provisioned, and
# the other roles are proven by test_provision.py's cold run, which installs docker.io as well.
TAGS = ("--tags", "r9700_preflight,r9700_containers")


@pytest.fixture(scope="module")
def flow(make_lab_module: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Two nodes that start provisioned (docker.io installed by that cold run: test_provision.py
    proves it comes through the lab's proxy); the first provision here merges the options."""
    lab = make_lab_module(nodes=2, provisioned="auto")
    # An operator's daemon.json the role must keep (node1 only; node2 has none).
    seeded = lab.ssh(
        "node1",
        "sudo sh -c 'mkdir -p /etc/docker && cat > /etc/docker/daemon.json'",
        input=json.dumps(SEEDED),
    )
    assert seeded.returncode == 0, seeded.stderr
    work = tmp_path_factory.mktemp("containers")
    first = provision(lab.inventory, work, *TAGS, "-e", OPTIONS, name="first")
    return {"lab": lab, "work": work, "first": first}


@pytest.fixture(scope="module")
def with_dockerd(flow: dict[str, Any]) -> dict[str, Any]:
    """dockerd started on both nodes by hand, then two more provisions (pull, then nothing)."""
    lab, work = flow["lab"], flow["work"]
    assert flow["first"][0].returncode == 0, flow["first"][0].stdout + flow["first"][0].stderr
    for name, _ in lab.nodes:
        lab.start_dockerd(name)
    flow["second"] = provision(lab.inventory, work, *TAGS, "-e", OPTIONS, "-v", name="second")
    flow["third"] = provision(lab.inventory, work, *TAGS, "-e", OPTIONS, name="third")
    return flow


def test_docker_io_is_installed_and_the_engine_state_is_said(flow):
    lab, (done, report) = flow["lab"], flow["first"]
    assert done.returncode == 0, done.stdout + done.stderr
    for name, _ in lab.nodes:
        status = lab.ssh(name, "dpkg-query -W -f='${Status} ${Version}' docker.io")
        assert status.stdout.startswith("install ok installed 20.10"), status.stdout + status.stderr
        assert lab.ssh(name, "getent group docker").returncode == 0
        assert f"{name}: {NO_INIT}; image {IMAGE}" in done.stdout, done.stdout
    assert all(h["status"] in ("OK", "CHANGED") for h in hosts(report).values())


def test_a_pre_seeded_daemon_json_keeps_data_root_and_log_opts_with_a_backup(flow):
    lab, (done, _) = flow["lab"], flow["first"]
    assert done.returncode == 0, done.stdout + done.stderr
    kept = json.loads(lab.ssh("node1", "sudo cat /etc/docker/daemon.json").stdout)
    assert kept == {
        "data-root": "/var/lib/docker",
        "log-opts": {"max-size": "20m", "max-file": "3"},
        "registry-mirrors": [lab.registry_url],
    }
    backups = lab.ssh("node1", "sudo sh -c 'ls /etc/docker/daemon.json.*~'")
    assert backups.returncode == 0, backups.stderr
    assert json.loads(lab.ssh("node1", f"sudo cat {backups.stdout.split()[0]}").stdout) == SEEDED
    fresh = json.loads(lab.ssh("node2", "sudo cat /etc/docker/daemon.json").stdout)
    assert fresh == {"log-opts": {"max-size": "20m"}, "registry-mirrors": [lab.registry_url]}


def test_r9700_run_prints_the_command_and_the_dockerfile_carries_the_environment(flow):
    lab, (done, _) = flow["lab"], flow["first"]
    assert done.returncode == 0, done.stdout + done.stderr
    shown = lab.ssh(
        "node1", "cd /tmp && r9700-run -n python3 -c 'import torch; print(torch.cuda.device_count())'"
    )
    assert shown.returncode == 0, shown.stderr
    gids = lab.ssh("node1", "getent group video render | cut -d: -f3").stdout.split()
    expected = ["docker", "run", "--rm", "--label", "io.r9700ctl.started-by=r9700-run"]
    # The lab's nodes present their recorded machine's /dev/kfd and DRM nodes (r9700ctl/lab/machine.py).
    devices = [d for d in ("/dev/kfd", "/dev/dri") if lab.ssh("node1", f"test -e {d}").returncode == 0]
    for device in devices:
        expected += ["--device", device]
    for gid in gids:
        expected += ["--group-add", gid]
    expected += ["--ipc=host", "--shm-size", "8G", "--env-file", "/etc/r9700ctl/container.env",
                 "-v", "/tmp:/tmp", "-w", "/tmp",
                 IMAGE, "python3", "-c", "import torch; print(torch.cuda.device_count())"]  # fmt: skip
    assert shlex.split(shown.stdout) == expected
    # A device the node lacks is left out of the command, and said so.
    assert ("/dev/kfd is missing on this host" in shown.stderr) == ("/dev/kfd" not in devices)
    dockerfile = lab.ssh("node1", "cat /etc/r9700ctl/Dockerfile").stdout
    assert f"FROM {IMAGE}" in dockerfile.splitlines()
    # ENV is THE environment list the node recorded (the same values as its three host files).
    record = json.loads(lab.ssh("node1", "cat /etc/r9700ctl/node.json").stdout)
    wanted = [f"{e['name']}={e['value']}" for e in record["environment"]]
    env = dockerfile[dockerfile.index("\nENV ") + 5 :].replace("\\\n", " ").split()
    assert wanted and env == wanted


def test_without_an_init_system_docker_is_not_started_and_the_smoke_check_is_skip(flow):
    lab, (done, _) = flow["lab"], flow["first"]
    assert done.returncode == 0, done.stdout + done.stderr
    for name, _ in lab.nodes:
        assert f"{name}: {NO_INIT}" in done.stdout, done.stdout
        assert f"{name}: container smoke check: SKIP: {NO_INIT}" in done.stdout
        assert lab.ssh(name, "docker info", user="root").returncode != 0


def test_where_dockerd_answers_the_image_is_pulled_from_the_lab_registry(with_dockerd):
    lab, (done, report) = with_dockerd["lab"], with_dockerd["second"]
    assert done.returncode == 0, done.stdout + done.stderr
    for name, _ in lab.nodes:
        assert f"{name}: dockerd 20.10" in done.stdout and "(pulled)" in done.stdout, done.stdout
        image = lab.ssh(
            name, f"docker image inspect --format '{{{{json .Config.Labels}}}}' {IMAGE}", user="root"
        )
        assert image.returncode == 0, image.stderr
        assert "io.r9700ctl.lab.stand-in" in image.stdout
        # The stand-in image has no torch: nothing to ask, so SKIP with that reason, never a verdict.
        assert f"{name}: container smoke check: SKIP: no torch in {IMAGE} (ModuleNotFoundError" in done.stdout
    log = (Path(lab.directory) / "logs" / "registry.log").read_text()
    assert f"/v2/rocm/pytorch/manifests/{IMAGE.split(':')[1]}" in log
    assert {h["status"] for h in hosts(report).values()} == {"CHANGED"}


def test_a_provision_after_the_pull_changes_nothing(with_dockerd):
    lab, (done, report) = with_dockerd["lab"], with_dockerd["third"]
    assert done.returncode == 0, done.stdout + done.stderr
    assert {n: (h["status"], h["changed"]) for n, h in hosts(report).items()} == {
        n: ("OK", 0) for n, _ in lab.nodes
    }


def test_validate_runtime_container_produces_each_nodes_report_from_inside_the_image(with_dockerd, tmp_path):
    lab = with_dockerd["lab"]
    out = tmp_path / "fleet.json"
    done = r9700ctl("validate", str(lab.inventory), "--level", "config", "--runtime", "container",
                    "--json", str(out), "--no-history", columns=200, timeout=900)  # fmt: skip
    document = json.loads(out.read_text())
    nodes = {n["host"]: n for n in document["nodes"]}
    assert sorted(nodes) == sorted(name for name, _ in lab.nodes), done.stdout + done.stderr
    for name, node in nodes.items():
        assert node["runtime"] == "container" and node["image"] == IMAGE, node
        assert node["report"]["schema"] == "r9700ctl.validate/1", node
        # The agent ran in the container: its hostname is the container's, not the node's.
        assert node["report"]["node"] != name
        row = next(line for line in done.stdout.splitlines() if line.split()[:1] == [name])
        assert row.split()[2] == "container", done.stdout  # the image is named below the table
    ran_in = [line for line in done.stdout.splitlines() if line.endswith(f": the agent ran in {IMAGE}")]
    assert len(ran_in) == 1, done.stdout
    assert sorted(ran_in[0].split(":")[0].split(", ")) == sorted(name for name, _ in lab.nodes)


def test_verify_checks_the_containers_on_both_nodes(with_dockerd, tmp_path):
    """The testinfra suite (tests/infra/test_containers.py) passes on the provisioned nodes."""
    lab = with_dockerd["lab"]
    out = tmp_path / "verify.json"
    done = r9700ctl("verify", str(lab.inventory), "--json", str(out), columns=200, timeout=1500)
    assert done.returncode == 0, done.stdout + done.stderr
    results = json.loads(out.read_text())["results"]
    ran = {(r["host"], r["test"]): r["status"] for r in results if r["file"].endswith("test_containers.py")}
    for name, _ in lab.nodes:
        assert ran[(name, "test_r9700_run_runs_the_pinned_image_with_the_gpu_access")] == "passed"
        assert ran[(name, "test_daemon_json_is_json_and_carries_the_configured_options")] == "passed"
        # No init system in a lab node: the service check is skipped with that reason, never passed.
        assert ran[(name, "test_docker_runs_where_the_init_system_does")] == "skipped"
