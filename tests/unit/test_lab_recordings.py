"""Which recorded node the stand-in tools replay."""

import pytest

from r9700ctl.lab import recordings


@pytest.mark.parametrize(
    ("scenarios", "gpus", "chosen"),
    [
        ({"r9700-4x": {"rocminfo.txt"}, "r9700-1x": {"rocminfo.txt", "amd-smi.txt"}}, 4, "r9700-4x"),
        ({"r9700-1x": {"rocminfo.txt"}, "r9700-2x": {"rocminfo.txt", "amd-smi.txt"}}, 4, "r9700-2x"),
        ({"r9700-1x": {"rocminfo.txt"}, "r9700-3x": {"rocminfo.txt"}}, 4, "r9700-3x"),  # closest count
        ({"r9700-4x": set(), "r9700-1x": {"rocminfo.txt"}}, 4, "r9700-1x"),  # an empty one never wins
        ({}, 4, None),
    ],
    ids=["exact-count", "most-outputs", "closest-count", "skip-empty", "none"],
)
def test_the_choice_prefers_the_exact_gpu_count_then_the_most_complete(scenarios, gpus, chosen):
    assert recordings.choose(scenarios, gpus) == chosen


def test_the_source_line_is_kept_apart_from_the_output(tmp_path):
    directory = tmp_path / "r9700-2x"
    directory.mkdir()
    (directory / "rocminfo.txt").write_bytes(b"# source: https://example.invalid/1\nROCk module is loaded\n")
    (directory / "uname.txt").write_text("# source: x\nLinux\n")  # not a tool output
    loaded = recordings.load(tmp_path, "r9700-2x")
    assert loaded.outputs == {"rocminfo.txt": b"ROCk module is loaded\n"}
    assert loaded.sources == {"rocminfo.txt": "# source: https://example.invalid/1"}
    assert recordings.available(tmp_path) == {"r9700-2x": {"rocminfo.txt"}}


def test_an_output_without_a_source_line_is_replayed_whole():
    assert recordings.split_source_line(b"[{}]\n") == ("", b"[{}]\n")
