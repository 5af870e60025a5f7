"""A node's files and init script, on a real file tree in tmp_path."""

import os

import pytest

from r9700ctl.errors import CannotRun
from r9700ctl.lab import machine, node
from r9700ctl.lab.node import NodePaths


def test_writing_into_a_node_replaces_a_symlink_instead_of_following_it(tmp_path):
    """Bug pinned: node files are written from the host, where an absolute link leads into the host."""
    root, host_file = tmp_path / "root", tmp_path / "host-resolv.conf"
    (root / "etc").mkdir(parents=True)
    host_file.write_text("host's own\n")
    (root / "etc/resolv.conf").symlink_to(host_file)
    node.write(root, "etc/resolv.conf", "# lab\n")
    assert host_file.read_text() == "host's own\n"
    assert not (root / "etc/resolv.conf").is_symlink()
    assert (root / "etc/resolv.conf").read_text() == "# lab\n"


def test_writing_below_a_symlinked_directory_is_refused(tmp_path):
    root, outside = tmp_path / "root", tmp_path / "outside"
    (root / "etc").mkdir(parents=True)
    outside.mkdir()
    (root / "etc/apt").symlink_to(outside)
    with pytest.raises(CannotRun, match="refusing to write through the symlink"):
        node.write(root, "etc/apt/apt.conf.d/00lab-proxy", "x")
    assert list(outside.iterdir()) == []


@pytest.mark.skipif(os.geteuid() != 0, reason="chown needs root")
def test_new_directories_get_the_owner_and_mode_asked_for(tmp_path):
    root = tmp_path / "root"
    (root / "home/r9700").mkdir(parents=True)
    uid, gid = 1234, 1235
    node.write(root, "home/r9700/.ssh/authorized_keys", "key\n", mode=0o600, owner=(uid, gid), dir_mode=0o700)
    ssh_dir = (root / "home/r9700/.ssh").stat()
    keys = (root / "home/r9700/.ssh/authorized_keys").stat()
    assert (ssh_dir.st_uid, ssh_dir.st_mode & 0o777) == (uid, 0o700)
    assert (keys.st_uid, keys.st_gid, keys.st_mode & 0o777) == (uid, gid, 0o600)


def test_the_init_script_mounts_kernel_interfaces_read_only_and_execs_sshd(tmp_path):
    script = node.init_script("node1", tmp_path / "base", NodePaths(tmp_path / "nodes/node1"), sshd=True)
    lines = script.splitlines()
    assert 'mount -o remount,bind,ro "$R/proc/sys"' in lines
    assert 'mount -t sysfs -o ro,nosuid,nodev,noexec sysfs "$R/sys"' in lines
    assert 'mount -t tmpfs -o mode=755,nosuid tmpfs "$R/dev"' in lines
    assert not any(line.startswith("mount --rbind /dev") for line in lines), "never the host's disks"
    assert lines[-1] == 'exec chroot "$R" /usr/sbin/sshd -D -e'
    assert f"lowerdir={tmp_path / 'base'}" in script


def test_a_node_without_sshd_keeps_a_pid_1_that_only_sleeps(tmp_path):
    script = node.init_script("node1", tmp_path / "base", NodePaths(tmp_path / "nodes/node1"), sshd=False)
    assert script.splitlines()[-1] == 'exec chroot "$R" /bin/sleep infinity'


def test_the_init_script_grafts_the_machine_into_sys_read_only_and_makes_its_dev_nodes(tmp_path):
    """/sys/{devices,bus,class,module,kernel} get the machine's entries; the tmpfs is read-only;
    /dev nodes use a local/experimental major, so nothing on the host answers them."""
    presented = machine.build(2)
    paths = NodePaths(tmp_path / "nodes/node1")
    lines = node.init_script("node1", tmp_path / "base", paths, sshd=True, presented=presented).splitlines()
    assert f"M={paths.machine_sys}" in lines and f"S={paths.sys_stash}" in lines
    assert [line for line in lines if line.startswith("graft ")] == [f"graft {d}" for d in node.GRAFTED]
    assert '    mount -o remount,ro "$R/sys/$1"' in lines
    assert 'mknod -m 660 "$R/dev/kfd" c 120 255' in lines
    assert 'mknod -m 660 "$R/dev/dri/renderD129" c 120 129' in lines
    assert lines.index("graft devices") < lines.index('exec chroot "$R" /usr/sbin/sshd -D -e')


def test_a_node_from_a_snapshot_gives_its_device_nodes_the_group_a_cold_node_gets(tmp_path):
    """Bug pinned: a snapshot's /etc/group has the render group the roles made, and nodes started from
    it gave /dev/kfd that group, while the cold-provisioned node (no udev in the lab) kept video: the
    converged check then saw the device nodes changed and every provision of snapshot nodes ran in
    full (the lifecycle module's first provision: 65 s instead of a converged 5 s)."""
    pristine, snapshot = tmp_path / "rootfs", tmp_path / "snapshot"
    for layer, groups in (
        (pristine, "root:x:0:\nvideo:x:44:\n"),
        (snapshot, "video:x:44:\nrender:x:999:r9700\n"),
    ):
        (layer / "etc").mkdir(parents=True)
        (layer / "etc/group").write_text(groups)
    assert node.device_group_id(pristine) == 44
    assert node.device_group_id((snapshot, pristine)) == 44
    paths = NodePaths(tmp_path / "nodes/node1")
    script = node.init_script("node1", (snapshot, pristine), paths, sshd=True, presented=machine.build(1))
    assert 'chgrp 44 "$R/dev/kfd"' in script.splitlines()
