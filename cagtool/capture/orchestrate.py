"""A whole `cagtool run`: the run directory, then one fresh process per mode (and repetition),
interleaved, each writing its mode record. One mode failing never stops the others."""

from __future__ import annotations

import getpass
import json
import os
import platform
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

from cagtool.capture.child import STARTUP_ERROR_FILE, ModeSpec
from cagtool.capture.target import Target
from cagtool.capture.writer import write_run_meta
from cagtool.errors import UsageError
from cagtool.record.manifest import RunMeta
from cagtool.record.schema import MODES


@dataclass(frozen=True)
class RunOptions:
    target: Target
    modes: tuple[str, ...] = MODES
    output: Path | None = None  # the run directory; default ./.cagtool/runs/<label>-<timestamp>
    runs_root: Path = Path(".cagtool") / "runs"
    backend: str = "inductor"
    dynamic: bool = False
    steps: int | None = None
    max_time: float | None = None
    repeat: int = 1
    warm_cache: bool = False
    trace_nodes: bool = False
    depyf: bool = False
    torch_trace: bool = True
    cagtool_argv: tuple[str, ...] = ()


@dataclass
class ModeOutcome:
    mode: str  # directory name: "ca", or "ca.2" for the second repetition
    exit_code: int | None
    wall_s: float
    error: str = ""


@dataclass
class RunOutcome:
    path: Path
    outcomes: list[ModeOutcome] = field(default_factory=list)
    interrupted: bool = False
    startup_error: str = ""  # the environment cannot run a mode at all (e.g. torch without CA)

    @property
    def exit_code(self) -> int:
        """The target's own code: the ca mode's if it failed, else the first failing mode's."""
        if self.interrupted:
            return 130
        failing = [o for o in self.outcomes if o.exit_code not in (0, None)]
        for outcome in failing:
            if outcome.mode.split(".")[0] == "ca":
                return int(outcome.exit_code or 1)
        if failing:
            return int(failing[0].exit_code or 1)
        if any(o.exit_code is None for o in self.outcomes):
            return 1
        return 0


def _timestamp() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _machine() -> dict[str, object]:
    return {
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "python": sys.version.split()[0],
    }


def make_run_dir(options: RunOptions) -> Path:
    if options.output is not None:
        path = Path(options.output)
    else:
        stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
        label = re.sub(r"[^A-Za-z0-9_.-]", "_", options.target.label) or "run"
        path = options.runs_root / f"{label}-{stamp}"
        suffix = 1
        while path.exists():
            suffix += 1
            path = options.runs_root / f"{label}-{stamp}-{suffix}"
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / ".write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        raise UsageError(f"cannot write the run record to {path}: {exc.strerror or exc}") from None
    if any(p.name in MODES for p in path.iterdir()):
        raise UsageError(f"{path} already holds a run; choose another -o directory")
    return path


def mode_dirs(options: RunOptions) -> list[str]:
    """Directory names in the order they run: modes interleaved per repetition (ca, ca.2, ...)."""
    names = []
    for rep in range(1, options.repeat + 1):
        for mode in options.modes:
            names.append(mode if rep == 1 else f"{mode}.{rep}")
    return names


def run(options: RunOptions, on_progress: Callable[[str, int, int], None] | None = None) -> RunOutcome:
    run_dir = make_run_dir(options)
    from cagtool import __version__

    import importlib.metadata as md

    meta = RunMeta(
        run_id=run_dir.name,
        created_at=_timestamp(),
        cagtool_argv=list(options.cagtool_argv),
        target=options.target.to_dict(),
        target_argv=[options.target.name, *options.target.args],
        cwd=os.getcwd(),
        modes=mode_dirs(options),
        versions={"cagtool": __version__, "torch": md.version("torch"), "python": platform.python_version()},
        machine=_machine(),
        options={
            "backend": options.backend,
            "dynamic": options.dynamic,
            "steps": options.steps,
            "max_time": options.max_time,
            "repeat": options.repeat,
            "warm_cache": options.warm_cache,
            "user": getpass.getuser(),
        },
    )
    write_run_meta(run_dir, meta)
    outcome = RunOutcome(path=run_dir)
    cache_root = Path(tempfile.mkdtemp(prefix="cagtool-inductor-")) if not options.warm_cache else None
    names = mode_dirs(options)
    try:
        for index, name in enumerate(names, start=1):
            if on_progress is not None:
                on_progress(name, index, len(names))
            result = _run_mode(options, run_dir, name, cache_root, label=f"{name} ({index}/{len(names)})" if len(names) > 1 else name)
            startup_error = run_dir / name / STARTUP_ERROR_FILE
            if startup_error.exists():
                outcome.startup_error = startup_error.read_text().strip()
                outcome.outcomes.append(result)
                break
            outcome.outcomes.append(result)
            meta.mode_exit_codes[name] = result.exit_code
            write_run_meta(run_dir, meta)
            if result.exit_code == 130:
                outcome.interrupted = True
                break
    except KeyboardInterrupt:
        outcome.interrupted = True
    finally:
        meta.status = "interrupted" if outcome.interrupted else "finished"
        meta.ended_at = _timestamp()
        meta.exit_code = outcome.exit_code
        write_run_meta(run_dir, meta)
    return outcome


def _run_mode(options: RunOptions, run_dir: Path, name: str, cache_root: Path | None, label: str) -> ModeOutcome:
    mode = name.split(".")[0]
    mode_dir = run_dir / name
    mode_dir.mkdir()
    spec = ModeSpec(
        mode=mode,
        mode_dir=str(mode_dir),
        target=asdict(options.target),
        backend=options.backend,
        dynamic=options.dynamic,
        max_steps=options.steps,
        max_time=options.max_time,
        trace_nodes=options.trace_nodes,
        depyf=options.depyf,
        torch_trace=options.torch_trace,
        label=label,
    )
    spec_path = mode_dir / "spec.json"
    spec_path.write_text(json.dumps(asdict(spec), indent=2))
    env = dict(os.environ)
    if cache_root is not None:
        # A fresh Inductor cache per mode, so compile times compare like with like.
        env["TORCHINDUCTOR_CACHE_DIR"] = str(cache_root / name)
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "cagtool.capture.child", str(spec_path)], env=env)
    try:
        code = proc.wait()
    except KeyboardInterrupt:
        # The child got the same SIGINT; give it time to finish its record.
        try:
            code = proc.wait(timeout=30)
        except (subprocess.TimeoutExpired, KeyboardInterrupt):
            proc.send_signal(signal.SIGKILL)
            code = proc.wait()
        return ModeOutcome(name, 130, time.perf_counter() - start, "interrupted")
    wall = time.perf_counter() - start
    if code < 0:
        return ModeOutcome(name, 128 - code, wall, f"killed by signal {-code}")
    return ModeOutcome(name, code, wall)
