"""Lab plumbing: the lab's nodes keep the bytecode of what Python imports from a zip file.

Every Ansible module runs on a node as an AnsiballZ payload: a zip of the module and Ansible's
module_utils that python3 imports with zipimport, which compiles every source file again on every
run (it can write no .pyc into the zip). In the lab that is about 0.05 CPU-s of each module run,
on the same two cores the controller and the other nodes share, several thousand times per test
suite. The nodes' python3 gets a .pth line (site.py runs it at start) that hands zipimport's
compile step a cache keyed by the source text itself: the same module_utils text gives the same
code object, a changed one is compiled afresh, and nothing else of Python changes. Only root can
write the cache (a 0700 directory), so a payload run without become compiles as before.

This is the lab's, never a provisioned node's: real nodes run their own CPUs in parallel.
"""

from __future__ import annotations

# Debian's python3 runs the import lines of the .pth files in its dist-packages at start (site.py).
PTH_FILE = "usr/lib/python3/dist-packages/r9700ctl-lab-zipcode.pth"
MODULE_FILE = "usr/lib/python3/dist-packages/r9700ctl_lab_zipcode.py"
CACHE_DIR = "/var/cache/r9700ctl-lab-zipcode"

# Runs inside every python3 of a node: standard library only, and never fails the import it serves.
# hashlib and marshal load only when a zip is imported from: hashlib's OpenSSL costs every python3
# of a node (the node programs, apt's hooks) about 4 ms at start. A cached code object keeps the
# file name of the payload that compiled it first, so a traceback may name an older payload's path.
MODULE = f'''"""r9700ctl lab plumbing (r9700ctl/lab/zipcode.py): zipimport's compiled sources, cached."""
import os
import sys
import zipimport

CACHE_DIR = {CACHE_DIR!r}
_compile_source = getattr(zipimport, "_compile_source", None)


def _cached(pathname, source):
    import hashlib
    import marshal

    # The payload's own temporary path is not part of the key: only the name inside the zip is.
    inside = pathname.split(".zip" + os.sep, 1)[-1]
    key = hashlib.sha256(repr(sys.version_info).encode() + inside.encode() + b"\\0" + source).hexdigest()
    path = os.path.join(CACHE_DIR, key)
    try:
        with open(path, "rb") as handle:
            return marshal.load(handle)
    except (OSError, EOFError, ValueError, TypeError):
        pass
    code = _compile_source(pathname, source)
    try:
        if os.geteuid() == 0:
            os.makedirs(CACHE_DIR, mode=0o700, exist_ok=True)
            part = f"{{path}}.{{os.getpid()}}"
            with open(part, "wb") as handle:
                marshal.dump(code, handle)
            os.replace(part, path)
    except OSError:
        pass
    return code


if _compile_source is not None and os.path.isdir(os.path.dirname(CACHE_DIR)):
    zipimport._compile_source = _cached
'''


def files() -> dict[str, str]:
    """What a node's root file system gets: the module and the .pth line that imports it."""
    return {MODULE_FILE: MODULE, PTH_FILE: "import r9700ctl_lab_zipcode\n"}
