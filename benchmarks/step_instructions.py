"""What `cagtool run` adds to a steady training step, in instructions: a count the machine's other
load does not move (step_overhead.py's wall-time ratio needs a quiet machine and a dozen processes).

The workload and the on/off switch are step_overhead.py's (ca mode, TORCH_TRACE on, the MLP trained
with AdamW under `compiled_autograd._enable`). After a warm-up with everything on, it runs `--steps`
steps off, then `--steps` on, each block called from inside a C function of CPython's that nothing
else in the steps calls (off: an `itertools.filterfalse` consumed, CPython's `filterfalse_next`; on:
an `itertools.starmap`, `starmap_next`), under valgrind's callgrind with collection only inside
those two functions (`--toggle-collect`), and prints each block's instructions per step (their
inclusive cost) and the difference. Not `min` or `sorted`: torch calls both dozens of times a step,
and callgrind_annotate's inclusive cost of a function counts its nested calls again. The writer's hold_s is scaled up (`--hold-s`) so that a drain and a write fall about as
many steps apart as at full speed (callgrind runs the job some 50x slower).

What a count leaves out: system calls' time in the kernel (the two CPU clocks a step reads:
`strace -f -c` counts them; about 3 us each on the 2-core Firecracker VM, where a system call
traps to the host), and cache misses. Inductor's kernels are built for AVX2 (valgrind 3.19 does
not decode AVX-512): ATEN_CPU_CAPABILITY=avx2 and TORCHINDUCTOR_CPP_MARCH=haswell are set for the
run and its warm-up (a plain run first fills the Inductor cache; under callgrind compiling costs
minutes).

    python benchmarks/step_instructions.py                 # width 32 (~1 ms steps), 300 steps a block (~15 min)
    python benchmarks/step_instructions.py --width 512 --steps 100
    python benchmarks/step_instructions.py --parts steps   # one part on (step_overhead.py's --parts)
    python benchmarks/step_instructions.py --breakdown DIR # where the on block's instructions go

`--breakdown DIR`: the on block runs with the writer's hold_s so long that its hooks only note, and
the drain that counts its notes and the write of its lines run after it, each alone in a marker of
its own (`itertools.dropwhile`, `itertools.takewhile`): each part's instructions a step are
printed (hooks = on - off; drain; write), and callgrind dumps each part separately (dumped at the
next part's marker being made; callgrind's files are kept in DIR), so DIR gets `callgrind_annotate`
of each part, inclusive then exclusive (`<part>-annotate.txt`), and `self-diff.txt`: the exclusive
instructions a step by function, the on parts (hooks, drain, write) minus off, largest first.
"""

from __future__ import annotations

import argparse
import collections
import itertools
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ENV = {"ATEN_CPU_CAPABILITY": "avx2", "TORCHINDUCTOR_CPP_MARCH": "haswell", "PYTHONHASHSEED": "0"}


