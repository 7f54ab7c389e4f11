"""Where the step tracker's cost in a training step goes, piece by piece, in a continuous run (not
switched on and off: the hooks, the drain and the writes run as in a real job).

For each tree (a git revision, or the working tree), a copy of its `cagtool/` gets perf_counter_ns
counters (in capture/steps/hooks.py and tracker.py where the tracker is in named parts, in the one
tracker.py before) around the tracker's own code: the backward entry before the engine call ("pre") and
after it ("post", which includes the drain and the write when they fall there), and the two
optimizer hooks ("opt_pre", "opt_post", the latter also including a drain when due); and, as parts
of "post" and "opt_post" (not added to the total), the drains the hooks run when due ("drain", the
write included) and their writes alone ("write": numbering, making the lines, os.write). A fresh
process per tree and round then trains the MLP of step_overhead.py (AdamW, compiled autograd with
the eager backend, one torch thread) for `--steps` steps after a warm-up, with the record writer
and the tracker installed, and prints each piece's time per step. Rounds alternate the trees, so
a drift in machine speed falls on both.

    python benchmarks/step_hook_pieces.py                          # the working tree, 3 rounds
    python benchmarks/step_hook_pieces.py --rev cc6e6f8 --rev HEAD --rounds 4
    python benchmarks/step_hook_pieces.py --hold-s 0.1 --hold-s 0.5 # the working tree, writer.HOLD_S set in each copy
    python benchmarks/step_hook_pieces.py --floor                  # and a copy whose drain only drops the notes

Each tree is measured with glibc malloc's thresholds pinned, as step_overhead.py measures (its
MALLOC_PINS; `--no-pin-malloc` leaves them): left dynamic, a process's step time moves by 10-15 %
from one process to the next, and the pieces with it.

2026-11-24 00:26 UTC (2-core VM, quiet), `--rev cc6e6f8 --rev 0533ffb --rounds 4`: total per
step 63-90 us (mean 79) before, 55-66 (mean 60) after (grad_fn read when asked, the loss read by the
drain, drains every hold_s / 2):
see benchmarks/README.md in git history (before the one-table README). 2026-11-24 03:30 UTC (HEAD 6efffa6, `--rounds 3`): total 57-67 us,
of which drain 31-35 (write 16-18). 2026-11-25 18:25 UTC (malloc pinned), `--rev cc314b7
--rev HEAD --floor --rounds 3` (HEAD 3d4f3e1: a step's three lines one entry, HOLD_S 0.5, the solo
slot): drain 25-32 before, 17-19 after; write 12-16 before, 7-8 after; the hooks alone (drain a
no-op) 17-37 us a step with either. `--hold-s 0.1 --hold-s 0.5 --rounds 3` at 3d4f3e1: drain 30-31
vs 19-20, write 15-16 vs 8. benchmarks/README.md in git history.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _timed_hook(name: str, indent: str = "        ") -> tuple[str, str]:
    """The patch that times the optimizer hook `name` (pre_hook, post_hook) as "opt_pre" / "opt_post"."""
    anchor = f"{indent}def {name}(optimizer, args, kwargs):\n"
    key = "opt_" + name.split("_")[0]
    return anchor, (f"{anchor}{indent}    _t = pc()\n{indent}    try:\n{indent}        return {name}_(optimizer, args, kwargs)\n"
                    f"{indent}    finally:\n{indent}        PROF[\"{key}\"] += pc() - _t\n\n{indent}def {name}_(optimizer, args, kwargs):\n")


# (anchor in capture/steps/tracker.py, replacement): the counters. Each anchor must occur exactly once.
PATCHES = [
    ('''        def _engine_run_backward(t_outputs, *args, **kwargs):
''', '''        PROF = tracker.prof = {"pre": 0, "post": 0, "opt_pre": 0, "opt_post": 0, "drain": 0, "write": 0, "n": 0}
        pc = time.perf_counter_ns

        def _engine_run_backward(t_outputs, *args, **kwargs):
            _t0 = pc()
'''),
    ('''            limit = False
            try:
                attach_logging_hooks''', '''            limit = False
            PROF["pre"] += pc() - _t0
            try:
                attach_logging_hooks'''),
    ('''                    torch._C._remove_obj_from_tls("context")
            finally:
                if started:''', '''                    torch._C._remove_obj_from_tls("context")
            finally:
                _t1 = pc()
                if started:'''),
    ('''                    except Exception as exc:  # noqa: BLE001 - the recorder never fails the script's backward
                        tracker.note_error(exc)
            if limit:''', '''                    except Exception as exc:  # noqa: BLE001 - the recorder never fails the script's backward
                        tracker.note_error(exc)
                PROF["post"] += pc() - _t1
                PROF["n"] += 1
            if limit:'''),
    *(_timed_hook(name) for name in ("pre_hook", "post_hook")),
    # Parts of "post" and "opt_post" (not added to the total): the drains the hooks run when due
    # ("drain", its write included) and that write alone ("write": numbering, lines, os.write).
    ('''                with tracker._lock:
                    append(entry)
                    return tracker.drain(live=entry, write=write)
''', '''                _t = pc()
                with tracker._lock:
                    append(entry)
                    try:
                        return tracker.drain(live=entry, write=write)
                    finally:
                        PROF["drain"] += pc() - _t
'''),
    ('''                        writer.write_queued()  # in the hook: the lines of the last hold_s / 2 or more, in one write
''', '''                        _t = time.perf_counter_ns()
                        writer.write_queued()
                        self.prof["write"] += time.perf_counter_ns() - _t
'''),
]


# The same counters where the tracker is in named parts (capture/steps/hooks.py holds the hooks,
# tracker.py the drain): {file name: [(anchor, replacement)]}.
HOOKS_PATCHES = [
    ("""    def _engine_run_backward(t_outputs, *args, **kwargs):
