"""The node side of role r9700_lifecycle (r9700-lifecycle: r9700ctl/agent/node_lifecycle.py) on fake roots.

It runs as Ansible's script module runs it, a child process, against a root in tmp_path with a
dpkg status file, /etc/group and managed files. What breaks if these fail: uninstall would
remove a file or a package the node had before provision, or leave one provision added; a
second provision would rotate state.prev.json and lose the release rollback returns to.
"""

from __future__ import annotations

import gzip
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from agent_stage import installed_as

ROLES = Path(__file__).resolve().parents[2] / "roles"
SCRIPT = installed_as("r9700-lifecycle")  # the node program under that name
MANAGED = yaml.safe_load((ROLES / "r9700_lifecycle" / "vars" / "main.yml").read_text())[
    "__r9700_lifecycle_managed"
]
ADDUSER = "# /etc/adduser.conf: the Debian default\nDSHELL=/bin/bash\n"


def node(root: Path, *args: str, rc: int = 0) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), *args, "--root", str(root)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == rc, done.stdout + done.stderr
    return json.loads(done.stdout)


def managed(**extra: Any) -> str:
    return json.dumps({**MANAGED, "groups": ["render", "video"], **extra})


def write(root: Path, path: str, text: str) -> Path:
    target = root / path.lstrip("/")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)
    return target


def dpkg_status(root: Path, packages: dict[str, str]) -> None:
    """packages: name -> dpkg Status ('install ok installed', 'hold ok installed')."""
    stanzas = [f"Package: {name}\nStatus: {status}\nVersion: 1.0\n" for name, status in packages.items()]
    write(root, "/var/lib/dpkg/status", "\n".join(stanzas))


def fresh_debian(root: Path) -> None:
    dpkg_status(root, {"base-files": "install ok installed", "gnupg": "install ok installed"})
    write(root, "/etc/group", "root:x:0:\nvideo:x:44:\nr9700:x:1000:\n")
    write(root, "/etc/adduser.conf", ADDUSER)
    (root / "etc/apt/keyrings").mkdir(parents=True)


def provision(root: Path) -> None:
    """What provision leaves on that node (the files of the roles, as far as uninstall cares)."""
    dpkg_status(
        root,
        {
            "base-files": "install ok installed",
            "gnupg": "install ok installed",
            "rocm-core": "install ok installed",
            "amdgpu-dkms": "install ok installed",
            "python3-debian": "install ok installed",
            "linux-image-6.1.0-28-amd64": "hold ok installed",
        },
    )
    write(root, "/etc/group", "root:x:0:\nvideo:x:44:r9700\nr9700:x:1000:\nrender:x:992:r9700\n")
    write(root, "/etc/adduser.conf", ADDUSER + 'ADD_EXTRA_GROUPS=1\nEXTRA_GROUPS="render video"\n')
    for path in (
        "/etc/apt/sources.list.d/rocm.sources",
        "/etc/apt/keyrings/rocm.gpg",
        "/etc/apt/preferences.d/rocm-pin-600",
        "/etc/profile.d/r9700.sh",
        "/etc/default/grub.d/99-r9700.cfg",
        "/etc/environment.d/90-r9700.conf",
        "/etc/r9700ctl/node.json",
        "/var/lib/r9700ctl/keys/rocm.gpg",
    ):
        write(root, path, f"written by provision: {path}\n")


def test_record_before_is_written_once_with_copies_of_the_files_that_existed(tmp_path: Path) -> None:
    fresh_debian(tmp_path)
    first = node(tmp_path, "record-before", "--managed", managed(), "--time", "2026-12-01T00:00:00Z")
    assert first["changed"] and first["complete"]
    record = json.loads((tmp_path / "etc/r9700ctl/before.json").read_text())
    assert record["packages"] == ["base-files", "gnupg"] and record["held"] == []
    assert record["paths"]["/etc/adduser.conf"]["type"] == "file"
    assert record["paths"]["/etc/apt/keyrings"] == {"type": "dir"}
    # r9700ctl's own directories did not exist: the record itself must not count as "there before".
    assert "/etc/r9700ctl" not in record["paths"] and "/var/lib/r9700ctl" not in record["paths"]
    assert record["groups"] == {"video": []}
    assert (tmp_path / "var/lib/r9700ctl/before/files/etc/adduser.conf").read_text() == ADDUSER

    provision(tmp_path)
    again = node(tmp_path, "record-before", "--managed", managed())
    assert again["changed"] is False
    assert json.loads((tmp_path / "etc/r9700ctl/before.json").read_text()) == record


