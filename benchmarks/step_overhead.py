"""What `cagtool run` adds to a steady training step (ca mode, default options, TORCH_TRACE on),
measured in ONE process so that process-to-process noise (+/-15 % here) does not drown a 1 % effect.

The workload trains an MLP with AdamW under compiled autograd (`_enable` around the loop, as both
cagtool and a user enabling CA by hand do). Blocks of steps alternate between:

  on:  cagtool's ca-mode instrumentation installed as `cagtool/capture/run/child.py` installs it: the
       record writer (events.jsonl, flushed per event), the step tracker (backward entry point and
       optimizer hooks), the capture observer (patched AutogradCompilerInstance, verbose logger),
       the structured-log handler on torch.__trace, and the TORCH_TRACE file handler;
  off: all of it removed: plain compiled autograd, no handler on torch.__trace.

Blocks run in ABBA order (on off off on ...) so a drift in machine speed cancels. Each block's step
time is its whole time divided by its steps, an "on" block's time including the writing of every
event line it made (the record writer holds the per-step lines up to 0.5 s and writes those of
several steps at once: the step that writes them, and the lines still held when the block ends,
must count; a median of steps would leave the writes out). Each adjacent on/off pair gives a ratio;
the figure is the median pair ratio with a distribution-free 95 % interval (sign test), robust to
the pairs that other jobs on a shared machine disturb; the geometric mean with a t-interval on the
log ratios is printed beside it. The verdict is "met" only when the median's interval, upper end,
is under the target.

Precision, and what the verdict is judged on. A single process's interval leaves out what differs
between processes: with glibc malloc's dynamic thresholds the on/off ratio of one process read 0.95
[0.93, 0.97] and of the next 1.18 [1.15, 1.20] (same commit, quiet machine), and even with them
pinned (MALLOC_PINS) the processes of one run spread by up to 0.02 while each one's interval was
+/-0.01 (2026-11-23: two runs of the same code, their pairs pooled, read 1.014 and 1.024). So the
measurement runs in `--processes` fresh processes (default 24 since 2026-11-25, malloc pinned, one
Inductor cache), each `--pairs` ABBA pairs of `--block`-step blocks (40 x 40, about 15 s of steps
at 4.5 ms), each process's ratio is the geometric mean of its pair ratios, and the verdict is on the geometric mean
over processes with a 95 % t-interval over processes (each process one sample of what a user's job
would see). The pooled-pairs median (the earlier method) is printed beside it for comparison. Runs differ
from one another too (the VM's state over ten minutes): `--pool` judges several runs' --json files
together, each run one sample (the step-overhead row of benchmarks/README.md).

One piece cannot be toggled: the first-call timer cagtool wraps around each compiled CA graph lives
in torch's CA cache once the graph is captured (captured here with the instrumentation on, as in a
real run), so both variants carry it. Its cost is measured separately (a call through it vs a direct
call) and added to the upper end as "bound incl. first-call timer"; after its first call it calls the
compiled function with no Python frame between (ca_observer.py), so that is little.

    python benchmarks/step_overhead.py                       # Inductor (the default backend), 24 processes x 40 pairs x 40 steps (~11 min)
    python benchmarks/step_overhead.py --backend eager --pairs 60 --block 25
    python benchmarks/step_overhead.py --json out.json
    python benchmarks/step_overhead.py --pool benchmarks/results/step_overhead/*.json  # earlier runs (their --json) together
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parent.parent


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", default="inductor", choices=("inductor", "aot_eager", "eager"))
    parser.add_argument("--pairs", type=int, default=40, help="on/off block pairs (ABBA order)")
    parser.add_argument("--block", type=int, default=40, help="steps per block")
    parser.add_argument("--warmup", type=int, default=30, help="steps before timing (compiles, caches)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1: steadier)")
    parser.add_argument("--width", type=int, default=512, help="the MLP's hidden width: 512 gives ~4.5 ms steps on the 2-core VM, 160 about 1 ms")
    parser.add_argument("--no-torch-trace", action="store_true", help="leave TORCH_TRACE off in the on blocks")
    parser.add_argument("--parts", default="steps,observer,logs,trace",
                        help="what the on blocks install (to find where a cost is): steps (tracker, its events), observer, logs (torch.__trace handler), trace (TORCH_TRACE file); "
                             "or a floor, alone: logger (compiled autograd's verbose logger set, nothing else), clocks (one optimizer post-hook reading perf_counter and "
                             "the two CPU clocks into a list: the least a step line with the same figures costs), hook (that hook without the CPU clocks)")
    parser.add_argument("--processes", type=int, default=24, help="measure in this many processes, one after another; the verdict's interval is over processes (a process's own interval leaves out what differs between them)")
    parser.add_argument("--no-pin-malloc", dest="pin_malloc", action="store_false",
                        help="leave glibc malloc's dynamic mmap/trim thresholds as they are (see the docstring: the on/off ratio then moves from process to process)")
    parser.add_argument("--target", type=float, default=1.02)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--pool", type=Path, nargs="+", metavar="RUN_JSON",
                        help="measure nothing: judge the --json files of earlier runs together (their processes pooled, and each run as one sample)")
    return parser.parse_args()


# glibc malloc's thresholds, fixed (what each process measures with; both variants alike). Left
# dynamic, malloc moves its mmap threshold up as large blocks (this MLP's activations) are freed,
# and whether a step's buffers are then mmapped and page-faulted afresh or reused from the heap
# depends on the allocation history: the on/off ratio of one process read 0.95 [0.93, 0.97] and
# of the next 1.18 [1.15, 1.20], same commit, quiet machine (benchmarks/README.md in git history).
MALLOC_PINS = {"MALLOC_MMAP_THRESHOLD_": "4294967296", "MALLOC_TRIM_THRESHOLD_": "4294967296", "MALLOC_TOP_PAD_": "268435456"}


def sign_test_interval(ratios: list[float]) -> tuple[float, float, float]:
    """The median pair ratio with a distribution-free 95 % interval (sign test: order statistics
    k and n-k+1), which a few pairs hit by the machine's other jobs cannot drag."""
    ordered = sorted(ratios)
    k = max(0, int(len(ordered) / 2 - 1.96 * math.sqrt(len(ordered)) / 2))
    return statistics.median(ordered), ordered[k], ordered[len(ordered) - 1 - k]


