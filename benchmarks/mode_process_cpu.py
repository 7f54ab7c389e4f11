"""CPU that cagtool adds to a small job: the mode process alone and the whole `cagtool run`
(parent + mode process) against plain `python SCRIPT`, for two cagtool source trees, interleaved.

    git archive OLD cagtool | tar -x -C /tmp/before     # the tree to compare with
    python benchmarks/mode_process_cpu.py --before /tmp/before --after . --reps 7 --json F

Each repetition runs, in an order that alternates: `python SCRIPT`; the mode process of each tree
started directly (`python -m cagtool.capture.run.child SPEC`, no parent: what one mode costs);
`cagtool run --modes M --no-report -o DIR SCRIPT` with each tree (everything a user pays, minus
report.html, which is measured by end_of_run_cpu.py). CPU = user + system of the process and the
children it waited for (os.wait4), so a busy machine's waiting is left out. The default script is
a Linear + SGD, five steps, eager: what torch itself costs to import and run is the floor.
Trees are put first on PYTHONPATH; bytecode is written and used as an installed package would.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SCRIPT = """\
import torch
model = torch.nn.Linear(16, 4)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(8, 16)
for _ in range(5):
    opt.zero_grad()
    loss = model(x).sum()
    loss.backward()
    opt.step()
"""


def cpu_of(argv: list[str], env: dict[str, str], cwd: Path) -> float:
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, cwd=cwd)
    _, status, usage = os.wait4(proc.pid, 0)
    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{argv} exited {proc.returncode}: {err[-2000:]}")
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", type=Path, required=True, help="a directory holding the cagtool package to compare with")
    parser.add_argument("--after", type=Path, required=True, help="a directory holding the cagtool package measured")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--mode", default="eager", choices=("eager", "aot", "ca"))
    parser.add_argument("--backend", default="eager")
    parser.add_argument("--json", type=Path, help="write every figure here")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="cagtool-modecpu-"))
    script = work / "job.py"
    script.write_text(SCRIPT)
    trees = {"before": args.before.resolve(), "after": args.after.resolve()}
    base_env = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "PYTHONPATH")}
    base_env["CI"] = "true"
    envs = {name: {**base_env, "PYTHONPATH": str(tree)} for name, tree in trees.items()}

    def mode_process(name: str, rep: int) -> list[str]:
        mode_dir = work / f"{name}-{rep}-mode"
        mode_dir.mkdir()
        spec = {"mode": args.mode, "mode_dir": str(mode_dir), "target": {"kind": "script", "name": str(script), "args": []},
                "backend": args.backend, "label": args.mode, "parent_pid": 0, "ack_fd": None, "go_fd": None, "seed": 0, "digest_steps": []}
        (mode_dir / "spec.json").write_text(json.dumps(spec))
        return [sys.executable, "-m", "cagtool.capture.run.child", str(mode_dir / "spec.json")]

    def whole_run(name: str, rep: int) -> list[str]:
        return [sys.executable, "-m", "cagtool", "run", "--modes", args.mode, "--backend", args.backend, "--no-report",
                "-o", str(work / f"{name}-{rep}-run"), str(script)]

    figures: dict[str, list[float]] = {"python": [], **{f"{k}:{t}": [] for k in ("mode", "run") for t in trees}}
    load_before = os.getloadavg()[0]
    for rep in range(args.reps + 1):  # the first is a warm-up (bytecode written, page cache)
        order = list(trees) if rep % 2 else list(reversed(trees))
        measured = {"python": cpu_of([sys.executable, str(script)], base_env, work)}
        for name in order:
            measured[f"mode:{name}"] = cpu_of(mode_process(name, rep), envs[name], work)
        for name in order:
            measured[f"run:{name}"] = cpu_of(whole_run(name, rep), envs[name], work)
        if rep:
            for key, value in measured.items():
                figures[key].append(value)
    load_after = os.getloadavg()[0]
    shutil.rmtree(work, ignore_errors=True)
    print(f"{args.reps} repetitions after a warm-up, --mode {args.mode} --backend {args.backend}; load {load_before:.1f} -> {load_after:.1f}; CPU s (user + sys)")
    print(f"{'what':<14} {'median':>7} {'min':>7} {'max':>7}  median over python")
    python = statistics.median(figures["python"])
    for key, values in figures.items():
        med = statistics.median(values)
        print(f"{key:<14} {med:7.3f} {min(values):7.3f} {max(values):7.3f}  {med - python:+.3f}")
    for what in ("mode", "run"):
        diffs = [a - b for a, b in zip(figures[f"{what}:after"], figures[f"{what}:before"])]
        print(f"{what}: after - before, median of the per-repetition differences {statistics.median(diffs):+.3f} s")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({
            "benchmark": "mode_process_cpu", "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "python": platform.python_version(), "machine": platform.machine(), "cpus": os.cpu_count(),
            "load": [load_before, load_after], "mode": args.mode, "backend": args.backend, "reps": args.reps,
            "trees": {k: str(v) for k, v in trees.items()}, "cpu_s": figures,
        }, indent=1) + "\n")


if __name__ == "__main__":
    main()
