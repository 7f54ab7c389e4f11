"""Compile CPU of one job as plain python runs it and as cagtool watches it: what a handler on
torch's structured logger (`torch.__trace`) costs, and what cagtool's way of reading Dynamo costs.

Each repetition runs the same small training job once per variant, each in a fresh process, in
turn (so all variants see the same machine load), with a fresh Inductor cache per process:

    plain      python, no TORCH_TRACE                                   (the job as written)
    handler    a no-op logging.Handler on torch.__trace                 (what cagtool did before)
    trace      TORCH_TRACE set                                          (--torch-trace)
    taps       cagtool's Dynamo taps alone, no handler, no compile artifacts (record_artifacts=False)
    artifacts  the taps with each compile's artifacts (graphs, guards, stack, output code)
    cagtool    the taps with artifacts, the step tracker and the CA observer (cagtool run's default)

The figure is the process CPU time (time.process_time) spent in the job's first two training steps
(the compiles: forward, AOT backward; with --ca, the compiled-autograd graph), measured inside the
job, torch's own measure of its structured logging (`structured_logging_overhead_us` of the
compilation metrics, wall time), the thread CPU time spent inside cagtool's taps (what they
read and write, the artifacts included), and torch's own counters (graph breaks, frames, unique graphs), which must be equal in every
variant. Prints the median and range per variant and the median ratio to plain.

    python benchmarks/compile_cpu.py --reps 5 [--backend inductor|aot_eager] [--ca] [--only taps,artifacts]
    python benchmarks/compile_cpu.py --reps 2 --instructions --ca --backend aot_eager --only plain,cagtool

`--instructions` counts the instructions the measured steps execute (valgrind's callgrind, switched on
and off around them by the job): a ratio the machine's load does not move, about 50 times slower.
cagtool's writer is made with its hold_s (and so its flusher thread's wake-up period, hold_s / 4,
and the training thread's write of the held lines, every hold_s / 2) scaled by `--slowdown`, so
that they come about as often per instruction of the job as in a real run: they go by wall time,
and under callgrind the steps take some 30 times their CPU at full speed in CPU time, more in wall
time on a loaded machine (50: the default). Unscaled, the writer's thread alone counted 0.05-0.08 G
of a 20 G job; scaled by 30 or by 50 it counts a few millions either way. Each variant also runs
once at full speed after its count, and both slowdowns are printed. `--keep DIR` keeps callgrind's
output files (compare two with `callgrind_annotate --inclusive=yes`).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

JOB = r'''
import json, logging, os, sys, time
variant, backend, use_ca = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
import torch
if variant == "handler":
    class _NoOp(logging.Handler):
        def emit(self, record):
            pass
    trace = logging.getLogger("torch.__trace")
    trace.addHandler(_NoOp())
    trace.setLevel(logging.DEBUG)
elif variant in ("taps", "artifacts", "cagtool"):
    sys.path.insert(0, os.environ["CAGTOOL_ROOT"])
    from pathlib import Path
    from cagtool.capture.observe import dynamo_taps
    from cagtool.capture.observe.ca_observer import CaptureObserver
    from cagtool.capture.observe.torch_logs import StructuredLogHandler
    from cagtool.capture.steps.tracker import StepTracker
    from cagtool.record.writer import HOLD_S, RecordWriter
    from cagtool.record.manifest import ModeManifest
    manifest = ModeManifest(mode="ca" if use_ca else "aot", argv=[], target={}, cwd=".", versions={}, backend=backend, dynamic=False, started_at="")
    writer = RecordWriter(Path(os.environ["RECORD_DIR"]), manifest, hold_s=HOLD_S * float(os.environ.get("HOLD_SCALE", "1")))
    steps = StepTracker(writer, manifest.mode)
    taps_cpu = [0.0]

    class TimedTaps(dynamo_taps.DynamoTaps):
        def _record(self, make):
            start = time.thread_time()
            try:
                super()._record(make)
            finally:
                taps_cpu[0] += time.thread_time() - start

    TimedTaps(StructuredLogHandler(writer, steps), record_artifacts=variant != "taps").install()
    if variant == "cagtool":
        steps.install()
        CaptureObserver(writer, steps, None).install()


class Block(torch.nn.Module):
    def __init__(self, d):
        super().__init__()
        self.norm = torch.nn.LayerNorm(d)
        self.attn = torch.nn.MultiheadAttention(d, 4, batch_first=True)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(d, 4 * d), torch.nn.GELU(), torch.nn.Linear(4 * d, d))

    def forward(self, x):
        h = self.norm(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.norm(x))


def loss_fn(out, target):
    print("", end="")  # a graph break in the loss, as library loss functions often have
    return torch.nn.functional.mse_loss(out, target)


torch.manual_seed(0)
model = torch.nn.Sequential(*[Block(64) for _ in range(4)])
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
step = torch.compile(lambda x, y: loss_fn(model(x), y), backend=backend)
ctx = torch._dynamo.compiled_autograd._enable(lambda gm: torch.compile(gm, backend=backend), dynamic=False) if use_ca else None
if ctx is not None:
    ctx.__enter__()
toggle = os.environ.get("CALLGRIND_TOGGLE")
if toggle:
    import subprocess
    subprocess.run([toggle, "--instr=on", str(os.getpid())], check=True, capture_output=True)
start, wall = time.process_time(), time.perf_counter()
for _ in range(2):
    x = torch.randn(8, 16, 64)
    step(x, x).backward()
    opt.step()
    opt.zero_grad()
cpu, wall = time.process_time() - start, time.perf_counter() - wall
if toggle:
    subprocess.run([toggle, "--instr=off", str(os.getpid())], check=True, capture_output=True)
from torch._dynamo.utils import counters, get_compilation_metrics
logging_s = sum((m.structured_logging_overhead_us or 0) for m in get_compilation_metrics()) / 1e6
print(json.dumps({"cpu": cpu, "wall": wall, "logging_s": logging_s, "taps_cpu": taps_cpu[0] if variant in ("taps", "artifacts", "cagtool") else 0.0, "counters": {k: sum(v.values()) for k, v in counters.items() if k in ("graph_break", "frames", "stats", "compiled_autograd")}}))
'''

# Two-sided 95 % t quantiles by degrees of freedom (1..29; beyond, 29's).
T95 = dict(enumerate((12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
                      2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045), start=1))
VARIANTS = ("plain", "handler", "trace", "taps", "artifacts", "cagtool")


def run_once(variant: str, backend: str, ca: bool, work: Path, instructions: bool = False, slowdown: float = 1.0,
             keep: Path | None = None, rep: int = 0) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("TORCH_TRACE", "TORCH_LOGS")}
    env["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(dir=work)
    env["CAGTOOL_ROOT"] = str(ROOT)
    env["RECORD_DIR"] = tempfile.mkdtemp(dir=work)
    if variant == "trace":
        env["TORCH_TRACE"] = tempfile.mkdtemp(dir=work)
    command = [sys.executable, "-c", JOB, variant, backend, "1" if ca else "0"]
    if instructions:
        # Instructions executed inside the measured steps, counted by callgrind (instrumentation
        # switched on and off around them by the job itself): what the machine's load and speed
        # do not move, where one process's compile CPU moves by up to 19 % between repetitions.
        out_file = (keep / f"callgrind.out.{variant}.{rep + 1}") if keep else Path(tempfile.mkdtemp(dir=work)) / "callgrind.out"
        env["HOLD_SCALE"] = str(slowdown)
        env["CALLGRIND_TOGGLE"] = shutil.which("callgrind_control") or "callgrind_control"
        env["PYTHONHASHSEED"] = "0"
        env["OMP_NUM_THREADS"] = "1"
        command = ["setarch", "-R", "valgrind", "--tool=callgrind", "--instr-atstart=no",
                   f"--callgrind-out-file={out_file}", *command]
    out = subprocess.run(command, capture_output=True, text=True, env=env, check=True)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    if instructions:
        refs = re.search(r"I\s+refs:\s+([\d,]+)", out.stderr)
        result["callgrind_cpu_s"] = result["cpu"]
        result["cpu"] = int(refs.group(1).replace(",", "")) / 1e9 if refs else math.nan
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--backend", default="inductor")
    parser.add_argument("--ca", action="store_true", help="run the backward under compiled autograd")
    parser.add_argument("--only", default=",".join(VARIANTS), help="the variants to run, comma-separated")
    parser.add_argument("--instructions", action="store_true",
                        help="count the instructions of the measured steps under valgrind's callgrind (billions, "
                             "printed where seconds are) instead of their CPU time: ~50x slower, independent of load")
    parser.add_argument("--slowdown", type=float, default=50.0,
                        help="with --instructions: how many times slower the job runs under callgrind; cagtool's writer "
                             "holds and wakes that many times less often, as often per instruction as at full speed")
    parser.add_argument("--keep", type=Path, help="with --instructions: keep callgrind's output files in this folder")
    args = parser.parse_args()
    if args.keep:
        args.keep.mkdir(parents=True, exist_ok=True)
    variants = tuple(v for v in VARIANTS if v in args.only.split(","))
    cpu: dict[str, list[float]] = {v: [] for v in VARIANTS}
    logging_s: dict[str, list[float]] = {v: [] for v in VARIANTS}
    taps_cpu: dict[str, list[float]] = {v: [] for v in VARIANTS}
    counters: dict[str, set[str]] = {v: set() for v in VARIANTS}
    slowdown: dict[str, list[tuple[float, float]]] = {v: [] for v in VARIANTS}
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(args.reps):
            for variant in variants:
                result = run_once(variant, args.backend, args.ca, Path(tmp), args.instructions, args.slowdown, args.keep, rep)
                if args.instructions:
                    native = run_once(variant, args.backend, args.ca, Path(tmp))
                    slowdown[variant].append((result["callgrind_cpu_s"] / native["cpu"], result["wall"] / native["cpu"]))
                    if native["counters"] != result["counters"]:
                        raise SystemExit(f"{variant}: torch's counters differ under callgrind: {native['counters']} vs {result['counters']}")
                cpu[variant].append(result["cpu"])
                logging_s[variant].append(result["logging_s"])
                taps_cpu[variant].append(result["taps_cpu"])
                counters[variant].add(json.dumps(result["counters"], sort_keys=True))
            print(f"rep {rep + 1}: " + "  ".join(f"{v} {cpu[v][-1]:.2f}s" for v in variants), flush=True)
    plain = cpu["plain"] if "plain" in variants else cpu[variants[0]]
    print(f"\ncompile CPU of the first two steps, backend={args.backend}{' under CA' if args.ca else ''}, {args.reps} reps:")
    for variant in variants:
        ratios = [c / p for c, p in zip(cpu[variant], plain)]
        print(f"  {variant:8s} median {statistics.median(cpu[variant]):.3f}s ({min(cpu[variant]):.3f} .. {max(cpu[variant]):.3f}); "
              f"ratio to plain: median {statistics.median(ratios):.3f} ({min(ratios):.3f} .. {max(ratios):.3f}); "
              f"torch's own structured_logging_overhead: median {statistics.median(logging_s[variant]):.3f}s; "
              f"inside cagtool's taps: median {statistics.median(taps_cpu[variant]):.4f}s ({min(taps_cpu[variant]):.4f} .. {max(taps_cpu[variant]):.4f})")
    if args.instructions:
        print(f"  the writer's hold_s scaled by {args.slowdown:g}; the steps under callgrind over their CPU time at full speed, CPU time / wall time: "
              + ", ".join(f"{v} {'; '.join(f'{c:.1f} / {w:.1f}' for c, w in slowdown[v])}" for v in variants))
    for variant in variants:
        print(f"  torch's counters, {variant}: {' | '.join(sorted(counters[variant]))}")
    if "plain" in variants and len(plain) >= 2:
        # Each repetition ran every variant in turn: its ratio to plain is one paired sample; the
        # geometric mean with a 95 % t-interval over repetitions is what a target is judged on.
        for variant in variants:
            if variant == "plain":
                continue
            logs = [math.log(c / p) for c, p in zip(cpu[variant], plain)]
            mean, sd = statistics.fmean(logs), statistics.stdev(logs)
            half = T95[min(len(logs) - 1, max(T95))] * sd / math.sqrt(len(logs))
            print(f"  {variant} / plain, paired: geometric mean {math.exp(mean):.4f}  95% t-interval [{math.exp(mean - half):.4f}, {math.exp(mean + half):.4f}]")


if __name__ == "__main__":
    main()
