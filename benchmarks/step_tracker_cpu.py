"""CPU time the step tracker adds to a training step, in ONE process: blocks of steps alternate
(shuffled order each round) between the tracker installed as the mode process installs it (record
writer included: its events reach events.jsonl) and removed. CPU time (this thread's user+sys,
`time.thread_time`) is what another job on the machine disturbs least, so this can compare two
versions of cagtool on a shared machine where wall-clock A/B cannot; the wall-clock verdict
stays `step_overhead.py`'s, on a quiet machine.

    python benchmarks/step_tracker_cpu.py                     # the steady-state MLP, eager backend
    python benchmarks/step_tracker_cpu.py --cold              # a tiny model, caches flushed between steps
    PYTHONPATH=/path/to/other/checkout python benchmarks/step_tracker_cpu.py   # another version

Two workloads: the MLP of `step_overhead.py` (AdamW, compiled autograd with the given backend,
OMP_NUM_THREADS=1); and `--cold`, a one-parameter model whose step is tiny but runs after a 32 MB
buffer is touched, so the tracker's code runs with caches as cold as after a real step's tensor
work, while the step itself adds little noise: its figure is the tracker's own cost.
Each block's figure is its mean CPU per step (not the median: the record writer writes the waiting
lines of several steps at once, and that step's cost must count). Prints the median per-round
difference (on - off) with a distribution-free 95 % interval.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import statistics
import tempfile
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--block", type=int, default=30, help="steps per block")
    parser.add_argument("--backend", default="eager", choices=("inductor", "aot_eager", "eager"))
    parser.add_argument("--cold", action="store_true", help="tiny model, caches flushed between steps")
    args = parser.parse_args()
    os.environ["OMP_NUM_THREADS"] = "1"
    tmp = Path(tempfile.mkdtemp(prefix="cagtool-tracker-cpu-"))
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(tmp / "inductor"))

    import torch
    from torch._dynamo import compiled_autograd as ca

    import cagtool
    from cagtool.capture.steps import StepTracker
    from cagtool.capture.writer import RecordWriter
    from cagtool.record.manifest import ModeManifest

    torch.set_num_threads(1)
    (tmp / "ca").mkdir()
    writer = RecordWriter(tmp / "ca", ModeManifest(mode="ca", argv=["bench"], target={}, cwd=str(tmp), versions={}, backend=args.backend, dynamic=False, started_at=""))
    tracker = StepTracker(writer, "ca")
    clock = time.thread_time_ns
    torch.manual_seed(0)
    if args.cold:
        param = torch.nn.Parameter(torch.zeros(1))
        opt = torch.optim.SGD([param], lr=0.0)
        flush = torch.zeros(8 * 1024 * 1024)

        def step() -> int:
            flush.add_(1)  # evicts the caches, as a real step's tensor work does
            start = clock()
            (param * 2).sum().backward()
            opt.step()
            return clock() - start
    else:
        model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.GELU(), torch.nn.Linear(512, 512), torch.nn.GELU(), torch.nn.Linear(512, 10))
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        x, y = torch.randn(64, 256), torch.randint(0, 10, (64,))

        def step() -> int:
            start = clock()
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=False)
            loss.backward()
            opt.step()
            return clock() - start

    def compiler(gm):
        return torch.compile(gm, backend=args.backend)

    blocks: dict[str, list[float]] = {"on": [], "off": []}
    rng = random.Random(1)
    with ca._enable(compiler, dynamic=False):
        tracker.install()
        for _ in range(20):
            step()
        tracker.uninstall()
        for _ in range(10):
            step()
        for _ in range(args.rounds):
            for variant in rng.sample(["on", "off"], 2):
                if variant == "on":
                    tracker.install()
                times = [step() for _ in range(args.block)]
                if variant == "on":
                    tracker.uninstall()
                blocks[variant].append(statistics.fmean(times) / 1000)
    writer.close()
    diffs = sorted(a - b for a, b in zip(blocks["on"], blocks["off"]))
    k = max(0, int(len(diffs) / 2 - 1.96 * math.sqrt(len(diffs)) / 2))
    workload = "cold tiny step" if args.cold else f"MLP, {args.backend}"
    print(f"cagtool {Path(cagtool.__file__).resolve().parent.parent} ({workload}), {args.rounds} rounds x {args.block} steps, load {os.getloadavg()[0]:.1f}")
    print(f"  CPU per step: off {statistics.median(blocks['off']):.1f} us, on {statistics.median(blocks['on']):.1f} us; "
          f"tracker adds {statistics.median(diffs):.1f} us [{diffs[k]:.1f}, {diffs[-1 - k]:.1f}] (median of round differences, 95 % CI)")


if __name__ == "__main__":
    main()