def test_a_node_provisioned_before_the_record_existed_is_marked_incomplete(tmp_path: Path) -> None:
    fresh_debian(tmp_path)
    write(tmp_path, "/etc/r9700ctl/state.json", "{}\n")
    assert node(tmp_path, "record-before", "--managed", managed())["complete"] is False


def test_uninstall_removes_what_provision_added_and_restores_what_was_there(tmp_path: Path) -> None:
    fresh_debian(tmp_path)
    node(tmp_path, "record-before", "--managed", managed())
    provision(tmp_path)

    plan = node(tmp_path, "uninstall", "--managed", managed(), "--dry-run")
    assert plan["dry_run"] and plan["changed"]
    assert (tmp_path / "etc/apt/sources.list.d/rocm.sources").exists(), "a dry run changes nothing"
    assert plan["restore"] == ["/etc/adduser.conf"]
    assert "/etc/apt/sources.list.d/rocm.sources" in plan["remove"]
    assert "/etc/default/grub.d/99-r9700.cfg" in plan["remove"]
    assert plan["purge"] == ["amdgpu-dkms", "rocm-core", "python3-debian"]  # not gnupg: it was there
    assert plan["unhold"] == ["linux-image-6.1.0-28-amd64"]
    assert plan["groups"] == {"leave": {"video": ["r9700"]}, "delete": ["render"]}
    assert plan["rmtree"] == ["/etc/r9700ctl", "/var/lib/r9700ctl"]
    assert "/etc/apt/keyrings" not in plan["rmdir"], "the directory existed before provision"
    assert "/etc/environment.d" in plan["rmdir"]
    assert plan["reboot_reasons"] == [
        "amdgpu-dkms removed (the inbox amdgpu loads after a reboot)",
        "kernel command line changed (GRUB drop-in removed)",
    ]

    # --root: files only (packages, groups and holds need the real node's tools).
    done = node(tmp_path, "uninstall", "--managed", managed())
    assert done["changed"]
    assert (tmp_path / "etc/adduser.conf").read_text() == ADDUSER
    assert (tmp_path / "etc/apt/keyrings").is_dir()
    gone_paths = ("etc/apt/sources.list.d/rocm.sources", "etc/apt/keyrings/rocm.gpg", "etc/r9700ctl")
    for gone in (*gone_paths, "etc/default/grub.d"):
        assert not (tmp_path / gone).exists(), gone


def test_uninstall_keeps_every_managed_file_of_a_node_whose_record_is_incomplete(tmp_path: Path) -> None:
    fresh_debian(tmp_path)
    write(tmp_path, "/etc/r9700ctl/node.json", "{}\n")
    node(tmp_path, "record-before", "--managed", managed())
    provision(tmp_path)
    plan = node(tmp_path, "uninstall", "--managed", managed(), "--dry-run")
    assert plan["complete"] is False
    assert plan["remove"] == [] and plan["rmtree"] == [] and plan["rmdir"] == []
    assert plan["purge"] == ["amdgpu-dkms", "rocm-core", "python3-debian"]
    assert plan["groups"] == {"leave": {"video": ["r9700"]}, "delete": []}


