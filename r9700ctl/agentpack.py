"""Pack the on-node agent: its code, and its data files converted to JSON (controller side).

The agent runs on nodes with nothing but Python (and PyTorch), so it reads its data as JSON.
The YAML sources (r9700ctl/data/manifest.yaml, thresholds.yaml, codes.yaml) are read here,
with PyYAML, and written as r9700ctl/data/*.json beside the agent's code:

    DIR/r9700ctl/__init__.py
    DIR/r9700ctl/agent/...
    DIR/r9700ctl/data/manifest.json
    DIR/r9700ctl/data/thresholds.json
    DIR/r9700ctl/data/codes.json

`stage(DIR)` lays that tree out (`validate --local` runs the agent from it, exactly as on a
node); `pack(ARCHIVE)` puts it in a .tar.gz for Ansible (`validate INVENTORY`, the
r9700_monitoring role's timer), byte-identical for the same r9700ctl, so a role that copies it
changes nothing when nothing changed;
`node_program(FILE)` packs the package as one executable file, `r9700-node`, that the roles run
and install under their programs' names (r9700ctl.agent.programs: r9700-run, r9700-power-cap,
r9700-lifecycle, r9700-pci-devices); `node_program_vars()` builds it for one playbook run;
`stdin_invocation(MODULE, ARGS)` sends one module of the package, with the package modules it
imports, to a node that has nothing of r9700ctl yet (preflight's facts, before anything changes);
`convert_thresholds` turns an operator's --thresholds YAML into the JSON the agent reads.
`python3 -m r9700ctl.agentpack DIR` stages by hand (bench scripts, stand-alone use).
"""

from __future__ import annotations

import contextlib
import functools
import gzip
import json
import shutil
import sys
import tarfile
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from r9700ctl import fastyaml, paths
from r9700ctl.errors import BadInput

AGENT_CODE = ("__init__.py", "agent")
DATA_NAMES = ("manifest", "thresholds", "codes")


def package_dir() -> Path:
    """The installed r9700ctl package (the directory holding agent/ and data/)."""
    return paths.data_file("manifest.yaml").parent.parent


def data_document(name: str) -> Any:
    """A data file of r9700ctl/data as the agent will read it (parsed from its YAML source)."""
    with open(paths.data_file(f"{name}.yaml"), encoding="utf-8") as fh:
        return fastyaml.safe_load(fh)


def _ignore(directory: str, names: list[str]) -> set[str]:
    return {n for n in names if n == "__pycache__" or n.endswith(".pyc")}


def stage(directory: Path) -> Path:
    """Lay the node package out under `directory`/r9700ctl (code + data as JSON); returns `directory`."""
    source = package_dir()
    target = directory / "r9700ctl"
    (target / "data").mkdir(parents=True, exist_ok=True)
    shutil.copy2(source / "__init__.py", target / "__init__.py")
    shutil.copytree(source / "agent", target / "agent", ignore=_ignore, dirs_exist_ok=True)
    for name in DATA_NAMES:
        (target / "data" / f"{name}.json").write_text(data_json(name), encoding="utf-8")
    return directory


def data_json(name: str) -> str:
    """A data file of r9700ctl/data as the JSON text the agent reads (what `stage` writes)."""
    return json.dumps(data_document(name), indent=1, default=str) + "\n"


# The one data file the controller reads as JSON too (agent/codes.py serves both sides): kept in
# r9700ctl/data beside its YAML source, rewritten by `python3 -m r9700ctl.agentpack --codes-json`.
CONTROLLER_JSON = ("codes",)


def write_controller_json() -> list[Path]:
    """Rewrite r9700ctl/data/<name>.json from its YAML source for every CONTROLLER_JSON name."""
    written = []
    for name in CONTROLLER_JSON:
        path = paths.data_file(f"{name}.json")
        path.write_text(data_json(name), encoding="utf-8")
        written.append(path)
    return written


