"""What Python code cagtool runs in a steady training step: every call, counted, with the
instrumentation on and off. A count is exact where a time is noise (step_overhead.py needs 24
processes to see 1 %), so this answers "which part costs per step" and guards against a part that
starts running per step unnoticed.

The workload and the on/off switch are step_overhead.py's (one process, ca mode, TORCH_TRACE on,
the MLP trained with AdamW under `compiled_autograd._enable`): the record writer, the step tracker,
the capture observer, the structured-log handler and TORCH_TRACE's file handler, installed as
`cagtool/capture/run/child.py` installs them, or all removed. After a warm-up with everything on (the
graph is captured then, as in a real run), it counts `--steps` steps off, on, and off again under
`sys.setprofile` ("call": a Python function, "c_call": a builtin or a C method called from Python),
and prints the calls a step that differ between on and off, by (file, function), most first.
Calls made from C++ without Python frames between (the autograd engine running a hook) show as
the Python function they enter.

    python benchmarks/step_calls.py                      # Inductor (the default backend), 200 steps
    python benchmarks/step_calls.py --backend eager --steps 500
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", default="inductor", choices=("inductor", "aot_eager", "eager"))
    parser.add_argument("--steps", type=int, default=200, help="steps counted in each of off, on, off")
    parser.add_argument("--top", type=int, default=40, help="rows to print")
    args = parser.parse_args()

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from step_overhead import workload

    work = workload(args.backend, 1, {"steps", "observer", "logs", "trace"})  # before torch is imported: TORCH_TRACE
    writer, observer, step, instrument = work.writer, work.observer, work.step, work.instrument

    import torch
    from torch._dynamo import compiled_autograd as ca

    def count(on: bool) -> collections.Counter:
        instrument(on)
        for _ in range(5):
            step()
        calls: collections.Counter = collections.Counter()
        repo = str(REPO) + os.sep

        def profile(frame, event, arg) -> None:
            if event == "call":
                code = frame.f_code
                calls[(code.co_filename.replace(repo, "").split("site-packages" + os.sep)[-1], code.co_name)] += 1
            elif event == "c_call":
                calls[("(builtin)", getattr(arg, "__qualname__", repr(arg)))] += 1

        sys.setprofile(profile)
        for _ in range(args.steps):
            step()
        if on:
            writer.flush_held()  # the notes and lines still held: counted and written, as they would be
        sys.setprofile(None)
        instrument(False)
        return calls

    with ca._enable(work.compiler, dynamic=False):
        instrument(True)
        observer.install_logger()
        for _ in range(10):
            step()
        writer.flush_held()
        instrument(False)
        off, on, off_again = count(False), count(True), count(False)
    writer.close()

    n = args.steps
    print(f"backend {args.backend}, {n} steps each, torch {torch.__version__}")
    print(f"Python calls a step: off {sum(off.values()) / n:.2f}, on {sum(on.values()) / n:.2f}, off again {sum(off_again.values()) / n:.2f}")
    by_part: collections.Counter = collections.Counter()
    rows = sorted(((on[k] - off[k]) / n, k) for k in set(on) | set(off) if on[k] != off[k])
    for delta, (where, _) in rows:
        by_part[where] += delta
    print("on minus off, a step, by file: " + ", ".join(f"{where} {delta:+.2f}" for where, delta in by_part.most_common()))
    print(f"on minus off, a step, by function ({len(rows)} differ; the first {args.top}):")
    for delta, (where, name) in sorted(rows, key=lambda row: (-abs(row[0]), row[1]))[: args.top]:
        print(f"  {delta:+8.2f}  {where}: {name}")


if __name__ == "__main__":
    main()