def test_uninstall_purges_dockers_own_engine_when_provision_installed_it(tmp_path: Path) -> None:
    """Issue 22 item 5: with r9700_docker_source=docker, provision installs docker-ce,
    docker-ce-cli and containerd.io from Docker's repository; uninstall removed the repository
    but purged only docker.io, so the engine stayed installed without updates. A containerd.io
    that was there before provision stays."""
    fresh_debian(tmp_path)
    dpkg_status(
        tmp_path,
        {"base-files": "install ok installed", "containerd.io": "install ok installed"},
    )
    node(tmp_path, "record-before", "--managed", managed())
    dpkg_status(
        tmp_path,
        {
            "base-files": "install ok installed",
            "containerd.io": "install ok installed",
            "docker-ce": "install ok installed",
            "docker-ce-cli": "install ok installed",
            "docker-buildx-plugin": "install ok installed",
        },
    )
    write(tmp_path, "/etc/apt/sources.list.d/docker.sources", "Types: deb\n")
    plan = node(tmp_path, "uninstall", "--managed", managed(), "--dry-run")
    assert plan["purge"] == ["docker-ce", "docker-ce-cli", "docker-buildx-plugin"]
    assert "/etc/apt/sources.list.d/docker.sources" in plan["remove"]


def test_the_managed_list_holds_every_package_the_container_role_installs() -> None:
    """An engine package the list forgets survives uninstall without its repository."""
    containers = yaml.safe_load((ROLES / "r9700_containers" / "vars" / "main.yml").read_text())
    engines = [name for names in containers["__r9700_containers_packages"].values() for name in names]
    assert [name for name in engines if name not in MANAGED["packages"]] == []


def test_uninstall_without_a_record_refuses_and_changes_nothing(tmp_path: Path) -> None:
    provision(tmp_path)
    refused = node(tmp_path, "uninstall", "--managed", managed(), rc=1)
    assert "no /etc/r9700ctl/before.json" in refused["error"]
    assert (tmp_path / "etc/apt/sources.list.d/rocm.sources").exists()


def test_info_names_the_processes_that_hold_dev_kfd(tmp_path: Path) -> None:
    fd = tmp_path / "proc/4242/fd"
    fd.mkdir(parents=True)
    (fd / "3").symlink_to("/dev/kfd")
    (fd / "4").symlink_to("/dev/null")
    (tmp_path / "proc/4242/cmdline").write_bytes(b"python3\0train.py\0")
    other = tmp_path / "proc/77/fd"
    other.mkdir(parents=True)
    (other / "1").symlink_to("/dev/null")
    shown = node(tmp_path, "info")
    assert shown["kfd_holders"] == [{"pid": 4242, "command": "python3 train.py"}]
    assert shown["state"] is None and shown["systemd"] is False


def test_the_managed_list_holds_every_path_the_provisioning_roles_write() -> None:
    """A file a role writes and the list forgets would survive uninstall."""
    listed = set(MANAGED["files"]) | set(MANAGED["dirs"]) | set(MANAGED["owned_dirs"])
    owned = tuple(MANAGED["owned_dirs"])
    not_written = {
        "/etc/apt/sources.list.d/rocm.list",  # legacy files r9700_repos removes
        "/etc/apt/sources.list.d/amdgpu.list",
        "/etc/apt/sources.list.d/amdgpu-proprietary.list",
        "/etc/apt/trusted.gpg",
        "/usr/sbin/update-initramfs",  # tools the roles look for
        "/usr/sbin/update-grub",
        "/usr/bin/python3",
        "/opt/rocm/bin",  # ROCm's own paths (its packages own them)
        "/opt/rocm/bin/amd-smi",
        "/etc/systemd/system",
    }
    missing = []
    for vars_file in sorted(ROLES.glob("r9700_*/vars/*.yml")):
        for key, value in (yaml.safe_load(vars_file.read_text()) or {}).items():
            values = value if isinstance(value, list) else [value]
            for item in values:
                if not (isinstance(item, str) and item.startswith("/")) or ":" in item or " " in item:
                    continue
                if item in listed or item in not_written or item.startswith(owned):
                    continue
                missing.append(f"{vars_file.parent.parent.name}: {key} = {item}")
    assert missing == []