def _normalised(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "root", "root"
    info.mode = 0o755 if info.isdir() else 0o644
    return info


def pack(archive: Path) -> Path:
    """The staged tree as a .tar.gz (arcnames r9700ctl/...), written next to `archive` and renamed.

    Byte-for-byte the same for the same files: sorted entries, no times, owners or gzip name.
    """
    tmp = archive.with_name(archive.name + ".tmp")
    with tempfile.TemporaryDirectory(prefix="r9700ctl-agent-") as scratch:
        root = stage(Path(scratch)) / "r9700ctl"
        with (
            open(tmp, "wb") as raw,
            gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as zipped,
            tarfile.open(fileobj=zipped, mode="w", format=tarfile.PAX_FORMAT) as tar,
        ):
            tar.add(root, arcname="r9700ctl", filter=_normalised)
    tmp.replace(archive)
    return archive


# What runs first on the node when a module arrives on stdin: the package's modules it needs are
# served from memory by an import finder, nothing is written on the node, then the module runs
# as __main__ (with the node's own argv: `python3 - ARGS`).
STDIN_BOOTSTRAP = """\
import importlib.abc, importlib.util, runpy, sys
SOURCES = {sources!r}
class Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path=None, target=None):
        if name not in SOURCES:
            return None
        return importlib.util.spec_from_loader(name, self, is_package=SOURCES[name][0])
    def create_module(self, spec):
        return None
    def is_package(self, name):
        return SOURCES[name][0]
    def get_code(self, name):
        return compile(SOURCES[name][1], "<r9700ctl>/" + name, "exec")
    def exec_module(self, module):
        exec(self.get_code(module.__name__), module.__dict__)
sys.meta_path.insert(0, Finder())
runpy.run_module({module!r}, run_name="__main__", alter_sys=False)
"""


def stdin_invocation(module: str, args: dict[str, Any], python: str = "python3") -> tuple[str, bytes]:
    """(command line, stdin bytes) that run `module` of the node package on a node with nothing of
    r9700ctl: `python3 - ARGS`, the script on stdin carrying the module and every package module
    it imports. ARGS is base64 JSON, so no shell quoting can break it (r9700ctl.agent.nodefacts).
    Used by the r9700_preflight action plugin and by `r9700ctl doctor` over SSH."""
    from r9700ctl.agent.nodefacts import encode_args

    return f"{python} - {encode_args(args)}", stdin_script(module)


@functools.cache
def stdin_script(module: str) -> bytes:
    """The script stdin_invocation sends for `module`, made once per process (the action plugins
    make it where Ansible loads them, before it forks a worker per host)."""
    sources = dict(sorted(module_closure(module).items()))
    return STDIN_BOOTSTRAP.format(sources=sources, module=module).encode("utf-8")


def module_closure(module: str) -> dict[str, tuple[bool, str]]:
    """`module`, the r9700ctl modules it imports (at any depth, wherever the import stands) and
    their packages: name -> (is a package, source text)."""
    import ast

    root = package_dir().parent
    found: dict[str, tuple[bool, str]] = {}
    pending = [module]
    while pending:
        name = pending.pop()
        if name in found:
            continue
        base = root / Path(*name.split("."))
        is_package = (base / "__init__.py").is_file()
        path = base / "__init__.py" if is_package else base.with_suffix(".py")
        text = path.read_text(encoding="utf-8")
        found[name] = (is_package, text)
        parts = name.split(".")
        pending += [".".join(parts[:i]) for i in range(1, len(parts))]
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Import):
                pending += [a.name for a in node.names if a.name.startswith("r9700ctl")]
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("r9700ctl"):
                pending.append(str(node.module))
                for alias in node.names:
                    candidate = root / Path(*str(node.module).split("."), alias.name)
                    if candidate.with_suffix(".py").is_file() or (candidate / "__init__.py").is_file():
                        pending.append(f"{node.module}.{alias.name}")
    return found


# The extra var of a playbook whose roles run the node package's programs (controller path).
NODE_PROGRAM_VAR = "r9700_node_program"
NODE_PROGRAM_MAIN = """\
import sys
from r9700ctl.agent.programs import main
sys.exit(main(sys.argv))
"""
# Every supported node has python3 there (Debian and Ubuntu's python3 package).
NODE_PROGRAM_INTERPRETER = b"#!/usr/bin/python3\n"
ZIP_EPOCH = (1980, 1, 1, 0, 0, 0)  # the earliest time a zip entry can carry: no build time inside


