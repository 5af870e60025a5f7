"""Role r9700_containers rendered for real preflight verdicts: the pinned image, daemon.json merge,
the Dockerfile's ENV (THE environment list), r9700-run's configuration, and what runs where.

The Dockerfile is built by nothing here; its text is checked line by line and its ENV values are
compared with the list r9700_env writes. r9700-run itself runs in tests/unit/test_containers.py.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
import yaml
from role_render_harness import AssertFailed, RoleRender, host_context

from r9700ctl import manifest as manifest_module
from r9700ctl.agent.result import one_line


def context(os_key: str = "ubuntu-24.04", gpus: int = 4, manager: str = "systemd", **host_vars: Any) -> dict:
    host_vars.setdefault("r9700_rocm_version", "7.1.1")
    host_vars.setdefault("r9700_repo_key_fingerprint", "DB4CCF23AC5D3E2846037EB801190F9BDF85CB5A")
    ctx = host_context(os_key, gpus, host_vars=host_vars, service_manager=manager)
    ctx["r9700_environment"] = ctx["r9700_resolved"]["environment"]
    ctx["r9700_toolkit_version"] = "9.9.9"
    ctx["ansible_distribution_release"] = {"ubuntu-24.04": "noble", "ubuntu-22.04": "jammy"}.get(
        os_key, "bookworm"
    )
    return ctx


def registered(
    daemon_json: str | None = None, dockerd: bool = True, image: bool = False, kfd: bool = False
) -> dict:
    old = (
        {"content": base64.b64encode(daemon_json.encode()).decode()}
        if daemon_json is not None
        else {"failed": True}
    )
    return {
        "__r9700_containers_users": {"results": []},
        "__r9700_containers_daemon_old": old,
        "__r9700_containers_dockerd": {"rc": 0, "stdout": "20.10.24+dfsg1", "stderr": ""}
        if dockerd
        else {
            "rc": 1,
            "stdout": "",
            "stderr": "Cannot connect to the Docker daemon at unix:///var/run/docker.sock.",
        },
        "__r9700_containers_image_present": {"rc": 0 if image else 1},
        "__r9700_containers_kfd": {"stat": {"exists": kfd}},
        "__r9700_containers_smoke": {"rc": 1, "stdout_lines": [], "stderr": ""},
    }


def run(ctx: dict, regs: dict) -> RoleRender:
    return RoleRender("r9700_containers", ctx, regs).run()


def test_the_image_is_the_manifests_tag_for_the_resolved_release():
    ctx = context()
    role = run(ctx, registered())
    config = json.loads(role.task("Configure | Write what r9700-run runs").args["content"])
    release = manifest_module.load().release("7.1.1")
    assert (
        config["image"]
        == release.pytorch_image
        == "rocm/pytorch:rocm7.1.1_ubuntu24.04_py3.12_pytorch_release_2.9.1"
    )
    assert config["gpu_access"] == "devices" and config["groups"] == ["video", "render"]
    assert config["shm_size"] == "8G" and config["seccomp_unconfined"] is False
    assert config["pci"] == [f"0000:{3 + i:02x}:00.0" for i in range(4)]


def test_a_digest_in_the_manifest_pins_the_image_by_digest():
    role = run(context(os_key="ubuntu-24.04", r9700_rocm_version="6.4.1"), registered())
    config = json.loads(role.task("Configure | Write what r9700-run runs").args["content"])
    assert config["image"] == (
        "rocm/pytorch:rocm6.4.1_ubuntu24.04_py3.12_pytorch_release_2.6.0"
        "@sha256:c76af9bfb1c25b0f40d4c29e8652105c57250bf018d23ff595b06bd79666fdd7"
    )


def test_an_override_image_wins_and_the_dockerfile_is_from_it_with_the_environment_list():
    ctx = context(
        r9700_container_image="registry.example/rocm/pytorch:mine", r9700_env_extra={"NCCL_DEBUG": "WARN"}
    )
    role = run(ctx, registered())
    files = role.task("Configure | Write the container environment file and the Dockerfile").files
    dockerfile = files["/etc/r9700ctl/Dockerfile"]
    lines = dockerfile.splitlines()
    assert "FROM registry.example/rocm/pytorch:mine" in lines
    assert 'LABEL io.r9700ctl.toolkit-version="9.9.9" \\' in lines
    env = {e["name"]: e["value"] for e in ctx["r9700_environment"]}
    assert env["NCCL_DEBUG"] == "WARN"
    env_block = dockerfile[dockerfile.index("ENV ") + 4 :].replace("\\\n", " ").split()
    assert dict(item.split("=", 1) for item in env_block) == env  # the same list, nothing else
    env_file = files["/etc/r9700ctl/container.env"]
    assert {line for line in env_file.splitlines() if not line.startswith("#")} == {
        f"{k}={v}" for k, v in env.items()
    }


def test_daemon_json_is_merged_not_clobbered_and_written_with_a_backup():
    old = '{"data-root": "/srv/docker", "log-opts": {"max-size": "10m"}}'
    ctx = context(
        r9700_docker_daemon_options={"log-opts": {"max-file": "3"}},
        r9700_container_registry_mirror="http://10.213.0.1:5000",
    )
    role = run(ctx, registered(old))
    write = role.task("Configure | Write the merged daemon.json")
    assert not write.skipped and write.args["backup"] is True
    merged = json.loads(write.args["content"])
    assert merged == {
        "data-root": "/srv/docker",
        "log-opts": {"max-size": "10m", "max-file": "3"},
        "registry-mirrors": ["http://10.213.0.1:5000"],
    }
    assert "Restart docker" in role.notified


def test_an_unchanged_daemon_json_is_not_written_and_no_restart_is_asked():
    old = '{\n  "registry-mirrors": ["http://10.213.0.1:5000"]\n}\n'
    role = run(context(r9700_container_registry_mirror="http://10.213.0.1:5000"), registered(old))
    assert role.task("Configure | Write the merged daemon.json").skipped
    assert "Restart docker" not in role.notified


def test_without_an_init_system_nothing_is_started_and_the_smoke_check_says_why():
    role = run(context(manager="sh"), registered(dockerd=False))
    assert role.task("Service | Ensure docker is enabled and running").skipped
    assert (
        role.vars["__r9700_containers_engine"].strip()
        == "docker installed, service not started: no init system"
    )
    assert role.task("Image | Pull the pinned image").skipped
    skip = role.task("Smoke | SKIP the container smoke check")
    assert (
        skip.args["msg"]
        == "container smoke check: SKIP: docker installed, service not started: no init system"
    )
    status = role.vars["r9700_containers_status"]  # the run's summary shows it (runner CONTAINERS_FACT)
    assert status["smoke"].strip() == "SKIP: docker installed, service not started: no init system"
    assert status["image"].endswith("(not pulled: docker installed, service not started: no init system)")


def test_where_dockerd_answers_a_missing_image_is_pulled_and_a_present_one_is_not():
    pulled = run(context(), registered(dockerd=True, image=False))
    assert pulled.task("Image | Pull the pinned image").args["argv"] == [
        "docker",
        "pull",
        "rocm/pytorch:rocm7.1.1_ubuntu24.04_py3.12_pytorch_release_2.9.1",
    ]
    kept = run(context(), registered(dockerd=True, image=True))
    assert kept.task("Image | Pull the pinned image").skipped
    skip = kept.task("Smoke | SKIP the container smoke check")
    assert "no /dev/kfd on the node" in skip.args["msg"]


def test_an_image_archive_is_loaded_instead_of_pulled(tmp_path):
    archive = tmp_path / "pytorch.tar"  # on the controller: preflight refuses a missing one
    archive.write_bytes(b"a docker save archive")
    role = run(
        context(r9700_container_image_archive=str(archive)),
        registered(dockerd=True, image=False),
    )
    assert role.task("Image | Load the image archive").args["argv"][:3] == ["docker", "load", "--input"]
    assert role.task("Image | Pull the pinned image").skipped


def test_a_proxy_becomes_a_drop_in_and_notifies_daemon_reload_before_the_restart():
    role = run(
        context(r9700_docker_proxy="http://proxy.example:3128", r9700_docker_no_proxy=["10.0.0.1"]),
        registered(),
    )
    dropin = role.task("Configure | Ensure dockerd's proxy drop-in").files[
        "/etc/systemd/system/docker.service.d/http-proxy.conf"
    ]
    assert 'Environment="HTTPS_PROXY=http://proxy.example:3128"' in dropin.splitlines()
    assert 'Environment="NO_PROXY=10.0.0.1,localhost,127.0.0.1"' in dropin.splitlines()
    handlers = [h["name"] for h in yaml.safe_load((role.base / "handlers/main.yml").read_text())]
    assert handlers == ["Reload systemd units for docker", "Restart docker"]  # run in this order


def test_cdi_needs_docker_25_and_a_bad_access_mode_is_refused():
    with pytest.raises(AssertFailed, match="cdi needs Docker 25 or later"):
        run(
            context(r9700_container_gpu_access="cdi"),
            {**registered(), "__r9700_containers_amd_ctk": {"rc": 0}},
        )
    # A value outside the role's argument_specs is refused by preflight, before the role runs.
    with pytest.raises(
        AssertionError, match="r9700_container_gpu_access='privileged' is not one of devices, cdi"
    ):
        run(context(r9700_container_gpu_access="privileged"), registered())


def test_docker_repository_option_is_deb822_signed_with_a_checked_key():
    regs = {
        **registered(),
        "__r9700_containers_key_colons": {
            "stdout_lines": ["fpr:::::::::9DC858229FC7DD38854AE2D88D81803C0EBFCD88:"]
        },
    }
    role = run(
        context(r9700_docker_source="docker", r9700_docker_repo_base_url="https://mirror.example/docker/"),
        regs,
    )
    source = role.task("Install | Ensure Docker's deb822 source").args
    assert source["uris"] == ["https://mirror.example/docker/ubuntu"] and source["suites"] == ["noble"]
    assert source["signed_by"] == "/etc/apt/keyrings/docker.asc" and source["components"] == ["stable"]
    assert role.task("Install | Ensure the container engine").args["name"] == [
        "docker-ce",
        "docker-ce-cli",
        "containerd.io",
    ]
    wrong = {
        **regs,
        "__r9700_containers_key_colons": {
            "stdout_lines": ["fpr:::::::::0000000000000000000000000000000000000000:"]
        },
    }
    with pytest.raises(AssertFailed, match=r"is not\s+9DC858229FC7DD38854AE2D88D81803C0EBFCD88"):
        run(context(r9700_docker_source="docker"), wrong)


def _smoke(stdout: dict, rc: int = 0) -> dict:
    ctx = context()
    ctx["ansible_facts"] = {**ctx["ansible_facts"], "getent_group": {"render": ["x", "993", ""]}}
    regs = {
        **registered(dockerd=True, image=True, kfd=True),
        "__r9700_containers_smoke": {
            "rc": rc,
            "stdout_lines": [json.dumps(stdout)],
            "stderr": "docker: boom",
            "stderr_lines": ["docker: boom", "See 'docker run --help'."],
        },
    }
    return run(ctx, regs)


def test_the_smoke_check_passes_only_with_every_gpu_its_gfx_target_and_the_host_render_gid():
    role = _smoke({"count": 4, "gfx": ["gfx1201"] * 4, "groups": [0, 44, 993]})
    judged = role.task("Smoke | Judge what torch saw")
    assert not judged.skipped and "PASS" in judged.args["success_msg"]
    assert role.task("Smoke | Ask torch in the image").args["argv"][:2] == [
        "/usr/local/bin/r9700-run",
        "python3",
    ]
    assert (
        role.vars["r9700_containers_status"]["smoke"]
        .strip()
        .startswith("PASS: torch sees 4 GPU(s) of gfx1201")
    )


@pytest.mark.parametrize(
    "seen",
    [
        {"count": 3, "gfx": ["gfx1201"] * 3, "groups": [993]},  # a GPU missing in the container
        {"count": 4, "gfx": ["gfx1100"] * 4, "groups": [993]},  # another target than preflight found
        {"count": 4, "gfx": ["gfx1201"] * 4, "groups": [0, 44]},  # the image's render gid, not the host's
    ],
)
def test_the_smoke_check_fails_with_what_torch_saw(seen):
    with pytest.raises(AssertFailed, match=r"container\s+smoke check FAIL"):
        _smoke(seen)
    with pytest.raises(AssertFailed, match="boom"):
        _smoke({}, rc=1)


def test_an_image_without_torch_is_skip_with_the_reason_not_a_verdict():
    role = _smoke({"torch": False, "error": "ModuleNotFoundError: No module named 'torch'"})
    assert role.task("Smoke | Judge what torch saw").skipped
    skip = role.task("Smoke | SKIP the container smoke check").args["msg"]
    assert skip == (
        "container smoke check: SKIP: no torch in "
        "rocm/pytorch:rocm7.1.1_ubuntu24.04_py3.12_pytorch_release_2.9.1 "
        "(ModuleNotFoundError: No module named 'torch'): nothing to ask"
    )


# -- ROCR_VISIBLE_DEVICES as the container sees the GPUs (issue 22 item 8) -----------------------------


def igpu_first_context(**host_vars: Any) -> dict:
    """4 R9700s and an AMD iGPU that sorts FIRST on the PCI bus (0000:01:00.0): on the host ROCr numbers
    it 0, so the environment list's ROCR_VISIBLE_DEVICES (auto: keep ROCm off the iGPU) is 1,2,3,4."""
    import role_render_harness as harness

    from r9700ctl import preflight

    ctx = context(**host_vars)
    facts = harness.node_facts("ubuntu-24.04", 4, igpu=True)
    facts["pci"]["devices"][-1]["address"] = "0000:01:00.0"
    verdict = preflight.judge(facts, ctx, manifest_module.load())
    assert verdict.ok, [one_line(c) for c in verdict.failures]
    ctx["r9700_resolved"] = verdict.resolved.to_dict()
    ctx["r9700_environment"] = ctx["r9700_resolved"]["environment"]
    return ctx