def test_kernels_names_the_line_its_headers_and_which_kernel_has_amdgpu(tmp_path: Path) -> None:
    """kernel-upgrade follows the installed meta packages; a new kernel without amdgpu.ko is visible."""
    dpkg_status(
        tmp_path,
        {
            "linux-image-generic-hwe-24.04": "hold ok installed",
            "linux-image-6.8.0-49-generic": "hold ok installed",
            "linux-headers-6.8.0-49-generic": "hold ok installed",
            "linux-image-6.11.0-19-generic": "install ok installed",
            "linux-image-unsigned-6.11.0-19-generic": "install ok installed",
            "linux-image-extra-virtual": "install ok installed",
            "linux-image-aws": "deinstall ok config-files",
        },
    )
    module = tmp_path / "lib/modules/6.8.0-49-generic/updates/dkms/amdgpu.ko.zst"
    module.parent.mkdir(parents=True)
    module.write_bytes(b"")
    (tmp_path / "usr/src/amdgpu-6.16.6-2255209.24.04").mkdir(parents=True)
    found = node(tmp_path, "kernels")
    assert found["metas"] == ["linux-image-generic-hwe-24.04"]
    assert found["header_metas"] == ["linux-headers-generic-hwe-24.04"]
    assert found["kernels"]["6.8.0-49-generic"] == {
        "amdgpu_module": "/lib/modules/6.8.0-49-generic/updates/dkms/amdgpu.ko.zst",
        "headers": True,
    }
    assert found["kernels"]["6.11.0-19-generic"] == {"amdgpu_module": "", "headers": False}
    assert found["newest"] == "6.11.0-19-generic" == found["next"]
    assert found["held"] == [
        "linux-headers-6.8.0-49-generic",
        "linux-image-6.8.0-49-generic",
        "linux-image-generic-hwe-24.04",
    ]
    assert found["dkms_amdgpu"] == "6.16.6-2255209.24.04"


def kernel_node(root: Path, packages: dict[str, tuple[str, str]]) -> None:
    """packages: name -> (dpkg Status, Version)."""
    stanzas = [f"Package: {n}\nStatus: {s}\nVersion: {v}\n" for n, (s, v) in packages.items()]
    write(root, "/var/lib/dpkg/status", "\n".join(stanzas))


def test_a_refused_kernel_is_reverted_to_what_the_node_booted_before(tmp_path: Path) -> None:
    """After a refused kernel-upgrade the next boot must be the running kernel: the packages the run
    installed go, the line's metas return to their versions, the holds come back."""
    kernel_node(
        tmp_path,
        {
            "linux-image-lab": ("hold ok installed", "1.0"),
            "linux-headers-lab": ("hold ok installed", "1.0"),
            "linux-image-6.8.0-49-generic": ("hold ok installed", "6.8.0-49.49"),
            "linux-headers-6.8.0-49-generic": ("hold ok installed", "6.8.0-49.49"),
            "rocm-core": ("install ok installed", "6.4.1.60401-83~24.04"),
        },
    )
    before = node(tmp_path, "kernels")
    assert before["versions"]["linux-image-lab"] == "1.0"
    assert "rocm-core" not in before["versions"]
    before["running"] = "6.8.0-49-generic"
    # What kernel-upgrade left: the metas at 2.0 (unheld), the new kernel and its headers.
    kernel_node(
        tmp_path,
        {
            "linux-image-lab": ("install ok installed", "2.0"),
            "linux-headers-lab": ("install ok installed", "2.0"),
            "linux-image-6.8.0-49-generic": ("install ok installed", "6.8.0-49.49"),
            "linux-headers-6.8.0-49-generic": ("install ok installed", "6.8.0-49.49"),
            "linux-image-6.99.1-1-lab": ("install ok installed", "6.99.1-1"),
            "linux-headers-6.99.1-1-lab": ("install ok installed", "6.99.1-1"),
        },
    )
    done = node(tmp_path, "kernel-revert", "--before", json.dumps(before), "--dry-run")
    assert done["remove"] == ["linux-headers-6.99.1-1-lab", "linux-image-6.99.1-1-lab"]
    assert done["restore"] == {"linux-headers-lab": "1.0", "linux-image-lab": "1.0"}
    assert done["hold"] == [
        "linux-headers-6.8.0-49-generic",
        "linux-headers-lab",
        "linux-image-6.8.0-49-generic",
        "linux-image-lab",
    ]
    assert done["said"].startswith(
        "removed linux-headers-6.99.1-1-lab, linux-image-6.99.1-1-lab; "
        "returned linux-headers-lab to 1.0, linux-image-lab to 1.0; "
    )
    # Dry run: the new kernel is still the newest installed, so the sentence says it would boot it.
    assert "the next boot is still 6.99.1-1-lab" in done["said"]