def main() -> None:
    args = parse_args()
    if args.pool:
        pool(args.pool, args.target)
        return
    pinned = all(os.environ.get(k) == v for k, v in MALLOC_PINS.items())
    if args.processes > 1 or (args.pin_malloc and not pinned):
        run_processes(args)
    else:
        measure(args)


# Two-sided 95 % t quantiles by degrees of freedom (the interval over processes, below).
T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228, 11: 2.201, 12: 2.179,
       13: 2.160, 14: 2.145, 15: 2.131, 16: 2.120, 17: 2.110, 18: 2.101, 19: 2.093, 20: 2.086, 24: 2.064, 29: 2.045}


def t95(df: int) -> float:
    return T95.get(df) or T95[max(k for k in T95 if k <= df)] if df >= 1 else float("inf")


def between_processes_interval(per_process: list[float]) -> tuple[float, float, float]:
    """The geometric mean of the processes' own ratios with a 95 % t-interval over processes: each
    process counts once, so what differs from one process to the next (its heap, its caches' luck)
    is in the interval, which pooling the pairs leaves out."""
    logs = [math.log(r) for r in per_process]
    mean = statistics.fmean(logs)
    half = t95(len(logs) - 1) * statistics.stdev(logs) / math.sqrt(len(logs)) if len(logs) > 1 else float("inf")
    return math.exp(mean), math.exp(mean - half), math.exp(mean + half)