""", """    PROF = tracker.prof = {"pre": 0, "post": 0, "opt_pre": 0, "opt_post": 0, "drain": 0, "write": 0, "n": 0}
    pc = time.perf_counter_ns

    def _engine_run_backward(t_outputs, *args, **kwargs):
        _t0 = pc()
"""),
    ("""        limit = False
        returned = False
        try:
            attach_logging_hooks""", """        limit = False
        returned = False
        PROF["pre"] += pc() - _t0
        try:
            attach_logging_hooks"""),
    ("""                torch._C._remove_obj_from_tls("context")
        finally:
            if call is not None:""", """                torch._C._remove_obj_from_tls("context")
        finally:
            _t1 = pc()
            if call is not None:"""),
    ("""                except Exception as exc:  # noqa: BLE001 - the recorder never fails the script's backward
                    tracker.note_error(exc)
        if limit:""", """                except Exception as exc:  # noqa: BLE001 - the recorder never fails the script's backward
                    tracker.note_error(exc)
            PROF["post"] += pc() - _t1
            PROF["n"] += 1
        if limit:"""),
    *(_timed_hook(name, "    ") for name in ("pre_hook", "post_hook")),
    ("""            with tracker._lock:
                append(note)
                return tracker.drain(live=note, write=write)
""", """            _t = pc()
            with tracker._lock:
                append(note)
                try:
                    return tracker.drain(live=note, write=write)
                finally:
                    PROF["drain"] += pc() - _t
"""),
]
NAMED_PARTS_PATCHES = {"hooks.py": HOOKS_PATCHES, "tracker.py": [PATCHES[-1]]}

WORKLOAD = r'''
import os, sys, tempfile, time
from pathlib import Path
os.environ["OMP_NUM_THREADS"] = "1"
import torch
torch.set_num_threads(1)
from torch._dynamo import compiled_autograd as ca
try:
    from cagtool.capture.steps.tracker import StepTracker
except ImportError:  # a --rev whose tracker is the module capture/steps.py
    from cagtool.capture.steps import StepTracker
from cagtool.record.writer import RecordWriter
from cagtool.record.manifest import ModeManifest
tmp = Path(tempfile.mkdtemp(prefix="cagtool-hook-pieces-"))
(tmp / "ca").mkdir()
manifest = ModeManifest(mode="ca", argv=["bench"], target={}, cwd=str(tmp), versions={}, backend="eager", dynamic=False, started_at="")
writer = RecordWriter(tmp / "ca", manifest)
tracker = StepTracker(writer, "ca")
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.GELU(), torch.nn.Linear(512, 512), torch.nn.GELU(), torch.nn.Linear(512, 10))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
x, y = torch.randn(64, 256), torch.randint(0, 10, (64,))
steps = int(sys.argv[1])

def step():
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad(set_to_none=False)
    loss.backward()
    opt.step()

with ca._enable(lambda gm: torch.compile(gm, backend="eager"), dynamic=False):
    tracker.install()
    for _ in range(50):
        step()
    for key in tracker.prof:
        tracker.prof[key] = 0
    start = time.perf_counter()
    for _ in range(steps):
        step()
    per_step = (time.perf_counter() - start) / steps
    writer.flush_held()
n = tracker.prof.pop("n")
pieces = {k: v / n / 1000 for k, v in tracker.prof.items()}
total = sum(v for k, v in pieces.items() if k not in ("drain", "write"))
print(f"step {per_step * 1e6:.0f} us; per step: " + ", ".join(f"{k} {v:.1f}" for k, v in pieces.items()) + f"; total {total:.1f} us")
'''


# --floor: the drain drops the notes and does nothing else (no count, no line, no write): what the
# hooks cost alone.
FLOOR_PATCH = ("""        raw = self._raw
        if not raw:
            return False