def test_kernel_revert_says_the_running_kernel_boots_next_when_nothing_newer_is_left(tmp_path: Path) -> None:
    kernel_node(
        tmp_path,
        {
            "linux-image-lab": ("hold ok installed", "1.0"),
            "linux-image-6.8.0-49-generic": ("hold ok installed", "6.8.0-49.49"),
        },
    )
    before = dict(node(tmp_path, "kernels"), running="6.8.0-49-generic")
    done = node(tmp_path, "kernel-revert", "--before", json.dumps(before))
    assert done["remove"] == [] and done["restore"] == {} and done["changed"] is False
    assert done["said"] == "removed nothing; the next boot is the running kernel 6.8.0-49-generic"


def test_rollback_purges_the_managed_packages_the_state_it_returns_to_did_not_have(tmp_path: Path) -> None:
    """7.x brought mesa-amdgpu-va-drivers from its graphics repository; back on 6.x, whose state says
    it was absent, that repository is gone and the package must go too. A package the older state
    never asked about (written before release_packages existed) is left alone."""
    dpkg_status(
        tmp_path,
        {
            "rocm-core": "install ok installed",
            "amdgpu-dkms": "install ok installed",
            "mesa-amdgpu-va-drivers": "install ok installed",
            "docker.io": "install ok installed",
        },
    )
    previous = {
        "rocm_version": "6.4.1",
        "packages": ["rocm"],
        "release_packages": ["mesa-amdgpu-va-drivers"],
        "installed": {"rocm-core": "6.4.1.60401-83~24.04", "amdgpu-dkms": "1:6.12.12.60401-2164967.24.04"},
    }
    write(tmp_path, "/etc/r9700ctl/state.prev.json", json.dumps(previous))
    done = node(tmp_path, "rollback-packages", "--dry-run")
    assert done["purge"] == ["mesa-amdgpu-va-drivers"]
    # The same 6.x state with mesa installed then (6.4.x shipped it in amdgpu/<ver>/ubuntu): kept.
    previous["installed"]["mesa-amdgpu-va-drivers"] = "25.0.0.60401-2164967.24.04"
    write(tmp_path, "/etc/r9700ctl/state.prev.json", json.dumps(previous))
    assert node(tmp_path, "rollback-packages", "--dry-run")["purge"] == []
    del previous["release_packages"], previous["installed"]["mesa-amdgpu-va-drivers"]
    write(tmp_path, "/etc/r9700ctl/state.prev.json", json.dumps(previous))
    assert node(tmp_path, "rollback-packages", "--dry-run")["purge"] == []


def test_kernel_plan_reads_what_apt_would_install_from_its_simulation() -> None:
    """`apt-get install -s` prints Inst NAME [OLD] (NEW ...): the new kernel is the image package."""
    from r9700ctl.agent import node_lifecycle as module

    simulated = (
        "NOTE: This is only a simulation!\n"
        "Inst linux-image-6.99.1-1-lab (6.99.1-1 lab:lab/bookworm [amd64])\n"
        "Inst linux-image-lab [1.0] (2.0 lab:lab/bookworm [amd64])\n"
        "Conf linux-image-6.99.1-1-lab (6.99.1-1 lab:lab/bookworm [amd64])\n"
    )
    assert module.parse_simulation(simulated) == {
        "linux-image-6.99.1-1-lab": "6.99.1-1",
        "linux-image-lab": "2.0",
    }