def run_processes(args: argparse.Namespace) -> None:
    """Run the measurement in args.processes fresh processes (malloc pinned unless asked not to,
    one Inductor cache for all), print each, and judge the target over processes: each process's
    ratio (the geometric mean of its pairs) is one sample of what a user's process would see."""
    child = [sys.executable, str(Path(__file__).resolve()), "--backend", args.backend, "--pairs", str(args.pairs), "--block", str(args.block),
             "--warmup", str(args.warmup), "--threads", str(args.threads), "--width", str(args.width), "--parts", args.parts, "--target", str(args.target), "--processes", "1"]
    child += ["--no-torch-trace"] if args.no_torch_trace else []
    child += [] if args.pin_malloc else ["--no-pin-malloc"]
    results = []
    with tempfile.TemporaryDirectory(prefix="cagtool-step-overhead-") as tmp:
        env = {**os.environ, **(MALLOC_PINS if args.pin_malloc else {}), "TORCHINDUCTOR_CACHE_DIR": str(Path(tmp) / "inductor")}
        for index in range(args.processes):
            out = Path(tmp) / f"p{index}.json"
            print(f"process {index + 1}/{args.processes}:", flush=True)
            subprocess.run([*child, "--json", str(out)], env=env, check=True)
            results.append(json.loads(out.read_text()))
    ratios = [r for result in results for r in result["pair_ratios"]]
    median_ratio, low, high = sign_test_interval(ratios)
    per_process = [result["ratio_geomean"] for result in results]
    ratio, p_low, p_high = between_processes_interval(per_process)
    timer = max(result["first_call_timer_s"] / result["step_median_off_s"] for result in results)
    high_incl_timer = p_high + timer
    verdict = "met" if high_incl_timer <= args.target else ("NOT met" if p_low > args.target else "not shown (interval crosses the target)")
    print(f"{len(results)} processes x {args.pairs} pairs x {args.block} steps, malloc {'pinned' if args.pin_malloc else 'dynamic'}, commit {results[0]['commit']}:")
    print(f"  per-process ratios (geometric mean of each one's pairs): {', '.join(f'{r:.4f}' for r in per_process)}")
    print(f"  over processes: geometric mean {ratio:.4f}  95% t-interval [{p_low:.4f}, {p_high:.4f}]; upper end incl. the first-call timer {high_incl_timer:.4f}")
    print(f"  (pairs pooled, the earlier method: median pair ratio {median_ratio:.4f} [{low:.4f}, {high:.4f}], which leaves the spread between processes out)")
    print(f"  target <= {args.target}: {verdict}")
    if args.json:
        pooled = {"processes": results, "malloc_pinned": args.pin_malloc, "per_process_geomeans": per_process, "ratio_geomean_over_processes": ratio,
                  "ci95_over_processes": [p_low, p_high], "ci95_high_incl_timer": high_incl_timer, "pooled_ratio_median": median_ratio,
                  "pooled_ci95_median": [low, high], "target": args.target, "verdict": verdict}
        args.json.write_text(json.dumps(pooled, indent=2))


def pool(paths: list[Path], target: float) -> None:
    """Several runs' --json files judged together: every process of every run as one sample (the
    run-to-run spread then counts only as far as it shows between processes), and each run's
    geometric mean as one sample (what differs from one run to the next counts in full; few runs,
    so a wide t-interval). Verdicts as a run's, on the upper end plus the largest first-call timer."""
    runs = [json.loads(path.read_text()) for path in paths]
    for path, run in zip(paths, runs):
        low, high = run["ci95_over_processes"]
        print(f"{path.name}: {len(run['processes'])} processes, commit {run['processes'][0]['commit']}, "
              f"{run['ratio_geomean_over_processes']:.4f} [{low:.4f}, {high:.4f}]: {run['verdict']}")
    timer = max(p["first_call_timer_s"] / p["step_median_off_s"] for run in runs for p in run["processes"])
    for label, samples in (("processes pooled", [r for run in runs for r in run["per_process_geomeans"]]),
                           ("runs as samples", [run["ratio_geomean_over_processes"] for run in runs])):
        ratio, low, high = between_processes_interval(samples)
        verdict = "met" if high + timer <= target else ("NOT met" if low > target else "not shown (interval crosses the target)")
        print(f"{label} ({len(samples)}): geometric mean {ratio:.4f}  95% t-interval [{low:.4f}, {high:.4f}]; "
              f"upper end incl. the first-call timer {high + timer:.4f}; target <= {target}: {verdict}")


@dataclass
class Workload:
    """The MLP trained with AdamW, one step at a time, and the switch for cagtool's instrumentation."""

    mode_dir: Path  # the record's mode directory (events.jsonl, the TORCH_TRACE log)
    writer: Any  # cagtool's RecordWriter
    observer: Any  # cagtool's CaptureObserver
    compiler: Callable[[Any], Any]  # what compiled autograd compiles each captured graph with
    step: Callable[[], None]  # one training step
    instrument: Callable[[bool], None]  # True: install the parts; False: remove everything