def node_program(target: Path) -> Path:
    """The node package (code only) as one executable zip at `target`, byte-identical for the same
    r9700ctl: a role that installs it changes nothing when nothing changed."""
    import zipfile

    source = package_dir()
    entries = [("r9700ctl/__init__.py", (source / "__init__.py").read_bytes())]
    for path in sorted((source / "agent").rglob("*.py")):
        if "__pycache__" not in path.parts:
            entries.append((f"r9700ctl/{path.relative_to(source).as_posix()}", path.read_bytes()))
    entries.append(("__main__.py", NODE_PROGRAM_MAIN.encode("utf-8")))
    tmp = target.with_name(target.name + ".tmp")
    with open(tmp, "wb") as raw:
        raw.write(NODE_PROGRAM_INTERPRETER)
        with zipfile.ZipFile(raw, "w", compression=zipfile.ZIP_DEFLATED) as archive:
            for name, data in entries:
                info = zipfile.ZipInfo(name, date_time=ZIP_EPOCH)
                info.compress_type = zipfile.ZIP_DEFLATED
                info.external_attr = 0o644 << 16
                archive.writestr(info, data)
    tmp.chmod(0o755)
    tmp.replace(target)
    return target


@contextlib.contextmanager
def node_program_vars() -> Iterator[dict[str, str]]:
    """The extra vars of a playbook run whose roles run the node package's programs; the file
    lives while the run does."""
    with tempfile.TemporaryDirectory(prefix="r9700ctl-node-") as scratch:
        yield {NODE_PROGRAM_VAR: str(node_program(Path(scratch) / "r9700-node"))}


def convert_thresholds(source: Path, dest: Path) -> Path:
    """An operator's thresholds override (YAML, the shipped file's layout) as the agent's JSON.

    Refused as bad input (exit 64, nothing runs) when it is not YAML, has no `models:` mapping,
    or sets a key the shipped `models.default` does not have (a typo would otherwise be ignored).
    The JSON records the original file name as "source", so verdicts name it.
    """
    from r9700ctl.agent.datafiles import DataFileError
    from r9700ctl.agent.thresholds import check_keys, check_shapes, section_values

    try:
        with open(source, encoding="utf-8") as fh:
            document = yaml.safe_load(fh)
    except OSError as exc:
        raise BadInput(what=f"cannot read it: {exc.strerror}", where=str(source)) from None
    except UnicodeDecodeError:
        raise BadInput(
            what="not a YAML text file (it is not UTF-8)",
            where=str(source),
            hint="give a YAML file laid out as the shipped thresholds.yaml",
        ) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{source}:{mark.line + 1}" if mark is not None else str(source)
        raise BadInput(what=f"not valid YAML ({getattr(exc, 'problem', exc)})", where=where) from None
    if not isinstance(document, dict) or not isinstance(document.get("models"), dict):
        raise BadInput(
            what="expected a top-level 'models:' mapping (the layout of the shipped thresholds.yaml)",
            where=str(source),
            hint="for example: models: {default: {hostbw: {warn_fraction_of_link: 0.7}}}",
        )
    shipped = data_document("thresholds")["models"]
    try:
        check_shapes(document["models"], shipped, str(source))
        check_keys(document["models"], section_values(shipped["default"]), str(source))
    except DataFileError as exc:
        raise BadInput(
            what=str(exc).split(": ", 1)[-1],
            where=str(source),
            hint="r9700ctl/data/thresholds.yaml shows every key and the kind of value it takes",
        ) from None
    dest.write_text(json.dumps({**document, "source": str(source)}, indent=1, default=str) + "\n")
    return dest


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args == ["--codes-json"]:
        for path in write_controller_json():
            print(f"wrote {path}")
        return 0
    if len(args) != 1 or args[0].startswith("-"):
        print("usage: python3 -m r9700ctl.agentpack DIR  (then: PYTHONPATH=DIR python3 -m r9700ctl.agent)")
        return 64
    directory = stage(Path(args[0]))
    print(f"agent staged in {directory}: PYTHONPATH={directory} python3 -m r9700ctl.agent --help")
    return 0


if __name__ == "__main__":
    sys.exit(main())