# The states dpkg left on an Ubuntu node whose new kernel amdgpu-dkms could not build for
# (apt log in ROCm/legacy-rocm-build#3701; the lab's stand-ins reproduce it): the headers'
# postinst ran /etc/kernel/header_postinst.d/dkms, which exited 11, so dpkg left the headers
# half-configured and the headers meta that needs them unconfigured; the image was configured.
AFTER_FAILED_HOOK = {
    "linux-image-lab": ("install ok installed", "2.0"),
    "linux-headers-lab": ("install ok unpacked", "2.0"),
    "linux-image-6.8.0-49-generic": ("hold ok installed", "6.8.0-49.49"),
    "linux-headers-6.8.0-49-generic": ("hold ok installed", "6.8.0-49.49"),
    "linux-image-6.99.1-1-lab": ("install ok installed", "6.99.1-1"),
    "linux-headers-6.99.1-1-lab": ("install ok half-configured", "6.99.1-1"),
}
BEFORE_THE_UPGRADE = {
    "linux-image-lab": ("hold ok installed", "1.0"),
    "linux-headers-lab": ("hold ok installed", "1.0"),
    "linux-image-6.8.0-49-generic": ("hold ok installed", "6.8.0-49.49"),
    "linux-headers-6.8.0-49-generic": ("hold ok installed", "6.8.0-49.49"),
}


def test_a_new_kernel_dpkg_left_unconfigured_is_still_the_next_kernel(tmp_path: Path) -> None:
    """Issue 22 item 1: on Debian the image's own postinst hook fails too, leaving the new image
    half-configured. `kernels` read only fully installed packages, so the new kernel vanished:
    no `next`, nothing refused, nothing reverted, and GRUB (which update-grub already told)
    boots it. Packages dpkg left unconfigured are named so the role can refuse on them."""
    kernel_node(
        tmp_path,
        {**AFTER_FAILED_HOOK, "linux-image-6.99.1-1-lab": ("install ok half-configured", "6.99.1-1")},
    )
    found = node(tmp_path, "kernels")
    assert found["next"] == "6.99.1-1-lab" == found["newest"]
    assert found["kernels"]["6.99.1-1-lab"] == {"amdgpu_module": "", "headers": True}
    assert found["metas"] == ["linux-image-lab"]
    assert found["unconfigured"] == [
        "linux-headers-6.99.1-1-lab",
        "linux-headers-lab",
        "linux-image-6.99.1-1-lab",
    ]
    assert found["versions"]["linux-headers-lab"] == "2.0"


def test_a_kernel_whose_install_failed_in_dpkg_is_reverted_whatever_state_dpkg_left(tmp_path: Path) -> None:
    """Issue 22 item 1: kernel-revert planned from fully installed packages only, so after the
    failed hook it kept the half-configured headers (dpkg broken) and left the unconfigured
    headers meta at 2.0. Every package the run brought goes, whatever its dpkg state, and every
    meta it moved returns."""
    kernel_node(tmp_path, BEFORE_THE_UPGRADE)
    before = dict(node(tmp_path, "kernels"), running="6.8.0-49-generic")
    kernel_node(tmp_path, AFTER_FAILED_HOOK)
    done = node(tmp_path, "kernel-revert", "--before", json.dumps(before), "--dry-run")
    assert done["remove"] == ["linux-headers-6.99.1-1-lab", "linux-image-6.99.1-1-lab"]
    assert done["restore"] == {"linux-headers-lab": "1.0", "linux-image-lab": "1.0"}
    assert done["unconfigured"] == ["linux-headers-6.99.1-1-lab", "linux-headers-lab"]