def workload(backend: str, threads: int, parts: set[str], torch_trace: bool = True, width: int = 512) -> Workload:
    """Everything `cagtool/capture/run/child.py` installs in ca mode, made once and installed or removed
    by `instrument`, in a fresh temporary record; `parts` of "steps" (the tracker, its events),
    "observer", "logs" (the torch.__trace handler), "trace" (the TORCH_TRACE file). Sets TORCH_TRACE
    and imports torch: call it before anything imports torch (also step_calls.py's workload)."""
    tmp = Path(tempfile.mkdtemp(prefix="cagtool-step-overhead-"))
    mode_dir = tmp / "ca"
    mode_dir.mkdir()
    if torch_trace:
        os.environ["TORCH_TRACE"] = str(mode_dir / "trace")  # read when torch is imported, as in child.py
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(tmp / "inductor"))
    os.environ["OMP_NUM_THREADS"] = str(threads)
    sys.path.insert(0, str(REPO))

    import logging

    import torch

    from cagtool.capture.observe.ca_observer import CaptureObserver
    from cagtool.capture.steps.tracker import StepTracker
    from cagtool.capture.observe.torch_logs import TRACE_LOGGER, StructuredLogHandler
    from cagtool.record.writer import RecordWriter
    from cagtool.record.manifest import ModeManifest

    torch.set_num_threads(threads)
    trace_logger = logging.getLogger(TRACE_LOGGER)
    torch_trace_handlers = list(trace_logger.handlers)  # TORCH_TRACE's file handler, if set

    manifest = ModeManifest(mode="ca", argv=["bench"], target={}, cwd=str(tmp), versions={}, backend=backend, dynamic=False, started_at="")
    writer = RecordWriter(mode_dir, manifest)

    def compiler(gm):
        return torch.compile(gm, backend=backend)

    steps = StepTracker(writer, "ca")
    observer = CaptureObserver(writer, steps, compiler)
    handler = StructuredLogHandler(writer, steps)
    floor: list[Any] = []  # the floor's hook handle and what it noted
    noted: list[tuple] = []
    perf_counter, process_time, thread_time = time.perf_counter, time.process_time, time.thread_time

    def clocks_hook(optimizer: Any, args: Any, kwargs: Any) -> None:
        noted.append((perf_counter(), process_time(), thread_time()))

    def bare_hook(optimizer: Any, args: Any, kwargs: Any) -> None:
        noted.append((perf_counter(),))

    def instrument(on: bool) -> None:
        if on:
            if "logs" in parts:
                trace_logger.addHandler(handler)
            if "trace" in parts:
                for h in torch_trace_handlers:
                    trace_logger.addHandler(h)
            trace_logger.setLevel(logging.DEBUG)
            if "steps" in parts:
                steps.install()
            if "observer" in parts:
                observer.install()
            if "logger" in parts:
                torch._C._dynamo.compiled_autograd.set_verbose_logger(observer.logger)
            if "clocks" in parts or "hook" in parts:
                from torch.optim.optimizer import register_optimizer_step_post_hook

                floor.append(register_optimizer_step_post_hook(clocks_hook if "clocks" in parts else bare_hook))
        else:
            while floor:
                floor.pop().remove()
            noted.clear()
            steps.uninstall()
            observer.uninstall()
            torch._C._dynamo.compiled_autograd.set_verbose_logger(None)
            for h in list(trace_logger.handlers):
                trace_logger.removeHandler(h)

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, width), torch.nn.GELU(), torch.nn.Linear(width, width), torch.nn.GELU(), torch.nn.Linear(width, 10))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x, y = torch.randn(64, 256), torch.randint(0, 10, (64,))

    def step() -> None:
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=False)
        loss.backward()
        opt.step()

    return Workload(mode_dir, writer, observer, compiler, step, instrument)


