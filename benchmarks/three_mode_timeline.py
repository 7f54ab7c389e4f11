"""A timeline of one 3-mode `cagtool run`: where the wall time outside the user's
script goes. Each process stamps wall-clock times into one log: cagtool's start, each mode
process's interpreter start, its first import of torch, the user script's start and end (the
script runs inside a small wrapper), its atexit handlers (after the record is closed), when the
parent saw it exit, the summary and report.html. Nothing in cagtool is changed: the stamps come
from a sitecustomize module on PYTHONPATH and from wrapping four of cagtool's functions in the
parent.

    python benchmarks/three_mode_timeline.py                    # transformer_lm.py --steps 24, eager backend
    python benchmarks/three_mode_timeline.py -- sample_scripts/graph_breaks.py 3
    python benchmarks/three_mode_timeline.py --cagtool-arg=--no-report
    python benchmarks/three_mode_timeline.py --bare                  # and the three bare runs, stamped alike

Prints each stamp with the time since cagtool's interpreter started and since the previous stamp,
then the totals: time outside the user's scripts, split into cagtool's start (to the first mode
process), each mode's start-up (process start to script start: interpreter, cagtool's capture
code, torch's import, which a bare `python SCRIPT` pays inside the script), each mode's end
(script end to the parent seeing the exit: closing the record, the interpreter's teardown) and
the end of the run (last exit to cagtool's exit: reading the record, summary, report.html).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_TARGET = [str(ROOT / "sample_scripts" / "transformer_lm.py"), "--steps", "24", "--backend", "eager"]

SITECUSTOMIZE = '''
import os, sys, time
_log = os.environ.get("TIMELINE_LOG")
if _log:
    def _stamp(what):
        with open(_log, "a") as f:
            f.write(f"{time.time():.4f} {os.getpid()} {what}\\n")
    _stamp("interpreter start " + (sys.argv[-1] if sys.argv[-1].endswith("spec.json") else "(cagtool)"))
    _seen = set()
    def _hook(event, args):
        if event == "import" and args[0] == "torch" and "torch" not in _seen:
            _seen.add("torch")
            _stamp("import torch begins")
    sys.addaudithook(_hook)
    import atexit
    atexit.register(lambda: _stamp("atexit (record closed)"))
'''

WRAPPER = '''
import os, runpy, sys, time
def _stamp(what):
    with open(os.environ["TIMELINE_LOG"], "a") as f:
        f.write(f"{time.time():.4f} {os.getpid()} {what}\\n")
_stamp("script start")
sys.argv = sys.argv[1:]
try:
    runpy.run_path(sys.argv[0], run_name="__main__")
finally:
    _stamp("script end")
'''

PARENT = '''
import os, sys, time
def _stamp(what):
    with open(os.environ["TIMELINE_LOG"], "a") as f:
        f.write(f"{time.time():.4f} {os.getpid()} {what}\\n")
import cagtool.capture.run.orchestrate as orchestrate
_settle = orchestrate.settle_mode_record
def settle(mode_dir, code):
    _stamp(f"parent saw {mode_dir.name} exit")
    return _settle(mode_dir, code)
orchestrate.settle_mode_record = settle
import cagtool.commands.summary as summary
_summary = summary.print_run_report
def print_run_report(*args, **kwargs):
    _stamp("summary begins")
    try:
        return _summary(*args, **kwargs)
    finally:
        _stamp("summary printed")
summary.print_run_report = print_run_report
import cagtool.commands.report as report
_report = report.report_after_run
def report_after_run(*args, **kwargs):
    _stamp("report.html begins")
    try:
        return _report(*args, **kwargs)
    finally:
        _stamp("report.html written")
report.report_after_run = report_after_run
import atexit
atexit.register(lambda: _stamp("cagtool exits"))
from cagtool.cli import main
sys.argv = ["cagtool", *sys.argv[1:]]
main()
'''


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", default="eager")
    parser.add_argument("--cagtool-arg", action="append", default=[], help="extra argument for `cagtool run` (repeatable)")
    parser.add_argument("--bare", action="store_true",
                        help="also run the three bare runs (as three_mode_overhead.py runs them) through the same wrapper: "
                             "their interpreter's start to the script's start, and the script's end to the exit")
    parser.add_argument("target", nargs=argparse.REMAINDER, help="SCRIPT [ARGS] after --; default: transformer_lm.py --steps 24 --backend eager")
    args = parser.parse_args()
    target = [a for a in args.target if a != "--"] or DEFAULT_TARGET
    with tempfile.TemporaryDirectory(prefix="three-mode-timeline-") as tmp:
        scratch = Path(tmp)
        (scratch / "site").mkdir()
        (scratch / "site" / "sitecustomize.py").write_text(SITECUSTOMIZE)
        (scratch / "wrapper.py").write_text(WRAPPER)
        (scratch / "parent.py").write_text(PARENT)
        log = scratch / "timeline.log"
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env.update(CI="true", TIMELINE_LOG=str(log), PYTHONPATH=os.pathsep.join(p for p in (str(scratch / "site"), str(ROOT), env.get("PYTHONPATH", "")) if p))
        cmd = [sys.executable, str(scratch / "parent.py"), "run", "--modes", "eager,aot,ca", "--backend", args.backend, *args.cagtool_arg,
               "-o", str(scratch / "run"), str(scratch / "wrapper.py"), str(Path(target[0]).resolve()), *target[1:]]
        started = time.time()
        proc = subprocess.run(cmd, cwd=str(ROOT), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        ended = time.time()
        if proc.returncode != 0:
            raise SystemExit(f"cagtool run failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
        rows = [(float(t), int(pid), what) for t, pid, what in (line.split(" ", 2) for line in log.read_text().splitlines())]
        bare_lines = []
        if args.bare:
            bare = {
                "eager": ([sys.executable, str(scratch / "wrapper.py"), str(Path(target[0]).resolve()), *target[1:]], {"TORCHDYNAMO_DISABLE": "1"}),
                "aot": ([sys.executable, str(scratch / "wrapper.py"), str(Path(target[0]).resolve()), *target[1:]], {}),
                "ca": ([sys.executable, str(scratch / "wrapper.py"), str(ROOT / "benchmarks" / "ca_by_hand.py"), args.backend, str(Path(target[0]).resolve()), *target[1:]], {}),
            }
            for mode, (bare_cmd, extra) in bare.items():
                bare_log = scratch / f"bare-{mode}.log"
                bare_env = {k: v for k, v in env.items() if k != "TORCHDYNAMO_DISABLE"}
                bare_env.update(extra, TIMELINE_LOG=str(bare_log), TORCHINDUCTOR_CACHE_DIR=tempfile.mkdtemp(dir=tmp))
                begin = time.time()
                done = subprocess.run(bare_cmd, cwd=str(ROOT), env=bare_env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
                end = time.time()
                if done.returncode != 0:
                    raise SystemExit(f"bare {mode} failed ({done.returncode}):\n{done.stderr[-2000:]}")
                stamps = {what.split(" (")[0].split(" /")[0]: float(t) for t, _pid, what in (line.split(" ", 2) for line in bare_log.read_text().splitlines())}
                bare_lines.append(
                    f"bare {mode:>5}: {end - begin:.3f} s; interpreter start to script start {stamps['script start'] - stamps['interpreter start']:.3f} s, "
                    f"script {stamps['script end'] - stamps['script start']:.3f} s (torch's import inside), script end to exit {end - stamps['script end']:.3f} s"
                )
    rows.sort()
    t0 = started
    previous = t0
    print(f"{'since start':>11} {'+step':>7}  pid      stamp")
    for t, pid, what in rows:
        print(f"{t - t0:11.3f} {t - previous:+7.3f}  {pid:<8} {what}")
        previous = t
    print(f"{ended - t0:11.3f} {ended - previous:+7.3f}  {'':<8} cagtool's process reaped")
    # Totals outside the user's scripts.
    parent = rows[0][1]
    starts = [t for t, pid, what in rows if what.startswith("interpreter start") and pid != parent]
    script_starts = [t for t, _, what in rows if what == "script start"]
    script_ends = [t for t, _, what in rows if what == "script end"]
    exits = [t for t, _, what in rows if what.startswith("parent saw")]
    if len(starts) == len(script_starts) == len(script_ends) == len(exits) == 3:
        print()
        print(f"cagtool's start to the first mode process: {starts[0] - t0:.3f} s")
        for i, mode in enumerate(("eager", "aot", "ca")):
            handover = ""
            if i < 2:
                gap = starts[i + 1] - exits[i]
                # Since 1438cac the next mode process starts when this one has closed its record,
                # beside its exit; its script starts after the exit (script_starts[i + 1]).
                handover = (f", then {gap:.3f} s to the next mode process" if gap >= 0 else
                            f"; the next mode process started {-gap:.3f} s before this exit, its script {script_starts[i + 1] - exits[i]:.3f} s after it")
            print(f"{mode:>5}: start-up {script_starts[i] - starts[i]:.3f} s (incl. torch's import), end {exits[i] - script_ends[i]:.3f} s" + handover)
        print(f"end of the run (last exit to cagtool reaped): {ended - exits[-1]:.3f} s")
        scripts = sum(e - s for s, e in zip(script_starts, script_ends))
        print(f"total {ended - t0:.3f} s, of which the user's scripts {scripts:.3f} s and everything else {ended - t0 - scripts:.3f} s")
    for line in bare_lines:
        print(line)


if __name__ == "__main__":
    main()