def test_kernel_upgrade_and_provision_name_the_same_kernel_lines() -> None:
    """Provision's hold (r9700_driver) and kernel-upgrade (this script) must agree on which
    installed packages are a line's meta packages, or one would hold what the other never moves."""
    from r9700ctl.agent import node_lifecycle as module

    driver = yaml.safe_load((ROLES / "r9700_driver" / "vars" / "Debian.yml").read_text())
    assert module._KERNEL_META.pattern == driver["__r9700_driver_kernel_meta_pattern"]


def test_a_lines_top_meta_package_is_part_of_the_line(tmp_path: Path) -> None:
    """Issue 22 item 3: linux-generic-hwe-24.04 depends on the image and headers metas at their
    exact version; kernel-upgrade moves and holds it with them."""
    dpkg_status(
        tmp_path,
        {
            "linux-generic-hwe-24.04": "hold ok installed",
            "linux-image-generic-hwe-24.04": "hold ok installed",
            "linux-headers-generic-hwe-24.04": "hold ok installed",
            "linux-image-extra-virtual": "install ok installed",
            "linux-generic": "deinstall ok config-files",
            "linux-image-6.8.0-49-generic": "hold ok installed",
        },
    )
    found = node(tmp_path, "kernels")
    assert found["metas"] == ["linux-image-generic-hwe-24.04"]
    assert found["line_metas"] == ["linux-generic-hwe-24.04"]


def apt_list(root: Path, uri: str, suite: str, names: list[str]) -> None:
    """An apt list file as `apt-get update` leaves it for `uri` (apt names it after the URI)."""
    prefix = uri.split("://", 1)[1].strip("/").replace("/", "_")
    stanzas = "".join(f"Package: {n}\nVersion: 1\nArchitecture: amd64\n\n" for n in names)
    write(root, f"/var/lib/apt/lists/{prefix}_dists_{suite}_main_binary-amd64_Packages", stanzas)


MIRROR = "http://10.213.9.1:8080"


def test_what_a_release_brought_is_read_from_its_repositories_in_apts_lists(tmp_path: Path) -> None:
    """Issue 22 item 4: what a release brings was a hard-coded list (mesa-amdgpu-va-drivers, as if
    only 7.x's graphics repository had it), but 6.x's amdgpu repository carries it too and
    rocdecode needs it since rocDecode PR #416 (legacy-rocm-build#5963: 6.2.4). The installed
    packages that the release's own repositories offer are what it brought."""
    apt_list(tmp_path, f"{MIRROR}/rocm/apt/6.4.1", "noble", ["rocm-core", "rocdecode", "rocminfo"])
    apt_list(tmp_path, f"{MIRROR}/amdgpu/6.4.1/ubuntu", "noble", ["amdgpu-dkms", "mesa-amdgpu-va-drivers"])
    apt_list(tmp_path, "http://archive.ubuntu.com/ubuntu", "noble", ["base-files", "rocminfo"])
    apt_list(tmp_path, f"{MIRROR}/rocm/apt/7.2.3", "noble", ["hipblaslt"])  # another release's
    dpkg_status(
        tmp_path,
        {
            "base-files": "install ok installed",
            "rocm-core": "install ok installed",
            "rocminfo": "install ok installed",
            "mesa-amdgpu-va-drivers": "install ok installed",
            "hipblaslt": "install ok installed",
            "amdgpu-dkms": "deinstall ok config-files",
        },
    )
    repositories = {"base_url": MIRROR, "suite": "noble", "paths": ["rocm/apt/6.4.1", "amdgpu/6.4.1/ubuntu"]}
    found = node(tmp_path, "release-packages", "--repositories", json.dumps(repositories))
    assert found["packages"] == ["mesa-amdgpu-va-drivers", "rocm-core", "rocminfo"]
    assert found["unread"] == []
    # A repository apt has no list of is named, not taken as bringing nothing silently.
    repositories["paths"].append("graphics/6.4.1/ubuntu")
    found = node(tmp_path, "release-packages", "--repositories", json.dumps(repositories))
    assert found["unread"] == [f"{MIRROR}/graphics/6.4.1/ubuntu"]


