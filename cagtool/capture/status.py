"""The live status line on a terminal (step, graphs so far, compile in progress). Plain and
silent when stderr is not a terminal or CI=true, so logs get no control characters."""

from __future__ import annotations

import os
import sys
import time
from typing import Any, Callable


def status_enabled() -> bool:
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        return False
    return sys.stderr.isatty()


class LiveStatus:
    """A transient rich Live on stderr. The script's prints are routed above the line by rich,
    so they are never garbled; the line disappears when the run ends."""

    def __init__(self, label: str, probe: Callable[[], dict[str, Any]]) -> None:
        self.label = label
        self.probe = probe
        self.start = time.perf_counter()
        self._live: Any = None

    def _render(self) -> Any:
        from rich.text import Text

        info = self.probe()
        elapsed = time.perf_counter() - self.start
        compiling = "  [compiling…]" if info.get("compiling") else ""
        return Text(
            f"cagtool {self.label}: step {info.get('step') or 0}  CA graphs {info.get('graphs', 0)}  "
            f"{elapsed:6.1f}s{compiling}",
            style="dim",
        )

    def __enter__(self) -> "LiveStatus":
        from rich.console import Console
        from rich.live import Live

        class _Renderable:
            def __rich__(inner) -> Any:  # noqa: N805 - rich protocol
                return self._render()

        console = Console(file=sys.stderr)
        self._live = Live(_Renderable(), console=console, transient=True, refresh_per_second=4, redirect_stdout=True, redirect_stderr=True)
        self._live.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._live is not None:
            self._live.__exit__(*exc)
