"""The live status line says what is compiling and since when: a forward frame, an AOT backward, a
CA graph's capture and Dynamo's compile of it. Read in-process with an injected clock while real
compiles are held inside their backends, and on a real terminal (a pty) during `cagtool run`,
where each compile of a script is held open until the test has seen the line name it."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import struct
import subprocess
import termios
import time
from pathlib import Path

import pytest
import torch
from conftest import ROOT, cagtool_cmd
from torch._dynamo import compiled_autograd
from torch._dynamo.backends.common import aot_autograd
from functorch.compile import make_boxed_func

from cagtool.capture.observe.compiling_now import CompilesInProgress
from cagtool.capture.run.status import LiveStatus

SCRIPTS = Path(__file__).parent / "scripts"


def test_the_line_names_each_compile_while_it_runs_and_nothing_after(fake_clock):
    compiling = CompilesInProgress(clock=fake_clock)
    live = LiveStatus("aot", lambda: {"step": 0, "graphs": 0, "compiling": compiling.current()}, clock=fake_clock)
    lines: list[str] = []

    def held(seconds: float):
        def compiler(gm, example_inputs):
            fake_clock.advance(seconds)  # the compile takes this long, on the test's clock
            lines.append(live.text())
            return make_boxed_func(gm.forward)

        return compiler

    def ca_backend(gm, example_inputs):
        fake_clock.advance(7)
        lines.append(live.text())
        return gm.forward

    compiling.install()
    try:
        model = torch.compile(torch.nn.Linear(4, 2), backend=aot_autograd(fw_compiler=held(12), bw_compiler=held(3)))
        model(torch.randn(3, 4)).sum().backward()
        torch._dynamo.reset()  # clears torch's registered compile callbacks: the status still sees compiles
        model = torch.compile(torch.nn.Linear(4, 2), backend="eager")
        loss = model(torch.randn(3, 4)).sum()
        with compiled_autograd._enable(lambda gm: torch.compile(gm, backend=ca_backend)):
            loss.backward()
    finally:
        compiling.uninstall()
    assert len(lines) == 3, lines
    assert lines[0] == "cagtool aot: step 0  CA graphs 0    12.0s  compiling frame [0/0] since 12s"
    assert lines[1] == "cagtool aot: step 0  CA graphs 0    15.0s  compiling AOT backward [0/0] since 3s"
    assert re.fullmatch(r"cagtool aot: step 0  CA graphs 0    22\.0s  compiling CA graph \[!0/\d+/0\] since 7s", lines[2]), lines[2]
    assert compiling.current() is None
    assert live.text() == "cagtool aot: step 0  CA graphs 0    22.0s"


class Terminal:
    """A pty the run draws on; `until(pattern)` reads it until the pattern appears in what came
    after the last match (a deadline of minutes only bounds a hang)."""

    def __init__(self, columns: int = 200) -> None:
        self.master, self.slave = pty.openpty()
        fcntl.ioctl(self.slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
        self.seen = ""
        self._from = 0

    def until(self, pattern: str, proc: subprocess.Popen, deadline: float) -> str:
        regex = re.compile(pattern)
        while time.monotonic() < deadline:
            found = regex.search(self.seen, self._from)
            if found:
                self._from = found.end()
                return found.group(0)
            ready, _, _ = select.select([self.master], [], [], 0.5)
            if ready:
                try:
                    self.seen += os.read(self.master, 65536).decode(errors="replace")
                except OSError:  # EIO: every writer of the terminal is gone
                    break
            elif proc.poll() is not None:
                break
        raise AssertionError(f"never drawn: {pattern!r}; the terminal's last 2000 characters: {self.seen[-2000:]!r}")


@pytest.mark.slow
def test_run_on_a_terminal_shows_each_compile_in_progress(tmp_path):
    gate = tmp_path / "gate"
    gate.mkdir()
    terminal = Terminal()
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env["TERM"] = "xterm"
    proc = subprocess.Popen(
        cagtool_cmd("run", "--modes", "aot,ca", "--backend", "eager", "--no-report", "-o", str(tmp_path / "r"), str(SCRIPTS / "compile_waits.py"), str(gate)),
        stdin=terminal.slave, stdout=subprocess.DEVNULL, stderr=terminal.slave, cwd=ROOT, env=env, start_new_session=True,
    )
    os.close(terminal.slave)
    deadline = time.monotonic() + 300
    held = [
        ("aot", r"compiling frame \[0/0\] since \d+s", "forward"),
        ("aot", r"compiling AOT backward \[0/0\] since \d+s", "aot-backward"),
        ("ca", r"compiling frame \[0/0\] since \d+s", "forward"),
        ("ca", r"capturing CA graph \[!0\] since \d+s", "ca-capture"),
        ("ca", r"compiling CA graph \[!0/\d+/0\] since \d+s", "ca-graph"),
    ]
    try:
        for mode, compile_text, name in held:
            terminal.until(rf"cagtool {mode}( \(\d/\d\))?: step 0  CA graphs \d+ +\d+\.\ds  {compile_text}", proc, deadline)
            (gate / f"{name}.go").touch()
        assert proc.wait(timeout=max(deadline - time.monotonic(), 1)) == 0, terminal.seen[-2000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(terminal.master)
    assert sorted(p.name for p in gate.iterdir()) == sorted({f"{name}.reached" for _, _, name in held})
