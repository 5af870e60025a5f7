"""The lab's container pieces that need no root: the stand-in registry's configuration and image
list, and what a node's init mounts so dockerd can run (cgroup hierarchies read from mountinfo)."""

from __future__ import annotations

from pathlib import Path

import yaml

from r9700ctl import manifest as manifest_module
from r9700ctl.lab import dockerd, files, registry

V1_MOUNTINFO = """\
25 30 0:22 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw
26 25 0:23 / /sys/fs/cgroup rw,relatime shared:8 - tmpfs tmpfs rw,mode=755
27 26 0:24 / /sys/fs/cgroup/memory rw,relatime shared:9 - cgroup cgroup rw,memory
28 26 0:25 / /sys/fs/cgroup/cpuset rw,relatime shared:10 - cgroup cgroup rw,cpuset
29 26 0:26 / /sys/fs/cgroup/cpu,cpuacct rw,relatime shared:11 - cgroup cgroup rw,cpu,cpuacct
30 26 0:27 / /sys/fs/cgroup/systemd rw,relatime shared:12 - cgroup cgroup rw,xattr,name=systemd
31 26 0:28 / /sys/fs/cgroup/unified rw,relatime shared:13 - cgroup2 cgroup2 rw
32 30 0:29 / /mnt/other rw,relatime - cgroup cgroup rw,pids
"""
V1_SELF = "5:memory:/jobs/42\n4:cpuset:/\n3:cpu,cpuacct:/\n2:name=systemd:/user.slice\n0::/user.slice\n"
V2_MOUNTINFO = "35 24 0:30 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 rw\n"


def test_every_pinned_rocm_pytorch_tag_is_served():
    manifest = manifest_module.load()
    refs = registry.pinned_images(manifest)
    tags = {f"{r.repository}:{r.tag}" for r in refs}
    assert tags == {r.pytorch_image for r in manifest.releases.values()}
    digest_pinned = registry.ImageRef.parse("rocm/pytorch:rocm6.4.1_x@sha256:" + "0" * 64)
    assert digest_pinned == registry.ImageRef("rocm/pytorch", "rocm6.4.1_x")


def test_the_registry_serves_its_storage_read_only_on_the_bridge_only(tmp_path):
    config = yaml.safe_load(registry.config_yaml(tmp_path / "storage", "10.213.3.1", 5000, readonly=True))
    assert config["http"]["addr"] == "10.213.3.1:5000"
    assert config["storage"]["filesystem"]["rootdirectory"] == str(tmp_path / "storage")
    assert config["storage"]["maintenance"]["readonly"]["enabled"] is True
    assert config["storage"]["maintenance"]["uploadpurging"]["enabled"] is False  # never touches the cache


def test_the_inventory_points_nodes_at_the_registry_as_their_mirror(tmp_path):
    text = files.render_inventory(
        directory=tmp_path, nodes=[files.InventoryNode("node1", "10.213.3.11")], key=tmp_path / "k",
        ssh_config=tmp_path / "s", mirror_url="http://10.213.3.1:8080", key_url="http://10.213.3.1:8080/k",
        key_fingerprint="F" * 40, gpus=4, registry_url="http://10.213.3.1:5000",
    )  # fmt: skip
    assert "r9700_container_registry_mirror=http://10.213.3.1:5000" in text.splitlines()


def test_cgroup_v1_hierarchies_with_the_labs_own_cgroup_in_each():
    found = dockerd.hierarchies(V1_MOUNTINFO, V1_SELF)
    assert [(str(h.mountpoint), h.fstype, h.options, h.current) for h in found] == [
        ("/sys/fs/cgroup/memory", "cgroup", "memory", "/jobs/42"),
        ("/sys/fs/cgroup/cpuset", "cgroup", "cpuset", "/"),
        ("/sys/fs/cgroup/cpu,cpuacct", "cgroup", "cpu,cpuacct", "/"),
        ("/sys/fs/cgroup/systemd", "cgroup", "xattr,name=systemd", "/user.slice"),
        ("/sys/fs/cgroup/unified", "cgroup2", "", "/user.slice"),
    ]  # /mnt/other is not under /sys/fs/cgroup
    assert found[0].node_cgroup("r97l3n1") == Path("/sys/fs/cgroup/memory/jobs/42/r9700ctl-r97l3n1")


def test_cgroup_v2_is_one_hierarchy_mounted_at_the_nodes_cgroup_root():
    (only,) = dockerd.hierarchies(V2_MOUNTINFO, "0::/lab.scope\n")
    assert only.relative == "" and only.node_cgroup("r97l1n2") == Path(
        "/sys/fs/cgroup/lab.scope/r9700ctl-r97l1n2"
    )


def test_a_node_init_mounts_cgroups_a_real_data_root_and_writable_net_sysctls(monkeypatch, tmp_path):
    real = dockerd.hierarchies
    monkeypatch.setattr(dockerd, "hierarchies", lambda: real(V1_MOUNTINFO, V1_SELF))
    lines = dockerd.init_lines(tmp_path / "nodes" / "node1").splitlines()
    assert 'mount -t tmpfs -o mode=755,nosuid,nodev,noexec cgroup_root "$R/sys/fs/cgroup"' in lines
    assert 'mount -t cgroup -o nosuid,nodev,noexec,memory cgroup "$R/sys/fs/cgroup/memory"' in lines
    assert 'mount -t cgroup -o nosuid,nodev,noexec,cpu,cpuacct cgroup "$R/sys/fs/cgroup/cpu,cpuacct"' in lines
    assert f'mount --bind {tmp_path}/nodes/node1/docker "$R/var/lib/docker"' in lines
    assert lines[-1] == 'mount -o remount,bind,rw "$R/proc/sys/net"'


def test_lab_dockerd_without_a_lab_is_one_line_and_exit_3(tmp_path):
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "r9700ctl", "lab", "dockerd", "--dir", str(tmp_path / "none")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 3 and done.stderr.strip() == (
        f"error: no lab in {tmp_path / 'none'} (start one: r9700ctl lab up --dir {tmp_path / 'none'})"
    )
