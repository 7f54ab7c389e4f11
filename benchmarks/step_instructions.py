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
        collections.deque(itertools.starmap(step, itertools.repeat((), args.steps)), maxlen=0)  # on
        work.writer.flush_held()
        work.instrument(False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", default="inductor", choices=("inductor", "aot_eager", "eager"))
    parser.add_argument("--width", type=int, default=32)
    parser.add_argument("--steps", type=int, default=300, help="steps in each block (off, on)")
    parser.add_argument("--parts", default="steps,observer,logs,trace")
    parser.add_argument("--hold-s", type=float, default=25.0, help="the writer's hold_s under callgrind (0.5 at full speed)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    with tempfile.TemporaryDirectory(prefix="cagtool-step-instructions-") as tmp:
        env = {**os.environ, **ENV, "TORCHINDUCTOR_CACHE_DIR": str(Path(tmp) / "inductor")}
        argv = [sys.executable, str(Path(__file__).resolve()), "--child", "--backend", args.backend, "--width", str(args.width),
                "--parts", args.parts, "--hold-s", str(args.hold_s)]
        subprocess.run([*argv, "--steps", "20"], env=env, check=True)  # fills the Inductor cache at full speed
        argv += ["--steps", str(args.steps)]
        out = Path(tmp) / "callgrind.out"
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


if __name__ == "__main__":
    main()
