"""CPU time the step tracker adds to a training step, in ONE process: blocks of steps alternate
(shuffled order each round) between the tracker installed as the mode process installs it (record
writer included: its events reach events.jsonl) and removed. CPU time (this thread's user+sys,
`time.thread_time`) is what another job on the machine disturbs least, so this can compare two
versions of cagtool on a shared machine where wall-clock A/B cannot; the wall-clock verdict
stays `step_overhead.py`'s, on a quiet machine.

    python benchmarks/step_tracker_cpu.py                     # the steady-state MLP, eager backend
    python benchmarks/step_tracker_cpu.py --cold              # a tiny model, caches flushed between steps
    PYTHONPATH=/path/to/other/checkout python benchmarks/step_tracker_cpu.py   # another version
    python benchmarks/step_tracker_cpu.py --per-step          # on/off every step: a much narrower interval
    python benchmarks/step_tracker_cpu.py --drain --cold      # the drain and the lines, apart, per step

Two workloads: the MLP of `step_overhead.py` (AdamW, compiled autograd with the given backend,
OMP_NUM_THREADS=1); and `--cold`, a one-parameter model whose step is tiny but runs after a 32 MB
buffer is touched, so the tracker's code runs with caches as cold as after a real step's tensor
work, while the step itself adds little noise: its figure is the tracker's own cost.
Each block's figure is its mean CPU per step (not the median: the record writer writes the waiting
lines of several steps at once, and that step's cost must count). Prints the median per-round
difference (on - off) with a distribution-free 95 % interval.

`--per-step`: the tracker is switched on and off between single steps instead (the backward entry
point and the two optimizer hooks swapped in and out, a few dict operations; the order shuffled in
each round of two steps), and the figure is the median of the on - off differences of each round
plus the writes' CPU (the encoding and `write` of the held lines, timed apart and taken out of the
step they fell in) and the CPU of every other thread (the writer's flusher: with one torch thread
nothing else of ours runs), both averaged over the on steps. The tracker's drain, when a hook runs
it, stays in that step's figure. A block mean carries the MLP step's own spread
(about +/-80 us with 150 rounds); a median of per-step differences does not (about +/-15 us with
2000 rounds). It also splits the MLP step: forward (no tracker code runs in it), backward, optimizer step.

`--drain`: what --per-step leaves out of its medians, the tracker's count of the notes (its drain,
which a hook runs every hold_s / 2 over the notes of all the steps since) and the making of the
lines, each timed apart on the training thread: `--block` steps (default 250, what 0.5 s of 2 ms
steps leaves) are noted with no drain in the hooks, then `drain()` and the writer's flush are timed;
the figures are per step, the median over `--rounds` rounds (default 40, the first 5 left out).
"""

from __future__ import annotations

import argparse
import math
import os
import random
import statistics
import tempfile
import threading
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--block", type=int, default=30, help="steps per block")
    parser.add_argument("--backend", default="eager", choices=("inductor", "aot_eager", "eager"))
    parser.add_argument("--cold", action="store_true", help="tiny model, caches flushed between steps")
    parser.add_argument("--per-step", action="store_true", help="switch the tracker on and off between single steps (default rounds: 2000)")
    parser.add_argument("--drain", action="store_true", help="time the drain and the lines apart (default rounds: 40, block: 250)")
    args = parser.parse_args()
    if args.per_step and args.rounds == parser.get_default("rounds"):
        args.rounds = 2000
    if args.drain:
        args.rounds = 40 if args.rounds == parser.get_default("rounds") else args.rounds
        args.block = 250 if args.block == parser.get_default("block") else args.block
    os.environ["OMP_NUM_THREADS"] = "1"
    tmp = Path(tempfile.mkdtemp(prefix="cagtool-tracker-cpu-"))
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(tmp / "inductor"))

    import torch
    from torch._dynamo import compiled_autograd as ca

    import cagtool
    from cagtool.capture.steps.tracker import StepTracker
    from cagtool.record.writer import RecordWriter
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
            forward = clock()
            opt.zero_grad(set_to_none=False)
            backward = clock()
            loss.backward()
            optimizer = clock()
            opt.step()
            end = clock()
            parts.append((forward - start, optimizer - backward, end - optimizer))
            return end - start

    def compiler(gm):
        return torch.compile(gm, backend=args.backend)

    parts: list[tuple[int, int, int]] = []  # MLP: (forward, backward, optimizer step) CPU of each step
    if args.per_step:
        per_step(args, tracker, writer, step, compiler, parts)
        return
    if args.drain:
        drain_and_lines(args, tracker, writer, step, compiler)
        return
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


def _interval(diffs: list[float]) -> tuple[float, float, float]:
    """Median with its distribution-free 95 % interval (sign test)."""
    diffs = sorted(diffs)
    k = max(0, int(len(diffs) / 2 - 1.96 * math.sqrt(len(diffs)) / 2))
    return statistics.median(diffs), diffs[k], diffs[-1 - k]


