"""Claiming a run directory: `cagtool run` and `cagtool.capture()` both start a record here.

Two runs started at the same instant into the same `-o` must not both pass a "does it hold a
run?" look and then collide on their first write (the loser would die on a FileExistsError,
exit 4, after overwriting the winner's run.json). The claim is one atomic step instead: the
first mode's directory is created with a plain `mkdir`, which exactly one process can win; the
loser gets the documented usage error. Named runs (no `-o`) claim their timestamped directory
the same way, so two runs in the same second take `-2`, `-3`... instead of sharing one.
"""

from __future__ import annotations

import os
import re
from datetime import datetime
from pathlib import Path

from cagtool.errors import UsageError
from cagtool.record.schema import MODES, RUN_FORMAT, RUN_META_FILE


def holds_run(path: Path) -> bool:
    """A directory another run has claimed: a mode directory or a run.json in it."""
    try:
        return any(p.name in MODES or p.name == RUN_META_FILE for p in path.iterdir())
    except OSError:
        return False


def _already_holds(path: Path) -> UsageError:
    return UsageError(f"{path} already holds a run; choose another -o directory")


def _cannot_write(path: Path, exc: OSError) -> UsageError:
    return UsageError(f"cannot write the run record to {path}: {exc.strerror or exc}")


def _run_around(path: Path) -> Path | None:
    """The cagtool run `path` would be inside (a folder above it whose run.json is a cagtool run's:
    `-o RUN/ca`, `-o RUN/ca/graphs`), or None."""
    from cagtool.errors import CagtoolError
    from cagtool.record.loader import read_json_object

    # As typed and as resolved: a link to a run's mode folder (`-o linkca`) leads inside it too.
    named, real = Path(os.path.abspath(path)), Path(os.path.realpath(path))
    for parent in dict.fromkeys([*named.parents, *real.parents, *([real] if real != named else [])]):
        if not (parent / RUN_META_FILE).is_file():
            continue
        try:
            if read_json_object(parent / RUN_META_FILE, "run record").get("format") == RUN_FORMAT:
                return parent
        except CagtoolError:
            continue
    return None


def claim_run_dir(output: Path | str | None, runs_root: Path | str, label: str, first_mode: str) -> Path:
    """The run directory, with `<run>/<first_mode>` created by this process and no other.

    `output` (the user's `-o`) may exist and hold other files, not another run, and is not inside
    another run's folder (a record written into `RUN/ca` took that mode's place for every reader).
    Without it the directory is `<runs_root>/<label>-<timestamp>[-N]`, the first free N taken atomically."""
    if output is not None:
        path = Path(output)
        if (around := _run_around(path)) is not None:
            raise UsageError(f"{path} is inside the run {around}: a record is not written into another run's folder; "
                             "choose another -o directory")
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise _cannot_write(path, exc) from None
        if holds_run(path):
            raise _already_holds(path)
    else:
        stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
        base = f"{re.sub(r'[^A-Za-z0-9_.-]', '_', label) or 'run'}-{stamp}"
        root = Path(runs_root)
        suffix = 1
        while True:
            path = root / (base if suffix == 1 else f"{base}-{suffix}")
            try:
                path.mkdir(parents=True)
                break
            except FileExistsError:
                suffix += 1
            except OSError as exc:
                raise _cannot_write(path, exc) from None
    try:
        (path / first_mode).mkdir()
    except FileExistsError:
        raise _already_holds(path) from None
    except OSError as exc:
        raise _cannot_write(path, exc) from None
    return path