def container_env(role: RoleRender) -> tuple[dict[str, str], dict[str, str]]:
    """(container.env, the Dockerfile's ENV) as NAME -> value."""
    files = role.task("Configure | Write the container environment file and the Dockerfile").files
    env_file = files["/etc/r9700ctl/container.env"]
    dockerfile = files["/etc/r9700ctl/Dockerfile"]
    env_block = dockerfile[dockerfile.index("ENV ") + 4 :].replace("\\\n", " ").split()
    return (
        dict(line.split("=", 1) for line in env_file.splitlines() if line and not line.startswith("#")),
        dict(item.split("=", 1) for item in env_block),
    )


def test_a_container_seeing_only_the_cards_render_nodes_gets_indices_shifted_past_the_igpu():
    """Issue 22 item 8: with r9700_container_render_nodes: gpus the container gets only the R9700s'
    render nodes; ROCr skips a KFD node whose render node it cannot open (ROCT-Thunk-Interface
    topology.c, topology_sysfs_check_node_supported), so inside, the cards are 0-3. The host's 1,2,3,4
    would hide card 0 and name a GPU that is not there."""
    ctx = igpu_first_context(r9700_container_render_nodes="gpus")
    assert {e["name"]: e["value"] for e in ctx["r9700_environment"]}["ROCR_VISIBLE_DEVICES"] == "1,2,3,4"
    env_file, dockerfile = container_env(run(ctx, registered()))
    assert env_file["ROCR_VISIBLE_DEVICES"] == dockerfile["ROCR_VISIBLE_DEVICES"] == "0,1,2,3"
    rest = {k: v for k, v in env_file.items() if k != "ROCR_VISIBLE_DEVICES"}
    assert rest == {
        e["name"]: e["value"] for e in ctx["r9700_environment"] if e["name"] != "ROCR_VISIBLE_DEVICES"
    }


