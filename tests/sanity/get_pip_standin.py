"""r9700ctl's stand-in for ansible-test's pip bootstrap script (get-pip.py), which ansible-test
downloads from a host outside the package registries this project may reach.

ansible-test creates each sanity test's virtual environment without pip and runs this script with
the venv's Python and get-pip's arguments (`pip==X --no-setuptools --no-wheel`); the real script
installs that pip from a copy it carries. The stand-in gets pip from Python's own ensurepip, then
installs the pip asked for from the configured package index; a failure fails the bootstrap, as
the real script's would.
"""

import subprocess
import sys

GET_PIP_ONLY = ("--no-setuptools", "--no-wheel")  # get-pip's own options, not pip install's

subprocess.check_call([sys.executable, "-m", "ensurepip", "--default-pip"])
subprocess.check_call(
    [sys.executable, "-m", "pip", "install", *[a for a in sys.argv[1:] if a not in GET_PIP_ONLY]]
)