def test_rollback_keeps_what_the_older_release_brought_itself_at_its_version_and_purges_the_rest(
    tmp_path: Path,
) -> None:
    """Issue 22 item 4: back from 7.2.3 to 6.4.1, whose own amdgpu repository brought
    mesa-amdgpu-va-drivers, the package stays and returns to 6.4.1's version; what only the
    graphics repository of 7.2.3 brought (libdrm-amdgpu-common) goes."""
    newer = {
        "rocm_version": "7.2.3",
        "release_packages": ["libdrm-amdgpu-common", "mesa-amdgpu-va-drivers", "rocm-core"],
        "installed": {
            "rocm-core": "7.2.3.70203-90~24.04",
            "mesa-amdgpu-va-drivers": "25.2.0.70203-2327507.24.04",
            "libdrm-amdgpu-common": "1.0.0.70203-2327507.24.04",
        },
    }
    older = {
        "rocm_version": "6.4.1",
        "release_packages": ["mesa-amdgpu-va-drivers", "rocm-core"],
        "installed": {
            "rocm-core": "6.4.1.60401-83~24.04",
            "mesa-amdgpu-va-drivers": "25.0.0.60401-2164967.24.04",
        },
    }
    write(tmp_path, "/etc/r9700ctl/state.json", json.dumps(newer))
    write(tmp_path, "/etc/r9700ctl/state.prev.json", json.dumps(older))
    kernel_node(  # (any package: name -> dpkg Status, Version)
        tmp_path,
        {
            "rocm-core": ("install ok installed", "6.4.1.60401-83~24.04"),
            "mesa-amdgpu-va-drivers": ("install ok installed", "25.2.0.70203-2327507.24.04"),
            "libdrm-amdgpu-common": ("install ok installed", "1.0.0.70203-2327507.24.04"),
            "docker.io": ("install ok installed", "20.10"),
        },
    )
    done = node(tmp_path, "rollback-packages", "--dry-run")
    assert done["purge"] == ["libdrm-amdgpu-common"]
    assert done["restore"] == {"mesa-amdgpu-va-drivers": "25.0.0.60401-2164967.24.04"}


@pytest.mark.skipif(
    not (shutil.which("lz4") and Path("/usr/lib/apt/apt-helper").exists()),
    reason="needs lz4 and apt's apt-helper",
)
def test_apt_lists_kept_compressed_are_read_too(tmp_path: Path) -> None:
    """apt may keep its lists compressed (Debian's container images: .lz4); they say what the
    release brought as much as plain ones."""
    apt_list(tmp_path, f"{MIRROR}/amdgpu/6.4.1/ubuntu", "noble", ["amdgpu-dkms", "mesa-amdgpu-va-drivers"])
    plain = next((tmp_path / "var/lib/apt/lists").iterdir())
    subprocess.run(["lz4", "-q", "--rm", str(plain), f"{plain}.lz4"], check=True)
    apt_list(tmp_path, f"{MIRROR}/rocm/apt/6.4.1", "noble", ["rocm-core"])
    gz = next(p for p in (tmp_path / "var/lib/apt/lists").iterdir() if "rocm_apt" in p.name)
    gz.with_name(gz.name + ".gz").write_bytes(gzip.compress(gz.read_bytes()))
    gz.unlink()
    dpkg_status(
        tmp_path, {"rocm-core": "install ok installed", "mesa-amdgpu-va-drivers": "install ok installed"}
    )
    repositories = {"base_url": MIRROR, "suite": "noble", "paths": ["rocm/apt/6.4.1", "amdgpu/6.4.1/ubuntu"]}
    found = node(tmp_path, "release-packages", "--repositories", json.dumps(repositories))
    assert found == {"changed": False, "packages": ["mesa-amdgpu-va-drivers", "rocm-core"], "unread": []}