@pytest.mark.parametrize(
    "host_vars",
    [{"r9700_container_render_nodes": "all"}, {"r9700_container_gpu_access": "cdi"}],
    ids=["all-of-dev-dri", "cdi-every-amdgpu-device"],
)
def test_a_container_that_sees_every_gpu_keeps_the_host_indices(host_vars):
    """All of /dev/dri, or amd-ctk's CDI spec (every PCI device bound to amdgpu, the iGPU included:
    ROCm/container-toolkit internal/amdgpu GetAMDGPUs): the container numbers the GPUs as the host does."""
    regs = {**registered(dockerd=False), "__r9700_containers_amd_ctk": {"rc": 0}}
    env_file, dockerfile = container_env(run(igpu_first_context(**host_vars), regs))
    assert env_file["ROCR_VISIBLE_DEVICES"] == dockerfile["ROCR_VISIBLE_DEVICES"] == "1,2,3,4"


def test_a_users_list_is_mapped_card_by_card_and_uuids_pass_unchanged():
    """ROCR_VISIBLE_DEVICES takes indices or UUIDs (ROCm docs, GPU isolation techniques); a UUID names
    the same GPU inside and out."""
    ctx = igpu_first_context(r9700_container_render_nodes="gpus", r9700_rocr_visible_devices="4,GPU-1a2b3c,2")
    env_file, _ = container_env(run(ctx, registered()))
    assert env_file["ROCR_VISIBLE_DEVICES"] == "3,GPU-1a2b3c,1"


