"""What Python code cagtool runs in a steady training step: every call, counted, with the
instrumentation on and off. A count is exact where a time is noise (step_overhead.py needs 24
processes to see 1 %), so this answers "which part costs per step" and guards against a part that
starts running per step unnoticed.

The workload and the on/off switch are step_overhead.py's (one process, ca mode, TORCH_TRACE on,
the MLP trained with AdamW under `compiled_autograd._enable`): the record writer, the step tracker,
the capture observer, the structured-log handler and TORCH_TRACE's file handler, installed as
`cagtool/capture/child.py` installs them, or all removed. After a warm-up with everything on (the
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
import logging
import os
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", default="inductor", choices=("inductor", "aot_eager", "eager"))
    parser.add_argument("--steps", type=int, default=200, help="steps counted in each of off, on, off")
    parser.add_argument("--top", type=int, default=40, help="rows to print")
    args = parser.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="cagtool-step-calls-"))
    mode_dir = tmp / "ca"
    mode_dir.mkdir()
    os.environ["TORCH_TRACE"] = str(mode_dir / "trace")  # read when torch is imported, as in child.py
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(tmp / "inductor"))
    sys.path.insert(0, str(REPO))

    import torch
    from torch._dynamo import compiled_autograd as ca

    from cagtool.capture.observe.ca_observer import CaptureObserver
    from cagtool.capture.observe.torch_logs import TRACE_LOGGER, StructuredLogHandler
    from cagtool.capture.steps import StepTracker
    from cagtool.capture.writer import RecordWriter
    from cagtool.record.manifest import ModeManifest

    torch.set_num_threads(1)
    trace_logger = logging.getLogger(TRACE_LOGGER)
    torch_trace_handlers = list(trace_logger.handlers)
    manifest = ModeManifest(mode="ca", argv=["bench"], target={}, cwd=str(tmp), versions={}, backend=args.backend, dynamic=False, started_at="")
    writer = RecordWriter(mode_dir, manifest)

    def compiler(gm):
        return torch.compile(gm, backend=args.backend)

    steps = StepTracker(writer, "ca")
    observer = CaptureObserver(writer, steps, compiler)
    handler = StructuredLogHandler(writer, steps)

    def instrument(on: bool) -> None:  # as step_overhead.py's, every part
        if on:
            trace_logger.addHandler(handler)
            for h in torch_trace_handlers:
                trace_logger.addHandler(h)
            trace_logger.setLevel(logging.DEBUG)
            steps.install()
            observer.install()
        else:
            steps.uninstall()
            observer.uninstall()
            torch._C._dynamo.compiled_autograd.set_verbose_logger(None)
            for h in list(trace_logger.handlers):
                trace_logger.removeHandler(h)

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.GELU(), torch.nn.Linear(512, 512), torch.nn.GELU(), torch.nn.Linear(512, 10))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x, y = torch.randn(64, 256), torch.randint(0, 10, (64,))

    def step() -> None:
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=False)
        loss.backward()
        opt.step()

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

    with ca._enable(compiler, dynamic=False):
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
