"""r9700-run: run a command in this node's ROCm container image, with its GPUs.

Installed by r9700ctl's r9700_containers role as /usr/local/bin/r9700-run; what it runs comes
from /etc/r9700ctl/container.json (the pinned image, GPU access, shared memory, groups) and
/etc/r9700ctl/container.env (the node's environment list, the same values as
/etc/profile.d/r9700.sh).

  r9700-run python3 -c "import torch; print(torch.cuda.device_count())"
  r9700-run -n python3 train.py         print the docker command instead of running it
  r9700-run -e HIP_VISIBLE_DEVICES=0 -v /data:/data python3 train.py
  r9700-run --check                     exit 0 when the image is on this node and dockerd answers
  r9700-run --image-id                  the image's ID (sha256 of its configuration: the same build
                                        has the same ID on every node, whatever its tag says)
  r9700-run --host-network python3 job.py   on the host's network with memlock unlimited: what a
                                        job across nodes needs (RCCL's sockets on the cluster NIC;
                                        RDMA registers locked memory), as r9700ctl validate --cluster runs

The current directory is mounted at the same path and is the working directory. The container
runs with --rm and the label io.r9700ctl.started-by=r9700-run (so an upgrade can find and stop
what r9700-run started). Devices (ROCm's "Running ROCm Docker containers",
https://rocm.docs.amd.com/projects/install-on-linux/en/latest/how-to/docker.html): /dev/kfd and
/dev/dri, or only the render nodes of the GPUs the node uses; --group-add with this host's
numeric gids of video and render, because the names may map to other ids inside the image.
A device this host lacks is left out and named on stderr (a node without the amdgpu driver
loaded still runs the container; the agent inside then reports the missing GPUs).
"""

from __future__ import annotations

import grp
import json
import os
import shlex
import subprocess
import sys
from typing import Any

CONFIG = os.environ.get("R9700_RUN_CONFIG", "/etc/r9700ctl/container.json")
LABEL = "io.r9700ctl.started-by=r9700-run"
EXIT_CANNOT_RUN = 3
EXIT_USAGE = 64


def fail(message: str, code: int = EXIT_CANNOT_RUN) -> None:
    print(f"r9700-run: {message}", file=sys.stderr)
    sys.exit(code)


def note(message: str) -> None:
    print(f"r9700-run: {message}", file=sys.stderr)


def load_config(path: str) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as handle:
            config = json.load(handle)
    except OSError as exc:
        fail(f"cannot read {path} ({exc.strerror}); provision the node with r9700ctl (role r9700_containers)")
    except ValueError as exc:
        fail(f"{path} is not JSON ({exc}); provision the node again")
    if not isinstance(config, dict) or not config.get("image"):
        fail(f"{path} names no image; provision the node again")
    return config


def parse(argv: list[str]) -> tuple[dict[str, Any], list[str]]:
    """Options up to the command (or `--`): -n, --check, --image-id, --host-network, -e NAME=VALUE,
    -v SRC:DST."""
    options: dict[str, Any] = {
        "dry": False,
        "check": False,
        "image_id": False,
        "host_network": False,
        "env": [],
        "volumes": [],
    }
    args = list(argv)
    while args:
        arg = args[0]
        if arg == "--":
            args.pop(0)
            break
        if arg in ("-h", "--help"):
            print(__doc__.strip())
            sys.exit(0)
        if arg == "-n":
            options["dry"] = True
        elif arg == "--check":
            options["check"] = True
        elif arg == "--image-id":
            options["image_id"] = True
        elif arg == "--host-network":
            options["host_network"] = True
        elif arg in ("-e", "-v"):
            if len(args) < 2:
                fail(f"{arg} needs a value (-e NAME=VALUE, -v SRC:DST)", EXIT_USAGE)
            key = "env" if arg == "-e" else "volumes"
            options[key].append(args[1])
            args.pop(0)
        elif arg.startswith("-"):
            fail(f"unknown option {arg}; see r9700-run --help", EXIT_USAGE)
        else:
            break
        args.pop(0)
    return options, args


def group_ids(names: list[str]) -> list[int]:
    """This host's numeric gids (the image's /etc/group may give the same names other ids)."""
    gids = []
    for name in names:
        try:
            gids.append(grp.getgrnam(name).gr_gid)
        except KeyError:
            note(f"no group {name} on this host; not added")
    return gids