# -- the CDI spec follows the node's GPUs (issue 22 item 7) ---------------------------------------------


def cdi_spec(render_minors: list[int]) -> str:
    """/etc/cdi/amd.json as amd-ctk writes it (ROCm/container-toolkit internal/cdi GenerateSpec): one
    device per GPU with its card and render nodes plus /dev/kfd, then "all" with every GPU's nodes."""
    kfd = {"path": "/dev/kfd", "type": "c", "major": 235, "minor": 0}
    devices = []
    for i, minor in enumerate(render_minors):
        nodes = [
            {"path": f"/dev/dri/card{minor - 127}", "type": "c", "major": 226, "minor": minor - 127},
            {"path": f"/dev/dri/renderD{minor}", "type": "c", "major": 226, "minor": minor},
        ]
        devices.append({"name": str(i), "containerEdits": {"deviceNodes": [*nodes, kfd]}})
    every = [n for d in devices for n in d["containerEdits"]["deviceNodes"][:-1]] + [kfd]
    devices.append({"name": "all", "containerEdits": {"deviceNodes": every}})
    return json.dumps({"cdiVersion": "0.6.0", "kind": "amd.com/gpu", "devices": devices})


def drm_now(render_minors: list[int]) -> list[str]:
    """What the role lists of the GPUs bound to amdgpu now (their card and render nodes)."""
    return [
        f"/dev/dri/{kind}{m if kind == 'renderD' else m - 127}"
        for m in render_minors
        for kind in ("card", "renderD")
    ]


