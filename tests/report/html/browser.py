"""A tiny headless-Chromium driver for the report tests: the DevTools protocol over
`--remote-debugging-pipe` (JSON messages ending in NUL on fds 3 and 4), no extra package.

    with Browser.start() as browser:
        page = browser.open(Path("report.html"))
        page.wait_for("document.body.dataset.chartsDone === document.body.dataset.charts")
        page.evaluate("document.querySelectorAll('svg').length")
        page.screenshot(Path("shot.png"))
    page.console_errors, page.requests, page.failed_requests

DNS is mapped to nowhere (`--host-resolver-rules`), and every request the page makes is recorded
from the Network domain, so a test can assert that a report asked no host for anything.
"""

from __future__ import annotations

import base64
import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

_CANDIDATES = ("/usr/lib/chromium/chromium", "chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def find_chromium() -> str | None:
    """Debian's binary itself (its /usr/bin wrapper only adds flags), else any on PATH."""
    for name in _CANDIDATES:
        path = name if os.path.isabs(name) and os.access(name, os.X_OK) else shutil.which(name)
        if path:
            return path
    return None


class BrowserError(RuntimeError):
    pass


@dataclass
class Page:
    browser: "Browser"
    session: str
    console: list[dict[str, Any]] = field(default_factory=list)  # (level, text) of console calls and log entries
    exceptions: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)  # every URL the page asked for
    failed_requests: list[str] = field(default_factory=list)

    def call(self, method: str, params: dict[str, Any] | None = None, timeout: float = 30) -> dict[str, Any]:
        return self.browser.call(method, params, session=self.session, timeout=timeout)

    def evaluate(self, expression: str, timeout: float = 30) -> Any:
        reply = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": True}, timeout)
        if "exceptionDetails" in reply:
            raise BrowserError(f"{expression!r} raised: {reply['exceptionDetails']}")
        return reply["result"].get("value")

    def wait_for(self, expression: str, timeout: float = 30) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            value = self.evaluate(expression)
            if value:
                return value
            if time.monotonic() > deadline:
                raise BrowserError(f"timed out after {timeout} s waiting for {expression!r}")
            time.sleep(0.1)

    def hover(self, x: float, y: float) -> None:
        self.call("Input.dispatchMouseEvent", {"type": "mouseMoved", "x": x, "y": y})

    def screenshot(self, path: Path) -> Path:
        metrics = self.call("Page.getLayoutMetrics")
        size = metrics.get("cssContentSize") or metrics["contentSize"]
        clip = {"x": 0, "y": 0, "width": size["width"], "height": min(size["height"], 12000), "scale": 1}
        data = self.call("Page.captureScreenshot", {"format": "png", "clip": clip, "captureBeyondViewport": True}, timeout=60)["data"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data))
        return path

    @property
    def console_errors(self) -> list[str]:
        return [m["text"] for m in self.console if m["level"] in ("error", "assert")] + self.exceptions

    def _event(self, method: str, params: dict[str, Any]) -> None:
        if method == "Runtime.consoleAPICalled":
            text = " ".join(str(a.get("value", a.get("description", ""))) for a in params.get("args", []))
            self.console.append({"level": params.get("type", ""), "text": text})
        elif method == "Runtime.exceptionThrown":
            details = params.get("exceptionDetails", {})
            self.exceptions.append(str(details.get("exception", {}).get("description") or details.get("text")))
        elif method == "Log.entryAdded":
            entry = params.get("entry", {})
            self.console.append({"level": entry.get("level", ""), "text": f"{entry.get('source')}: {entry.get('text')} {entry.get('url', '')}"})
        elif method == "Network.requestWillBeSent":
            self.requests.append(params.get("request", {}).get("url", ""))
        elif method == "Network.loadingFailed":
            self.failed_requests.append(f"{params.get('errorText')} (blocked: {params.get('blockedReason')})")


class Browser:
    def __init__(self, proc: subprocess.Popen, to_browser: int, from_browser: int, profile: str) -> None:
        self.proc = proc
        self._out = to_browser
        self._in = from_browser
        self._profile = profile
        self._buffer = b""
        self._next_id = 0
        self._pages: dict[str, Page] = {}

    @classmethod
    def start(cls, executable: str | None = None, width: int = 1280, height: int = 900) -> "Browser":
        exe = executable or find_chromium()
        if exe is None:
            raise BrowserError("no chromium found")
        cmd_r, cmd_w = os.pipe()  # we write commands, the browser reads them on fd 3
        res_r, res_w = os.pipe()  # the browser writes replies and events on fd 4
        profile = tempfile.mkdtemp(prefix="cagtool-chromium-")

        def fds() -> None:
            os.dup2(cmd_r, 3)
            os.dup2(res_w, 4)

        args = [
            exe,
            "--headless",
            "--remote-debugging-pipe",
            "--no-sandbox",  # root in CI containers
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--host-resolver-rules=MAP * ~NOTFOUND",  # the network is cut: no name resolves
            f"--user-data-dir={profile}",
            f"--window-size={width},{height}",
            "about:blank",
        ]
        proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=fds, pass_fds=(3, 4))
        os.close(cmd_r)
        os.close(res_w)
        return cls(proc, cmd_w, res_r, profile)

    def __enter__(self) -> "Browser":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        try:
            if self.proc.poll() is None:
                self.call("Browser.close", timeout=5)
        except (BrowserError, OSError):
            pass
        finally:
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            for fd in (self._out, self._in):
                try:
                    os.close(fd)
                except OSError:
                    pass
            shutil.rmtree(self._profile, ignore_errors=True)

    def call(self, method: str, params: dict[str, Any] | None = None, session: str | None = None, timeout: float = 30) -> dict[str, Any]:
        self._next_id += 1
        ident = self._next_id
        message: dict[str, Any] = {"id": ident, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self._out, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            reply = self._read(deadline, method)
            if reply.get("id") == ident:
                if "error" in reply:
                    raise BrowserError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            if "method" in reply:
                page = self._pages.get(reply.get("sessionId", ""))
                if page is not None:
                    page._event(reply["method"], reply.get("params", {}))

    def _read(self, deadline: float, waiting_for: str) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise BrowserError(f"no reply to {waiting_for} in time")
            ready, _, _ = select.select([self._in], [], [], left)
            if not ready:
                continue
            chunk = os.read(self._in, 1 << 20)
            if not chunk:
                raise BrowserError(f"chromium exited (code {self.proc.poll()}) while waiting for {waiting_for}")
            self._buffer += chunk
        raw, _, self._buffer = self._buffer.partition(b"\0")
        return json.loads(raw)

    def open(self, path: Path, timeout: float = 30) -> Page:
        """A new tab with the domains that report problems enabled, then the file loaded."""
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        page = Page(self, session)
        self._pages[session] = page
        for domain in ("Runtime", "Log", "Network", "Page"):
            page.call(f"{domain}.enable")
        page.call("Page.navigate", {"url": Path(path).resolve().as_uri()}, timeout=timeout)
        page.wait_for("document.readyState === 'complete'", timeout=timeout)
        return page
