"""Times as r9700ctl writes and reads them: UTC text with a Z, to the second."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any


def utc_text(moment: datetime) -> str:
    """ISO 8601 in UTC with a Z, to the second: 2026-12-02T13:13:14Z."""
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(text: Any) -> datetime | None:
    """The agent's '2026-12-02T13:34:40+0000' and the controller's ISO forms; None when neither."""
    if not isinstance(text, str) or not text:
        return None
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        try:
            moment = datetime.strptime(text, "%Y-%m-%dT%H:%M:%S%z")
        except ValueError:
            return None
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)