def device_args(config: dict[str, Any]) -> list[str]:
    if config.get("gpu_access") == "cdi":
        # AMD Container Toolkit's CDI spec (amd-ctk cdi generate): every GPU of the node.
        return ["--device", str(config.get("cdi_device") or "amd.com/gpu=all")]
    kfd, dri = str(config.get("kfd") or "/dev/kfd"), str(config.get("dri") or "/dev/dri")
    wanted = [kfd]
    if config.get("render_nodes") == "gpus" and config.get("pci"):
        for address in config["pci"]:
            link = os.path.join(dri, "by-path", f"pci-{address}-render")
            if os.path.exists(link):
                wanted.append(os.path.realpath(link))
            else:
                note(f"no render node for GPU {address} ({link} is missing); not added")
    else:
        wanted.append(dri)
    args = []
    for path in wanted:
        if os.path.exists(path):
            args += ["--device", path]
        else:
            note(
                f"{path} is missing on this host (is the amdgpu driver loaded?); "
                "the container gets no such device"
            )
    return args


def docker_command(
    config: dict[str, Any], options: dict[str, Any], command: list[str], tty: bool
) -> list[str]:
    argv = [str(config.get("docker") or "docker"), "run", "--rm", "--label", LABEL]
    if tty:
        argv.append("-it")
    argv += device_args(config)
    for gid in group_ids(list(config.get("groups") or [])):
        argv += ["--group-add", str(gid)]
    if config.get("ipc_host", True):
        argv.append("--ipc=host")
    if options.get("host_network"):
        # Docker's bridge network hides the cluster NIC; RDMA registers locked memory (the AMD Strix
        # Halo RDMA cluster guide runs its RCCL containers with host networking and memlock
        # unlimited: kyuz0/amd-strix-halo-vllm-toolboxes rdma_cluster/setup_guide.md).
        argv += ["--network=host", "--ulimit", "memlock=-1"]
    if config.get("shm_size"):
        argv += ["--shm-size", str(config["shm_size"])]
    if config.get("seccomp_unconfined"):
        argv += ["--security-opt", "seccomp=unconfined"]
    env_file = config.get("env_file")
    if env_file and os.path.exists(env_file):
        argv += ["--env-file", str(env_file)]
    for item in options["env"]:
        argv += ["-e", item]
    here = os.getcwd()
    # docker refuses '/' as a mount destination ("destination can't be '/'"): from the root
    # directory (Ansible's chdir, a cron job) the container starts in the image's own directory.
    if here != "/":
        argv += ["-v", f"{here}:{here}", "-w", here]
    for item in options["volumes"]:
        argv += ["-v", item]
    argv += [str(x) for x in config.get("extra_args") or []]
    return [*argv, str(config["image"]), *command]


def check(config: dict[str, Any], show_id: bool = False) -> int:
    """0 and the image (or, show_id, its ID) when it is on this node and dockerd answers; else 3
    and why. The ID is what `docker image inspect` gives as .Id: the digest of the image's
    configuration, so two nodes holding the same tag built twice show two IDs."""
    docker = str(config.get("docker") or "docker")
    try:
        done = subprocess.run(
            [docker, "image", "inspect", "--format", "{{.Id}}", str(config["image"])],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        print(f"r9700-run: docker did not answer ({exc})", file=sys.stderr)
        return EXIT_CANNOT_RUN
    if done.returncode != 0:
        why = (done.stderr.strip().splitlines() or ["no output"])[-1]
        print(f"r9700-run: image {config['image']} is not usable here: {why}", file=sys.stderr)
        return EXIT_CANNOT_RUN
    print(done.stdout.strip() if show_id else config["image"])
    return 0


def main(argv: list[str]) -> int:
    options, command = parse(argv)
    config = load_config(CONFIG)
    if options["check"] or options["image_id"]:
        return check(config, show_id=options["image_id"])
    if not command:
        fail(
            "no command given; e.g. r9700-run python3 -c 'import torch; print(torch.cuda.device_count())'",
            EXIT_USAGE,
        )
    tty = sys.stdin.isatty() and sys.stdout.isatty() and not options["dry"]
    argv_docker = docker_command(config, options, command, tty)
    if options["dry"]:
        print(shlex.join(argv_docker))
        return 0
    try:
        os.execvp(argv_docker[0], argv_docker)
    except OSError as exc:
        fail(f"cannot run {argv_docker[0]} ({exc.strerror}); is docker installed (r9700_containers)?")
    return EXIT_CANNOT_RUN


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
