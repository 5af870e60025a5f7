"""The one atomic writer every JSON/text output goes through (r9700ctl.agent.atomic)."""

from __future__ import annotations

import pytest

from r9700ctl.agent.atomic import write_atomic


def test_the_old_file_stays_whole_when_a_write_fails_and_no_temp_file_is_left(tmp_path, monkeypatch):
    target = tmp_path / "report.json"
    write_atomic(target, "old\n")

    def failing_fsync(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("os.fsync", failing_fsync)
    with pytest.raises(OSError, match="No space left"):
        write_atomic(target, "new and longer\n")
    assert target.read_text() == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.json"]


def test_the_mode_is_what_was_asked_whatever_the_umask(tmp_path):
    path = write_atomic(tmp_path / "sub" / "request.json", b"{}\n", mode=0o600)
    assert path.read_bytes() == b"{}\n"
    assert path.stat().st_mode & 0o777 == 0o600