def per_step(args: argparse.Namespace, tracker, writer, step, compiler, parts) -> None:
    """--per-step: the tracker on and off between single steps (module docstring)."""
    import torch
    import torch.autograd
    import torch.optim.optimizer as optimizer_module
    from torch._dynamo import compiled_autograd as ca

    import cagtool

    clock = time.thread_time_ns
    written = [0]  # CPU of the writer's writes on the training thread (encoding the held lines, os.write)
    write_held = writer._write_held
    main_thread = threading.get_ident()

    def timed_write_held() -> None:
        if threading.get_ident() != main_thread:  # the flusher's: in the other threads' CPU below
            write_held()
            return
        start = clock()
        write_held()
        written[0] += clock() - start

    writer._write_held = timed_write_held  # its callers look it up on the instance
    plain = torch.autograd._engine_run_backward
    pre_hooks, post_hooks = optimizer_module._global_optimizer_pre_hooks, optimizer_module._global_optimizer_post_hooks
    with ca._enable(compiler, dynamic=False):
        tracker.install()
        wrapper = torch.autograd._engine_run_backward
        pre, post = tracker._hooks.handles if hasattr(tracker, "_hooks") else tracker._handles  # an older cagtool: PYTHONPATH
        pre_hook, post_hook = pre_hooks[pre.id], post_hooks[post.id]

        def switch(on: bool) -> None:
            if on:
                torch.autograd._engine_run_backward = wrapper
                pre_hooks[pre.id], post_hooks[post.id] = pre_hook, post_hook
            else:
                torch.autograd._engine_run_backward = plain
                pre_hooks.pop(pre.id, None)
                post_hooks.pop(post.id, None)

        for _ in range(30):
            step()
        rng = random.Random(1)
        times: dict[bool, list[float]] = {True: [], False: []}
        order: list[bool] = []
        written[0] = 0
        parts.clear()
        process_start, thread_start = time.process_time_ns(), clock()
        for _ in range(args.rounds):
            for on in rng.sample([True, False], 2):
                switch(on)
                before = written[0]
                cpu = step() - (written[0] - before)
                times[on].append(cpu / 1000)
                order.append(on)
        switch(True)
        start = clock()
        writer.flush_held()
        written[0] += clock() - start
        # CPU of every other thread (the writer's flusher: the drain of the tracker's notes and the
        # writes it makes; with one torch thread, nothing else runs)
        others = (time.process_time_ns() - process_start) - (clock() - thread_start)
        tracker.uninstall()
    writer.close()
    median, low, high = _interval([a - b for a, b in zip(times[True], times[False])])
    writes = (written[0] + others) / 1000 / args.rounds
    workload = "cold tiny step" if args.cold else f"MLP, {args.backend}"
    print(f"cagtool {Path(cagtool.__file__).resolve().parent.parent} ({workload}), per step, {args.rounds} rounds, load {os.getloadavg()[0]:.1f}")
    print(f"  CPU per step: off {statistics.median(times[False]):.1f} us; tracker adds {median:.1f} us [{low:.1f}, {high:.1f}] in the step "
          f"+ {writes:.1f} us of writes and other threads ({others / 1000 / args.rounds:.1f} us of it in other threads) = {median + writes:.1f} us "
          "(median of round differences, 95 % CI; writes averaged)")
    if parts:
        for index, name in enumerate(("forward (no tracker code)", "backward", "optimizer step")):
            on = statistics.median(p[index] for p, o in zip(parts, order) if o) / 1000
            off = statistics.median(p[index] for p, o in zip(parts, order) if not o) / 1000
            print(f"    {name}: on {on:.1f} us, off {off:.1f} us ({on - off:+.1f})")


def drain_and_lines(args: argparse.Namespace, tracker, writer, step, compiler) -> None:
    """--drain: the drain and the lines' making and writing, timed apart (module docstring)."""
    from torch._dynamo import compiled_autograd as ca

    import cagtool

    clock = time.thread_time_ns
    drains: list[float] = []
    lines: list[float] = []
    # The lines wait for this flush: the writer's flusher would write them when a block outlasts
    # hold_s / 2 (a busy machine), on its own thread.
    writer.hold_s = 1e6  # (finite: the flusher waits hold_s / 4 between looks)
    with ca._enable(compiler, dynamic=False):
        tracker.install()
        for round_ in range(args.rounds):
            tracker._hook_due = math.inf  # no drain in the hooks (nor in the flusher: it waits for this time too)
            for _ in range(args.block):
                step()
            start = clock()
            tracker.drain()
            drained = clock()
            writer.flush_held()
            done = clock()
            if round_ >= 5:  # the first rounds warm up
                drains.append((drained - start) / args.block / 1000)
                lines.append((done - drained) / args.block / 1000)
        tracker.uninstall()
    writer.close()
    workload = "cold tiny step" if args.cold else f"MLP, {args.backend}"
    print(f"cagtool {Path(cagtool.__file__).resolve().parent.parent} ({workload}), drain and lines, {args.rounds - 5} rounds x {args.block} steps, load {os.getloadavg()[0]:.1f}")
    print(f"  CPU per step: drain {statistics.median(drains):.2f} us (min {min(drains):.2f}), lines made and written {statistics.median(lines):.2f} us "
          f"(min {min(lines):.2f}); together {statistics.median(d + w for d, w in zip(drains, lines)):.2f} us (median of rounds)")


if __name__ == "__main__":
    main()
