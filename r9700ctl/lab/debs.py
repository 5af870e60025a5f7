"""Build small .deb packages in memory (ar archive of debian-binary, control.tar.gz, data.tar.gz).

The lab builds a few hundred stand-in packages on every `lab up`; doing it in-process takes well
under a second where one dpkg-deb call per package took several. The output is deterministic
(fixed mtimes, root ownership), and tests check it with dpkg-deb itself.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import tarfile
from dataclasses import dataclass, field
from pathlib import PurePosixPath

MTIME = 1_735_689_600  # 2025-01-01: fixed, so the same input gives byte-identical packages
MAINTAINER = "r9700ctl lab <lab@r9700ctl.invalid>"


@dataclass(frozen=True)
class DebFile:
    path: str  # absolute path on the target, e.g. /opt/rocm-6.4.1/bin/rocminfo
    content: bytes
    mode: int = 0o644


@dataclass(frozen=True)
class DebSymlink:
    path: str
    target: str


@dataclass
class DebPackage:
    name: str
    version: str
    summary: str
    description: str = ""
    architecture: str = "amd64"
    depends: list[str] = field(default_factory=list)
    section: str = "misc"
    files: list[DebFile] = field(default_factory=list)
    symlinks: list[DebSymlink] = field(default_factory=list)
    scripts: dict[str, str] = field(default_factory=dict)  # postinst, prerm, postrm, preinst

    @property
    def filename(self) -> str:
        """Debian's pool file name: the epoch is not part of it."""
        version = self.version.split(":", 1)[-1]
        return f"{self.name}_{version}_{self.architecture}.deb"

    def installed_size_kib(self) -> int:
        return max(1, sum((len(f.content) + 1023) // 1024 for f in self.files))

    def control(self) -> str:
        lines = [
            f"Package: {self.name}",
            f"Version: {self.version}",
            f"Architecture: {self.architecture}",
            f"Maintainer: {MAINTAINER}",
            f"Installed-Size: {self.installed_size_kib()}",
        ]
        if self.depends:
            lines.append(f"Depends: {', '.join(self.depends)}")
        lines += [f"Section: {self.section}", "Priority: optional", f"Description: {self.summary}"]
        for paragraph in self.description.strip().splitlines():
            lines.append(f" {paragraph}" if paragraph.strip() else " .")
        return "\n".join(lines) + "\n"


def build(package: DebPackage) -> bytes:
    """The .deb file's bytes."""
    control_tar = _tar_gz(_control_members(package))
    data_tar = _tar_gz(_data_members(package))
    return _ar([("debian-binary", b"2.0\n"), ("control.tar.gz", control_tar), ("data.tar.gz", data_tar)])


_Member = tuple[str, bytes | str | None, int]  # (path, content | symlink target | None for a dir, mode)


def _control_members(package: DebPackage) -> list[_Member]:
    members: list[_Member] = [("./", None, 0o755), ("./control", package.control().encode(), 0o644)]
    md5sums = "".join(
        f"{hashlib.md5(f.content).hexdigest()}  {f.path.lstrip('/')}\n" for f in package.files
    ).encode()
    if md5sums:
        members.append(("./md5sums", md5sums, 0o644))
    for name, body in sorted(package.scripts.items()):
        members.append((f"./{name}", body.encode(), 0o755))
    return members


def _data_members(package: DebPackage) -> list[_Member]:
    dirs: set[str] = set()
    entries: list[_Member] = []
    for item in [*package.files, *package.symlinks]:
        path = PurePosixPath(item.path)
        dirs.update(str(parent) for parent in path.parents if str(parent) != "/")
        if isinstance(item, DebFile):
            entries.append((f".{path}", item.content, item.mode))
        else:
            entries.append((f".{path}", item.target, 0o777))
    members: list[_Member] = [("./", None, 0o755)]
    members += [(f".{d}/", None, 0o755) for d in sorted(dirs)]
    members += sorted(entries)
    return members


def _tar_gz(members: list[_Member]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for path, content, mode in members:
            info = tarfile.TarInfo(path)
            info.mtime, info.mode, info.uid, info.gid, info.uname, info.gname = (
                MTIME,
                mode,
                0,
                0,
                "root",
                "root",
            )
            if content is None:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            elif isinstance(content, str):
                info.type, info.linkname = tarfile.SYMTYPE, content
                tar.addfile(info)
            else:
                info.size = len(content)
                tar.addfile(info, io.BytesIO(content))
    return gzip.compress(buffer.getvalue(), compresslevel=6, mtime=0)


def _ar(members: list[tuple[str, bytes]]) -> bytes:
    out = io.BytesIO()
    out.write(b"!<arch>\n")
    for name, data in members:
        header = f"{name:<16}{MTIME:<12}{0:<6}{0:<6}{0o100644:<8o}{len(data):<10}`\n"
        out.write(header.encode("ascii"))
        out.write(data)
        if len(data) % 2:
            out.write(b"\n")
    return out.getvalue()
