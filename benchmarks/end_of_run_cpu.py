"""CPU of what `cagtool run` does after its last mode ended, for two checkouts, interleaved:
read the record, print the summary and the mode comparison, write report.html. Each
repetition runs each checkout once in a fresh interpreter (the process-level imports count, as
they do in `cagtool run`), alternately, so both see the same machine load; the figure is CPU time
(user + system, getrusage), which a busy machine inflates far less than wall time.

    python benchmarks/end_of_run_cpu.py --run RUN --before OLD_CHECKOUT --after .
    python benchmarks/end_of_run_cpu.py --run RUN --before OLD --after . --what report   # report.html alone

RUN: a recorded run, e.g. `cagtool run --modes eager,aot,ca --backend eager -o RUN
sample_scripts/transformer_lm.py --steps 24 --backend eager` (the 15 s job of the issue). A
checkout is a directory holding the `cagtool` package (a worktree, or `git archive COMMIT | tar -x
-C DIR`); it is put first on PYTHONPATH (the snippet runs in a scratch directory), so the installed cagtool's dependencies are used with
its code. The report goes to a temporary file, not into RUN. Where the checkout's `cagtool run`
reads the record once (`print_run_report(..., loaded=)`), the snippet does too.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

SNIPPETS = {
    # What run_command does after the modes (no --json, no gate).
    "end": """
import inspect, sys
from pathlib import Path
from cagtool.commands.summary import print_run_report
from cagtool.commands.report import report_after_run
from cagtool.report.html import document
run_path, out = Path(sys.argv[1]), Path(sys.argv[2])
document.REPORT_FILE = str(out)  # absolute: <run>/<absolute path> is that path
if "loaded" in inspect.signature(print_run_report).parameters:
    from cagtool.record.loader import load_run
    record = load_run(run_path, columns=True)
    print_run_report(run_path, fmt="text", after_run=True, loaded=record)
    report_after_run(run_path, None, record)
else:
    print_run_report(run_path, fmt="text", after_run=True)
    report_after_run(run_path, None)
import cagtool
print(Path(cagtool.__file__).parent.parent, sorted(m for m in ("pandas", "altair") if m in sys.modules), file=sys.stderr)
""",
    # report.html alone, as `cagtool report RUN` writes it (without the CLI's start).
    "report": """
import sys
from pathlib import Path
from cagtool.commands.report import report_after_run
from cagtool.report.html import document
document.REPORT_FILE = str(Path(sys.argv[2]))
report_after_run(Path(sys.argv[1]))
import cagtool
print(Path(cagtool.__file__).parent.parent, sorted(m for m in ("pandas", "altair") if m in sys.modules), file=sys.stderr)
""",
}


def cpu_of(argv: list[str], env: dict[str, str], cwd: str) -> tuple[float, str]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env, cwd=cwd)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"failed ({proc.returncode}): {' '.join(argv[:3])}\n{proc.stderr[-2000:]}")
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), proc.stderr.strip().splitlines()[-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run", type=Path, required=True, help="a recorded run directory")
    parser.add_argument("--before", type=Path, required=True, help="checkout before the change")
    parser.add_argument("--after", type=Path, required=True, help="checkout after it")
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--what", choices=sorted(SNIPPETS), default="end")
    args = parser.parse_args()
    base_env = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "COLUMNS")}
    base_env["CI"] = "true"
    trees = {"before": args.before.resolve(), "after": args.after.resolve()}
    cpu: dict[str, list[float]] = {name: [] for name in trees}
    imported: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="end-of-run-") as tmp:
        for rep in range(args.reps + 1):  # the first is a warm-up (and writes the .pyc files)
            order = list(trees.items()) if rep % 2 else list(reversed(trees.items()))
            for name, tree in order:
                env = {**base_env, "PYTHONPATH": os.pathsep.join(p for p in (str(tree), base_env.get("PYTHONPATH", "")) if p)}
                out = Path(tmp) / f"{name}.html"
                spent, modules = cpu_of([sys.executable, "-c", SNIPPETS[args.what], str(args.run.resolve()), str(out)], env, tmp)
                imported[name] = modules
                if rep:
                    cpu[name].append(spent)
    print(f"{args.what}: {args.reps} interleaved repetitions after a warm-up, load average {os.getloadavg()[0]:.2f} at the end; CPU s (user + system)")
    for name, values in cpu.items():
        print(f"  {name:<6} median {statistics.median(values):.3f}  min {min(values):.3f}  max {max(values):.3f}   (cagtool from, pandas/altair imported: {imported[name]})")
    diffs = [a - b for a, b in zip(cpu["after"], cpu["before"])]
    print(f"  after - before, median of the repetitions: {statistics.median(diffs):+.3f} s")


if __name__ == "__main__":
    main()