def child(args: argparse.Namespace) -> None:
    """The steps themselves (run under callgrind by main)."""
    sys.path.insert(0, str(HERE))
    from step_overhead import workload

    work = workload(args.backend, 1, set(args.parts.split(",")), width=args.width)
    from torch._dynamo import compiled_autograd as ca

    work.writer.hold_s = args.hold_s
    step = work.step
    with ca._enable(work.compiler, dynamic=False):
        work.instrument(True)
        work.observer.install_logger()
        for _ in range(30):
            step()
        work.writer.flush_held()
        work.instrument(False)
        for _ in range(5):
            step()
        collections.deque(itertools.filterfalse(lambda i: step(), range(args.steps)), maxlen=0)  # off
        work.instrument(True)
        for _ in range(3):
            step()
        if not args.breakdown:
            collections.deque(itertools.starmap(step, itertools.repeat((), args.steps)), maxlen=0)  # on
            work.writer.flush_held()
            work.instrument(False)
            return
        work.writer.hold_s = 1e9  # the hooks only note: no drain, no write in the block
        work.writer.flush_held()  # the drain in it sets the hooks' next due time by that hold_s
        tracker_drain = work.writer.source
        collections.deque(itertools.starmap(step, itertools.repeat((), args.steps)), maxlen=0)  # on: the hooks
        collections.deque(itertools.dropwhile(lambda i: tracker_drain(), [0]), maxlen=0)  # the drain
        collections.deque(itertools.takewhile(lambda i: work.writer.write_queued(), [0]), maxlen=0)  # the write
        work.writer.hold_s = args.hold_s
        work.instrument(False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", default="inductor", choices=("inductor", "aot_eager", "eager"))
    parser.add_argument("--width", type=int, default=32)
    parser.add_argument("--steps", type=int, default=300, help="steps in each block (off, on)")
    parser.add_argument("--parts", default="steps,observer,logs,trace")
    parser.add_argument("--hold-s", type=float, default=25.0, help="the writer's hold_s under callgrind (0.5 at full speed)")
    parser.add_argument("--breakdown", type=Path, metavar="DIR", help="the on block's parts apart, and callgrind_annotate of each into DIR")
    parser.add_argument("--summarise", action="store_true", help="with --breakdown: measure nothing, summarise DIR's callgrind files again")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    if args.breakdown and args.summarise:
        summarise(args, _dumps(args.breakdown))
        return
    with tempfile.TemporaryDirectory(prefix="cagtool-step-instructions-") as tmp:
        env = {**os.environ, **ENV, "TORCHINDUCTOR_CACHE_DIR": str(Path(tmp) / "inductor")}
        argv = [sys.executable, str(Path(__file__).resolve()), "--child", "--backend", args.backend, "--width", str(args.width),
                "--parts", args.parts, "--hold-s", str(args.hold_s)]
        subprocess.run([*argv, "--steps", "20"], env=env, check=True)  # fills the Inductor cache at full speed
        argv += ["--steps", str(args.steps)]
        out = Path(tmp) / "callgrind.out"
        if args.breakdown:
            breakdown(args, argv, env)
            return
        subprocess.run(["setarch", "-R", "valgrind", "--tool=callgrind", "--collect-atstart=no", "--toggle-collect=starmap_next",
                        "--toggle-collect=filterfalse_next", f"--callgrind-out-file={out}", *argv], env=env, check=True, stderr=subprocess.DEVNULL)
        text = subprocess.run(["callgrind_annotate", "--inclusive=yes", str(out)], capture_output=True, text=True, check=True).stdout
    counts = {}
    for name, block in (("starmap_next", "on"), ("filterfalse_next", "off")):
        match = re.search(r"^\s*([\d,]+) \(.*:" + name + r" \[", text, re.M)
        counts[block] = int(match.group(1).replace(",", "")) / args.steps if match else float("nan")
    on, off = counts["on"], counts["off"]
    print(f"width {args.width}, {args.steps} steps a block, on = {args.parts}: instructions a step off {off:,.0f}, on {on:,.0f}, "
          f"+{on - off:,.0f} ({on / off:.4f}x)")


# The marker each part's instructions are collected in, and the constructor of the next part's
# marker, where callgrind dumps the part and starts the next from zero.
PARTS = (("off", "filterfalse_next", "itertools_starmap"), ("hooks", "starmap_next", "itertools_dropwhile"),
         ("drain", "dropwhile_next", "itertools_takewhile"), ("write", "takewhile_next", None))


def _function_counts(text: str) -> dict[str, int]:
    """callgrind_annotate's rows: function -> instructions."""
    counts: dict[str, int] = {}
    table = text.split("file:function", 1)[-1].split("\n\n", 2)
    rows = table[1] if len(table) > 1 and not table[0].strip("- \n") else table[0]
    for match in re.finditer(r"^\s*([\d,]+) (?:\([^)]*\)\s+)?(\S.*?)\s*(?:\[.*\])?$", rows, re.M):
        name = match.group(2)
        counts[name] = counts.get(name, 0) + int(match.group(1).replace(",", ""))
    return counts


def breakdown(args: argparse.Namespace, argv: list[str], env: dict[str, str]) -> None:
    """The on block's parts apart (the module docstring, `--breakdown`)."""
    toggles = [f"--toggle-collect={marker}" for _, marker, _ in PARTS]
    dumps = [f"--dump-before={after}" for _, _, after in PARTS if after]
    out = args.breakdown / "callgrind.out"
    args.breakdown.mkdir(parents=True, exist_ok=True)
    subprocess.run(["setarch", "-R", "valgrind", "--tool=callgrind", "--collect-atstart=no", *toggles, *dumps,
                    f"--callgrind-out-file={out}", *argv, "--breakdown", str(args.breakdown)],
                   env=env, check=True, stderr=subprocess.DEVNULL)
    summarise(args, _dumps(args.breakdown))


def _dumps(folder: Path) -> list[Path]:
    """callgrind's files in the order written: its numbered dumps, then the last (the unnumbered file)."""
    return [*sorted(folder.glob("callgrind.out.*"), key=lambda p: int(p.suffix[1:])), folder / "callgrind.out"]


def summarise(args: argparse.Namespace, dumps: list[Path]) -> None:
    """Each part's instructions from callgrind's dumps (a part may span several: torch makes the
    next marker's iterator itself now and then, which dumps too), its annotations, and the diff."""
    parts: dict[str, tuple[int, dict[str, int]]] = {}
    texts: dict[str, list[str]] = {}
    found_in: list[tuple[Path, str, int, str]] = []
    for dump in dumps:
        inclusive = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--threshold=100", str(dump)], capture_output=True, text=True).stdout
        found = []
        for name, marker, _ in PARTS:
            match = re.search(r"^\s*([\d,]+) (?:\([^)]*\)\s+)?\S*:" + marker + r" \[", inclusive, re.M)
            if match:
                found.append((name, int(match.group(1).replace(",", ""))))
        # A marker's function run inside another part (torch calls takewhile in a step) toggles
        # collection off and on again around itself: the part is the marker with the most.
        for name, count in sorted(found, key=lambda f: f[1])[-1:]:
            found_in.append((dump, name, count, inclusive))
    # The markers' functions run in the warm-up too (imports, compiles): those dumps are left out,
    # a block's are its steps' (under 1 % of a part's largest dump: not a block of steps).
    largest = {name: max(c for _, n, c, _ in found_in if n == name) for _, name, _, _ in found_in}
    for dump, name, count, inclusive in found_in:
        if count < largest[name] / 100:
            continue
        exclusive = subprocess.run(["callgrind_annotate", "--threshold=100", str(dump)], capture_output=True, text=True).stdout
        texts.setdefault(name, []).append(f"== {dump.name}\n{inclusive}\n== exclusive\n{exclusive}")
        total, functions = parts.get(name, (0, {}))
        for function, n in _function_counts(exclusive).items():
            functions[function] = functions.get(function, 0) + n
        parts[name] = (total + count, functions)
    for name, chunks in texts.items():
        (args.breakdown / f"{name}-annotate.txt").write_text("\n".join(chunks))
    per_step = {name: parts[name][0] / args.steps for name in parts}
    print(f"width {args.width}, {args.steps} steps, on = {args.parts}: instructions a step off {per_step.get('off', 0):,.0f}; "
          f"hooks +{per_step.get('hooks', 0) - per_step.get('off', 0):,.0f}, drain {per_step.get('drain', 0):,.0f}, write {per_step.get('write', 0):,.0f}")
    off = parts.get("off", (0, {}))[1]
    on: dict[str, int] = {}
    for name in ("hooks", "drain", "write"):
        for function, count in parts.get(name, (0, {}))[1].items():
            on[function] = on.get(function, 0) + count
    diff = [((on.get(function, 0) - off.get(function, 0)) / args.steps, function) for function in {**off, **on}]
    # A dump charges the stack it is taken in (main, the interpreter's entry...) each part's whole
    # count, as if exclusive: those rows are left out.
    whole = {function for name, (count, functions) in parts.items() for function, n in functions.items() if n >= count * 0.9}
    rows = [f"{d:>12,.0f}  {function}" for d, function in sorted(diff, reverse=True) if abs(d) >= 50 and function not in whole]
    (args.breakdown / "self-diff.txt").write_text(f"exclusive instructions a step, hooks + drain + write minus off ({args.steps} steps)\n" + "\n".join(rows) + "\n")
    print("\n".join(rows[:40]))


if __name__ == "__main__":
    main()
