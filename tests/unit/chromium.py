"""Headless Chromium (Debian's package) driven over the DevTools protocol on a pipe.

`--remote-debugging-pipe` gives the browser's DevTools protocol on file descriptors 3 (to the
browser) and 4 (from it), messages as JSON separated by NUL: no port, no extra package. `open_page`
loads a file:// URL in a fresh profile, with the flags a locked-down CI needs, and returns what
the page logged, what a script evaluated in it, and a PNG screenshot.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

FLAGS = (
    "--headless",
    "--no-sandbox",  # tests run as root
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
    "--remote-debugging-pipe",
)


def binary() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


@dataclass
class Page:
    errors: list[str] = field(default_factory=list)  # console errors, exceptions, failed loads
    value: Any = None  # what `script` evaluated to
    screenshot: bytes = b""


class _Pipe:
    def __init__(self, write_fd: int, read_fd: int) -> None:
        self.write_fd, self.read_fd = write_fd, read_fd
        self.buffer = b""
        self.next_id = 0
        self.events: list[dict] = []

    def send(self, method: str, params: dict | None = None, session: str | None = None) -> int:
        self.next_id += 1
        message: dict[str, Any] = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self.write_fd, json.dumps(message).encode() + b"\0")
        return self.next_id

    def receive(self, deadline: float) -> dict:
        while b"\0" not in self.buffer:
            if time.monotonic() > deadline:
                raise TimeoutError("chromium did not answer in time")
            chunk = os.read(self.read_fd, 1 << 16)
            if not chunk:
                raise RuntimeError("chromium closed its DevTools pipe")
            self.buffer += chunk
        raw, self.buffer = self.buffer.split(b"\0", 1)
        return json.loads(raw)

    def call(
        self, method: str, params: dict | None = None, session: str | None = None, timeout: float = 30
    ) -> dict:
        wanted = self.send(method, params, session)
        deadline = time.monotonic() + timeout
        while True:
            message = self.receive(deadline)
            if message.get("id") == wanted:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})
            self.events.append(message)

    def wait_for(self, method: str, timeout: float = 30) -> dict:
        deadline = time.monotonic() + timeout
        for position, event in enumerate(self.events):
            if event.get("method") == method:
                return self.events.pop(position)
        while True:
            message = self.receive(deadline)
            if message.get("method") == method:
                return message
            self.events.append(message)


def _errors(events: list[dict]) -> list[str]:
    found = []
    for event in events:
        method, params = event.get("method"), event.get("params") or {}
        if method == "Runtime.exceptionThrown":
            found.append(f"exception: {params.get('exceptionDetails', {}).get('text')}")
        elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            found.append(f"console.{params['type']}: {params.get('args')}")
        elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
            entry = params["entry"]
            found.append(f"log: {entry.get('text')} {entry.get('url', '')}".strip())
        elif method == "Network.loadingFailed":
            found.append(f"load failed: {params.get('errorText')}")
        elif method == "Network.requestWillBeSent":
            url = params.get("request", {}).get("url", "")
            if not url.startswith(("file:", "data:", "about:")):
                found.append(f"network request: {url}")
    return found


def _high(fds: tuple[int, int]) -> tuple[int, int]:
    """The pipe's ends moved above 9, so the child's dup2 onto 3 and 4 cannot clobber one of them."""
    import fcntl

    moved = tuple(fcntl.fcntl(fd, fcntl.F_DUPFD, 10) for fd in fds)
    for fd in fds:
        os.close(fd)
    return moved  # type: ignore[return-value]


def open_page(path: Path, script: str, *, width: int = 1280, height: int = 1600, timeout: float = 90) -> Page:
    """Load `path`, evaluate `script` (an expression returning JSON-able data), take a screenshot."""
    command = binary()
    if command is None:
        raise FileNotFoundError("chromium")
    with tempfile.TemporaryDirectory(prefix="r9700ctl-chromium-") as profile:
        browser_reads, to_browser = _high(os.pipe())
        from_browser, browser_writes = _high(os.pipe())
        # The browser reads commands on fd 3 and writes answers on fd 4.
        process = subprocess.Popen(
            [command, *FLAGS, f"--user-data-dir={profile}", f"--window-size={width},{height}", "about:blank"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            close_fds=False,  # fds 3 and 4 are dup2()ed in the child; Python opens the rest non-inheritable
            preexec_fn=lambda: (os.dup2(browser_reads, 3), os.dup2(browser_writes, 4)),
        )
        os.close(browser_reads)
        os.close(browser_writes)
        pipe = _Pipe(to_browser, from_browser)
        try:
            target = pipe.call("Target.createTarget", {"url": "about:blank"}, timeout=timeout)["targetId"]
            session = pipe.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
            for domain in ("Page", "Runtime", "Log", "Network"):
                pipe.call(f"{domain}.enable", session=session)
            pipe.call("Page.navigate", {"url": path.resolve().as_uri()}, session=session)
            pipe.wait_for("Page.loadEventFired", timeout=timeout)
            value = pipe.call(
                "Runtime.evaluate", {"expression": script, "returnByValue": True}, session=session
            )["result"].get("value")
            shot = pipe.call("Page.captureScreenshot", {"format": "png"}, session=session, timeout=timeout)
            page = Page(errors=_errors(pipe.events), value=value, screenshot=base64.b64decode(shot["data"]))
            pipe.send("Browser.close")
        finally:
            os.close(to_browser)
            os.close(from_browser)
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=20)
    return page
