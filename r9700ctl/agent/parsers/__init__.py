"""Parsers of recorded tool outputs: amd-smi, rocm-smi, rocminfo, lspci, dkms, /proc/cmdline,
os-release, the kernel log, RCCL logs, nvidia-smi and the kernel's PCIe AER counters.

Standard library only: the agent runs them on nodes and the controller's doctor reads
support bundles with them. Every module offers parse(text, source) and parse_file(path)
(amdsmi and rocmsmi name a few more); none raises on garbage, truncated or unexpected
input: the result carries .error = "could not read FILE: reason" for the caller to turn
into a finding. See README.md for what each returns.
"""

from r9700ctl.agent.parsers._common import cannot_read

__all__ = ["BUNDLE_FILES", "cannot_read"]

# Support-bundle file name -> "module:function" that reads it.
BUNDLE_FILES = {
    "os-release": "osrelease:parse_file",
    "cmdline.txt": "cmdline:parse_file",
    "lspci.txt": "lspci:parse_file",
    "dkms-status.txt": "dkms:parse_file",
    "rocminfo.txt": "rocminfo:parse_file",
    "amd-smi-static.json": "amdsmi:parse_file",
    "amd-smi-metric.json": "amdsmi:parse_file",
    "amd-smi-list.json": "amdsmi:parse_file",
    "amd-smi-topology.json": "amdsmi:parse_file",
    "amd-smi.txt": "amdsmi:parse_file",
    "rocm-smi.json": "rocmsmi:parse_json_file",
    "rocm-smi-topo.txt": "rocmsmi:parse_topo_file",
    "nvidia-smi.xml": "nvidia_smi:parse_file",
    "dmesg.txt": "dmesg:parse_file",
    "aer.txt": "aer:parse_file",
}
