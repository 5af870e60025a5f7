"""Real tool outputs recorded on R9700 nodes, replayed by the stand-in rocminfo, amd-smi, rocm-smi.

Another part of the project collects them in r9700ctl/data/recorded/<scenario>/ (e.g. r9700-4x/);
each file's first line names its public source and is not part of the output.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from r9700ctl.paths import data_file

# tool -> {arguments (any order) -> recorded file}; docs/architecture.md "Support bundle" names the files.
TOOL_OUTPUTS: dict[str, dict[tuple[str, ...], str]] = {
    "rocminfo": {(): "rocminfo.txt", ("--support",): "rocminfo.txt"},
    "amd-smi": {
        (): "amd-smi.txt",
        ("static", "--json"): "amd-smi-static.json",
        ("metric", "--json"): "amd-smi-metric.json",
        ("list", "--json"): "amd-smi-list.json",
        ("topology", "--json"): "amd-smi-topology.json",
    },
    "rocm-smi": {
        ("--showallinfo", "--json"): "rocm-smi.json",
        ("--showtopo",): "rocm-smi-topo.txt",
        (): "rocm-smi.txt",
    },
}
OUTPUT_FILES = frozenset(f for table in TOOL_OUTPUTS.values() for f in table.values())


@dataclass
class Recordings:
    scenario: str | None
    outputs: dict[str, bytes] = field(default_factory=dict)  # file name -> output, source line removed
    sources: dict[str, str] = field(default_factory=dict)  # file name -> its source line

    def for_tool(self, tool: str) -> dict[tuple[str, ...], str]:
        """The argument lists of `tool` that have a recording here."""
        return {args: name for args, name in TOOL_OUTPUTS[tool].items() if name in self.outputs}


def recorded_root() -> Path:
    return data_file("recorded")


def scenario_gpus(name: str) -> int | None:
    match = re.search(r"-(\d+)x$", name)
    return int(match.group(1)) if match else None


def available(root: Path) -> dict[str, set[str]]:
    """R9700 scenarios -> the tool output files each one holds."""
    if not root.is_dir():
        return {}
    return {
        d.name: {f.name for f in d.iterdir() if f.name in OUTPUT_FILES}
        for d in sorted(root.iterdir())
        if d.is_dir() and d.name.startswith("r9700")
    }


def choose(scenarios: dict[str, set[str]], gpus: int) -> str | None:
    """The recording a lab with `gpus` GPUs per node replays.

    An exact GPU count (r9700-4x for --gpus 4) wins; otherwise the scenario with the most tool
    outputs, then the closest GPU count. None when no R9700 recording exists yet.
    """
    exact = f"r9700-{gpus}x"
    if scenarios.get(exact):
        return exact
    ranked = [
        (-len(files), abs((scenario_gpus(name) or 0) - gpus), name)
        for name, files in scenarios.items()
        if files
    ]
    return min(ranked)[2] if ranked else None


def load(root: Path, scenario: str | None) -> Recordings:
    recordings = Recordings(scenario=scenario)
    if scenario is None:
        return recordings
    directory = root / scenario
    for name in sorted(OUTPUT_FILES):
        path = directory / name
        if path.is_file():
            source, output = split_source_line(path.read_bytes())
            recordings.outputs[name] = output
            recordings.sources[name] = source
    return recordings


def split_source_line(data: bytes) -> tuple[str, bytes]:
    """('# source: ...', rest) when the first line is a comment, else ('', data)."""
    if not data.startswith(b"#"):
        return "", data
    first, _, rest = data.partition(b"\n")
    return first.decode(errors="replace").strip(), rest