def measure(args: argparse.Namespace) -> None:
    parts = set(args.parts.split(","))
    work = workload(args.backend, args.threads, parts, torch_trace=not args.no_torch_trace, width=args.width)
    mode_dir, writer, observer, compiler, step, instrument = work.mode_dir, work.writer, work.observer, work.compiler, work.step, work.instrument

    import torch
    from torch._dynamo import compiled_autograd as ca

    def block(on: bool) -> float:
        """One block's time per step; an on block's includes writing the lines it made."""
        instrument(on)
        start = time.perf_counter()
        for _ in range(args.block):
            step()
        if on:
            writer.flush_held()
        elapsed = time.perf_counter() - start
        instrument(False)
        return elapsed / args.block

    with ca._enable(compiler, dynamic=False):
        instrument(True)  # the graph is captured (and compiled) with cagtool on, as in a real run
        observer.install_logger()
        for _ in range(args.warmup):
            step()
        writer.flush_held()
        instrument(False)
        for _ in range(args.warmup // 2):
            step()
        blocks: dict[str, list[float]] = {"on": [], "off": []}
        ratios: list[float] = []
        order = [("on", "off"), ("off", "on")]
        for pair in range(args.pairs):
            per_step = {}
            for variant in order[pair % 2]:
                per_step[variant] = block(variant == "on")
                blocks[variant].append(per_step[variant])
            ratios.append(per_step["on"] / per_step["off"])

        # The first-call timer's cost on a call after the first: through it vs direct.
        wrapped = observer._time_first_call(lambda: None, record_id=-1)
        wrapped()
        n = 20000
        t0 = time.perf_counter()
        for _ in range(n):
            wrapped()
        through = (time.perf_counter() - t0) / n
        plain = lambda: None  # noqa: E731
        t0 = time.perf_counter()
        for _ in range(n):
            plain()
        direct = (time.perf_counter() - t0) / n
    writer.close()

    median_ratio, median_low, median_high = sign_test_interval(ratios)
    logs = [math.log(r) for r in ratios]
    mean = statistics.fmean(logs)
    half = 1.96 * statistics.stdev(logs) / math.sqrt(len(logs)) if len(logs) > 1 else float("inf")
    ratio, low, high = math.exp(mean), math.exp(mean - half), math.exp(mean + half)
    off_median = statistics.median(blocks["off"])
    timer_cost = max(0.0, through - direct)
    high_incl_timer = median_high + timer_cost / off_median
    events = sum(1 for _ in (mode_dir / "events.jsonl").open())
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=str(REPO)).stdout.strip()
    verdict = "met" if high_incl_timer <= args.target else ("NOT met" if median_low > args.target else "not shown (interval crosses the target)")
    result = {
        "backend": args.backend, "parts": sorted(parts), "threads": args.threads, "torch_trace": not args.no_torch_trace, "pairs": args.pairs, "block": args.block,
        "step_median_on_s": statistics.median(blocks["on"]), "step_median_off_s": off_median,
        "ratio_median": median_ratio, "ci95_median": [median_low, median_high], "ratio_geomean": ratio, "ci95_geomean": [low, high],
        "first_call_timer_s": timer_cost, "ci95_high_incl_timer": high_incl_timer, "pair_ratios": ratios,
        "pair_ratio_range": [min(ratios), max(ratios)], "events_written": events, "target": args.target, "verdict": verdict,
        "commit": commit, "torch": torch.__version__, "python": platform.python_version(), "load_avg": os.getloadavg(),
    }
    print(f"backend {args.backend}, on = {','.join(sorted(parts))}, {args.threads} thread(s), TORCH_TRACE {'on' if not args.no_torch_trace else 'off'}, "
          f"{args.pairs} pairs x {args.block} steps, commit {commit}, torch {torch.__version__}, load {os.getloadavg()[0]:.2f}")
    print(f"  step time (median over blocks of the block's mean): on {result['step_median_on_s'] * 1e3:.3f} ms, off {off_median * 1e3:.3f} ms; {events} events written")
    print(f"  on/off pair ratio: median {median_ratio:.4f}  95% CI [{median_low:.4f}, {median_high:.4f}]; "
          f"geometric mean {ratio:.4f}  95% CI [{low:.4f}, {high:.4f}]  (pairs {min(ratios):.3f} .. {max(ratios):.3f})")
    print(f"  first-call timer {timer_cost * 1e6:.2f} us/step (in both variants): upper end incl. it {high_incl_timer:.4f}")
    print(f"  target <= {args.target}: {verdict}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
