"""Headless Chromium driven over the DevTools protocol, for screenshots of pages that need more
than a URL: a button clicked (the Plots view of an asset's metadata), a section scrolled into view,
a wait until the page shows what it is about.

Chromium listens on a DevTools port of 127.0.0.1 only (``--remote-debugging-port=0`` picks a free
one and writes it to ``DevToolsActivePort`` in the profile), runs in its own process group, and
is stopped with it. The client is ``websockets`` (a dependency of ``dagster-webserver``, through
``uvicorn[standard]``, so it is there wherever ``dagster dev`` is).
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import Any

from websockets.sync.client import ClientConnection, connect

from devtools.devserver import stop_process_group

CHROMIUM = Path("/usr/bin/chromium")
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


class BrowserError(RuntimeError):
    pass


def chromium_flags(profile: Path, width: int, height: int) -> list[str]:
    """Headless, no first-run UI, no background traffic, DevTools on 127.0.0.1 only."""
    return [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-extensions",
        "--hide-scrollbars",
        f"--user-data-dir={profile}",
        f"--window-size={width},{height}",
        "--remote-debugging-address=127.0.0.1",
        "--remote-debugging-port=0",
    ]


class Browser:
    """One headless Chromium with one page; ``with Browser(work, 1600, 1000) as b: ...``."""

    def __init__(self, work: Path, width: int, height: int, timeout_s: float = 60.0) -> None:
        self.width, self.height, self.timeout_s = width, height, timeout_s
        self._profile = Path(tempfile.mkdtemp(prefix="chromium-profile-", dir=work))
        # Chromium puts its singleton socket under TMPDIR and aborts ("Socket path too long")
        # when that path passes the 107 bytes a Unix socket allows: give it a short TMPDIR.
        self._short_tmp = Path(tempfile.mkdtemp(prefix="chromium-", dir="/tmp"))
        self._log_path = work / "chromium.log"
        self._proc: subprocess.Popen[bytes] | None = None
        self._ws: ClientConnection | None = None
        self._next_id = 0

    def __enter__(self) -> Browser:
        if not CHROMIUM.exists():
            raise BrowserError(f"{CHROMIUM} not found: install Debian's chromium")
        with self._log_path.open("wb") as log:
            self._proc = subprocess.Popen(
                [
                    str(CHROMIUM),
                    *chromium_flags(self._profile, self.width, self.height),
                    "about:blank",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**os.environ, "TMPDIR": str(self._short_tmp)},
                start_new_session=True,  # its own process group: zygote, renderer and GPU go too
            )
        try:
            port = self._devtools_port()
            self._ws = connect(self._page_socket(port), max_size=None, open_timeout=self.timeout_s)
            self.call("Page.enable")
            self.call(
                "Emulation.setDeviceMetricsOverride",
                width=self.width,
                height=self.height,
                deviceScaleFactor=1,
                mobile=False,
            )
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        if self._ws is not None:
            self._ws.close()
            self._ws = None
        if self._proc is not None:
            stop_process_group(self._proc)
            self._proc = None
        shutil.rmtree(self._short_tmp, ignore_errors=True)

    def _devtools_port(self) -> int:
        marker = self._profile / "DevToolsActivePort"
        deadline = time.monotonic() + self.timeout_s
        while time.monotonic() < deadline:
            assert self._proc is not None
            if self._proc.poll() is not None:
                raise BrowserError(
                    f"chromium exited with {self._proc.returncode}: "
                    f"{self._log_path.read_text(errors='replace')[-2000:]}"
                )
            if marker.exists():
                lines = marker.read_text().split()
                if lines:
                    return int(lines[0])
            time.sleep(0.1)
        raise BrowserError(f"chromium wrote no {marker.name} within {self.timeout_s}s")

    def _page_socket(self, port: int) -> str:
        deadline = time.monotonic() + self.timeout_s
        while time.monotonic() < deadline:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=5) as r:
                targets = json.loads(r.read())
            pages = [t for t in targets if t.get("type") == "page"]
            if pages:
                return str(pages[0]["webSocketDebuggerUrl"])
            time.sleep(0.1)
        raise BrowserError("chromium has no page target")

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        """One DevTools command; events that arrive meanwhile are dropped."""
        if self._ws is None:
            raise BrowserError("the browser is not started")
        self._next_id += 1
        ident = self._next_id
        self._ws.send(json.dumps({"id": ident, "method": method, "params": params}))
        deadline = time.monotonic() + self.timeout_s
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise BrowserError(f"no answer to {method} within {self.timeout_s}s")
            message = json.loads(self._ws.recv(timeout=left))
            if message.get("id") != ident:
                continue
            if "error" in message:
                raise BrowserError(f"{method}: {message['error']}")
            result: dict[str, Any] = message.get("result", {})
            return result

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (awaited if it is a promise)."""
        result = self.call(
            "Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True
        )
        if "exceptionDetails" in result:
            raise BrowserError(f"script failed: {result['exceptionDetails']}")
        return result.get("result", {}).get("value")

    def wait_for(self, expression: str, what: str, timeout_s: float = 60.0) -> Any:
        """Poll a JavaScript expression until it is truthy; BrowserError naming ``what``."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            value = self.evaluate(expression)
            if value:
                return value
            time.sleep(0.25)
        raise BrowserError(f"the page did not show {what} within {timeout_s}s")

    def goto(self, url: str) -> None:
        self.call("Page.navigate", url=url)
        self.wait_for("document.readyState === 'complete'", f"{url} loaded")

    def screenshot(self, out: Path) -> None:
        data = base64.b64decode(self.call("Page.captureScreenshot", format="png")["data"])
        if data[:8] != PNG_SIGNATURE:
            raise BrowserError("chromium returned something that is not a PNG")
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(data)

    def resize(self, width: int, height: int) -> None:
        self.width, self.height = width, height
        self.call(
            "Emulation.setDeviceMetricsOverride",
            width=width,
            height=height,
            deviceScaleFactor=1,
            mobile=False,
        )
