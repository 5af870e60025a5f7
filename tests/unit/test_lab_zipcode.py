"""The lab nodes' zipimport bytecode cache (r9700ctl/lab/zipcode.py), in a real python3.

It may only ever save time: the same source in a zip gives its cached code, a changed source is
compiled afresh (the key is the text, not the file's name or date), and a process that cannot
write the cache (not root) imports as plain Python does.
"""

from __future__ import annotations

import marshal
import os
import shutil
import subprocess
import tempfile
import zipfile
from pathlib import Path

import pytest

from r9700ctl.lab import zipcode

# The nodes' own kind of interpreter (Debian's), which any user may run: the venv's may live in
# root's home.
SYSTEM_PYTHON = "/usr/bin/python3"
pytestmark = pytest.mark.skipif(not Path(SYSTEM_PYTHON).is_file(), reason="needs Debian's python3")


def run_from_zip(tmp_path: Path, source: str, cache: Path, *, as_user: bool = False) -> str:
    """Import `payload` from a fresh zip (a new temporary path, as each AnsiballZ run has) with the
    nodes' .pth module loaded, and print what it says."""
    payload = tmp_path / f"run{len(list(tmp_path.glob('run*')))}" / "payload.zip"
    payload.parent.mkdir()
    with zipfile.ZipFile(payload, "w") as archive:
        archive.writestr("payload.py", source)
    module = zipcode.MODULE.replace(repr(zipcode.CACHE_DIR), repr(str(cache)))
    (payload.parent / "r9700ctl_lab_zipcode.py").write_text(module)
    script = (
        f"import sys; sys.path[:0] = [{str(payload.parent)!r}]; import r9700ctl_lab_zipcode; "
        f"sys.path.insert(0, {str(payload)!r}); import payload; print(payload.SAID)"
    )
    argv = [SYSTEM_PYTHON, "-S", "-c", script]
    done = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
        preexec_fn=(lambda: os.setuid(65534)) if as_user else None,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.mark.skipif(os.geteuid() != 0, reason="the cache is root's, as on the nodes")
def test_the_same_source_is_compiled_once_and_a_changed_one_afresh(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    assert run_from_zip(tmp_path, "SAID = 'one'\n", cache) == "one"
    entries = list(cache.iterdir())
    assert len(entries) == 1 and oct(cache.stat().st_mode & 0o777) == "0o700"
    # The cached code is what a second run gets: plant another code object under the same key.
    planted = compile("SAID = 'from the cache'\n", "payload.py", "exec")
    entries[0].write_bytes(marshal.dumps(planted))
    assert run_from_zip(tmp_path, "SAID = 'one'\n", cache) == "from the cache"
    # Another text is another key: compiled afresh, never the stale code.
    assert run_from_zip(tmp_path, "SAID = 'two'\n", cache) == "two"
    assert len(list(cache.iterdir())) == 2


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run a process as another user")
def test_a_process_that_is_not_root_imports_as_plain_python_and_writes_nothing() -> None:
    where = Path(tempfile.mkdtemp(prefix="r9700ctl-zipcode-"))  # pytest's own are root's alone
    try:
        where.chmod(0o755)
        cache = where / "cache"
        assert run_from_zip(where, "SAID = 'plain'\n", cache, as_user=True) == "plain"
        assert not cache.exists()
    finally:
        shutil.rmtree(where)


def test_a_broken_cache_entry_is_compiled_again(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    if os.geteuid() != 0:
        pytest.skip("the cache is root's")
    run_from_zip(tmp_path, "SAID = 'x'\n", cache)
    for entry in cache.iterdir():
        entry.write_bytes(b"not marshal data")
    assert run_from_zip(tmp_path, "SAID = 'x'\n", cache) == "x"


def test_the_nodes_get_the_module_and_its_pth_line_and_snapshots_leave_them_out() -> None:
    from r9700ctl.lab import node

    written = zipcode.files()
    assert written[zipcode.PTH_FILE] == "import r9700ctl_lab_zipcode\n"
    assert zipcode.MODULE_FILE.endswith("/r9700ctl_lab_zipcode.py")
    assert {zipcode.PTH_FILE, zipcode.MODULE_FILE} <= set(node.PLUMBING)