def cdi_run(spec: str | None, now: list[int]) -> RoleRender:
    old = {"content": base64.b64encode(spec.encode()).decode()} if spec is not None else {"failed": True}
    regs = {
        **registered(dockerd=False),
        "__r9700_containers_amd_ctk": {"rc": 0},
        "__r9700_containers_cdi_old": old,
        "__r9700_containers_drm": {"rc": 0, "stdout_lines": drm_now(now)},
    }
    return run(context(r9700_container_gpu_access="cdi"), regs)


def test_a_cdi_spec_of_four_gpus_on_a_node_with_three_now_is_generated_again_saying_why():
    """Issue 22 item 7: `creates:` generated the spec once and never again; AMD's CDI guide says to
    regenerate it whenever GPUs are added or removed (ROCm/container-toolkit docs cdi-guide.rst)."""
    role = cdi_run(cdi_spec([128, 129, 130, 131]), [128, 129, 130])
    generate = role.task("Configure | Generate the CDI spec of the node's GPUs")
    assert not generate.skipped
    assert generate.args["argv"] == ["amd-ctk", "cdi", "generate", "--output=/etc/cdi/amd.json"]
    assert role.vars["__r9700_containers_cdi"]["reason"] == (
        "/etc/cdi/amd.json lists GPU devices the node no longer has: /dev/dri/card4, /dev/dri/renderD131"
    )