""", """        raw = self._raw
        if not raw:
            return False
        del raw[:]
        self._hook_due = time.perf_counter() + self.writer.hold_s / 2
        return False
""")


def make_tree(rev: str | None, into: Path, hold_s: float | None = None, floor: bool = False) -> Path:
    """A copy of `cagtool/` at `rev` (None: the working tree), instrumented; with writer.HOLD_S set
    to `hold_s`, and the drain reduced to dropping the notes (`floor`), when asked."""
    into.mkdir(parents=True)
    if rev is None:
        subprocess.run(["cp", "-r", str(REPO / "cagtool"), str(into)], check=True)
    else:
        archive = subprocess.run(["git", "archive", rev, "cagtool"], cwd=REPO, capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    if hold_s is not None:
        writer = into / "cagtool" / "record" / "writer.py"
        if not writer.exists():  # a --rev from before the writer moved to record/
            writer = into / "cagtool" / "capture" / "writer.py"
        text, count = re.subn(r"(?m)^HOLD_S = .*$", f"HOLD_S = {hold_s!r}", writer.read_text())
        if count != 1:
            raise SystemExit(f"step_hook_pieces: {rev or 'the working tree'}: writer.py has no one HOLD_S line")
        writer.write_text(text)
    steps = into / "cagtool" / "capture" / "steps"
    if (steps / "hooks.py").exists():  # the tracker in named parts
        files = {steps / name: patches for name, patches in NAMED_PARTS_PATCHES.items()}
    else:
        path = steps / "tracker.py"
        if not path.exists():  # a --rev whose tracker is the module capture/steps.py
            path = into / "cagtool" / "capture" / "steps.py"
        files = {path: list(PATCHES)}
    if floor:
        files[path if not (steps / "hooks.py").exists() else steps / "tracker.py"].append(FLOOR_PATCH)
    for path, patches in files.items():
        text = path.read_text()
        for anchor, replacement in patches:
            if text.count(anchor) != 1:
                raise SystemExit(f"step_hook_pieces: {rev or 'the working tree'}: {path.name} no longer has the anchor {anchor.strip()[:60]!r}")
            text = text.replace(anchor, replacement)
        path.write_text(text)
    return into


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rev", action="append", help="a git revision to measure (repeatable); default: the working tree")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=1500)
    parser.add_argument("--hold-s", type=float, action="append", help="writer.HOLD_S in the copies (repeatable: one variant each)")
    parser.add_argument("--floor", action="store_true", help="also a copy of each whose drain only drops the notes")
    parser.add_argument("--no-pin-malloc", dest="pin_malloc", action="store_false", help="leave glibc malloc's thresholds dynamic")
    args = parser.parse_args()
    variants = [(rev, hold, floor) for rev in (args.rev or [None]) for hold in (args.hold_s or [None])
                for floor in ((False, True) if args.floor else (False,))]
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from step_overhead import MALLOC_PINS

    env = {**os.environ, **(MALLOC_PINS if args.pin_malloc else {})}
    with tempfile.TemporaryDirectory(prefix="cagtool-hook-pieces-") as tmp:
        trees = {}
        for i, (rev, hold, floor) in enumerate(variants):
            name = (rev or "working tree") + ("" if hold is None else f", HOLD_S {hold}") + (", drain a no-op" if floor else "")
            trees[name] = make_tree(rev, Path(tmp) / f"t{i}", hold, floor)
        for round_ in range(args.rounds):
            for name, tree in trees.items():
                done = subprocess.run([sys.executable, "-c", WORKLOAD, str(args.steps)], env={**env, "PYTHONPATH": str(tree)},
                                      capture_output=True, text=True, cwd=tree)
                if done.returncode:
                    raise SystemExit(f"step_hook_pieces: {name} failed:\n{done.stderr[-2000:]}")
                print(f"round {round_ + 1}, {name}: {done.stdout.strip()}", flush=True)


if __name__ == "__main__":
    main()