def test_a_cdi_spec_that_matches_the_gpus_is_left_alone_and_a_missing_one_is_made():
    assert cdi_run(cdi_spec([128, 129]), [128, 129]).task("Configure | Generate the CDI spec").skipped
    made = cdi_run(None, [128, 129])
    assert not made.task("Configure | Generate the CDI spec").skipped
    assert made.vars["__r9700_containers_cdi"]["reason"] == "no CDI spec at /etc/cdi/amd.json yet"
    added = cdi_run(cdi_spec([128]), [128, 129])
    assert added.vars["__r9700_containers_cdi"]["reason"] == (
        "the node has GPU devices /etc/cdi/amd.json does not list: /dev/dri/card2, /dev/dri/renderD129"
    )


def test_with_no_gpu_bound_to_amdgpu_the_spec_is_not_regenerated_empty():
    """Before the reboot into AMD's driver amd-ctk finds no GPU: a spec made then would list none."""
    role = cdi_run(cdi_spec([128, 129]), [])
    assert role.task("Configure | Generate the CDI spec").skipped
    assert role.vars["__r9700_containers_cdi"]["reason"].startswith("no GPU is bound to amdgpu now")


def test_the_listing_of_gpu_devices_reads_the_tree_amd_ctk_reads(tmp_path):
    """The task's shell loop, run with a real /bin/sh on a copy of the sysfs layout: the driver's
    directory holds one link per bound PCI device plus bind/unbind files, each device a drm/ with
    its card and render node (ROCm/container-toolkit internal/amdgpu GetAMDGPUs)."""
    import subprocess

    driver = tmp_path / "sys/module/amdgpu/drivers/pci:amdgpu"
    for address, card, render in (("0000:03:00.0", 1, 128), ("0000:07:00.0", 2, 129)):
        for node in (f"card{card}", f"renderD{render}"):
            (driver / address / "drm" / node).mkdir(parents=True)
    (driver / "bind").write_text("")
    (driver / "module").mkdir()
    task = cdi_run(None, [128]).task("Configure | List the card and render nodes")
    script = task.args["argv"][2].replace("/sys/", f"{tmp_path}/sys/")
    out = subprocess.run(["/bin/sh", "-c", script], capture_output=True, text=True, timeout=30, check=True)
    assert out.stdout.split() == [
        "/dev/dri/card1",
        "/dev/dri/renderD128",
        "/dev/dri/card2",
        "/dev/dri/renderD129",
    ]
    empty = subprocess.run(
        ["/bin/sh", "-c", script.replace(str(tmp_path), str(tmp_path / "none"))],
        capture_output=True, text=True, timeout=30, check=True,
    )  # fmt: skip
    assert empty.stdout == "" and empty.returncode == 0
