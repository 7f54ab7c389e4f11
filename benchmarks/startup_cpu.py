"""Start-up CPU of two cagtool installs, interleaved: each repetition runs every command
once with each install, alternately, so both see the same machine load; the figure is CPU time
(user + system of the process, from getrusage), which a busy 2-core machine inflates far less than
wall time. Use it to judge a before/after change while others use the machine; the targets
themselves are judged on wall time by benchmarks/cli_speed.py on a quiet machine.

    python benchmarks/cli_speed.py --only runs --keep DIR          # records in DIR/runs, DIR/install/venv: the checkout
    python benchmarks/startup_cpu.py --records DIR --before OLD/bin/cagtool --after DIR/install/venv/bin/cagtool

Commands: `cagtool --help` and `cagtool runs DIR/runs` (10 three-mode runs), and with `--only
recompiles` `cagtool recompiles DIR/explain --explain` (100,000 events, 1,000 recompiles), with
CI=true and stdout to a pipe, as cli_speed.py runs them. Prints the median, min and max CPU per command and install,
and the median of the per-repetition differences (after - before).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
from pathlib import Path


def cpu_of(argv: list[str], env: dict[str, str]) -> float:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=Path, required=True, help="a directory `cli_speed.py --keep` wrote (its runs/ is listed)")
    parser.add_argument("--before", type=Path, required=True, help="the cagtool console script of the install before the change")
    parser.add_argument("--after", type=Path, required=True, help="the cagtool console script of the install after it")
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--only", default="help,runs", help="comma-separated: help, runs, recompiles (`recompiles DIR/explain --explain`)")
    args = parser.parse_args()
    commands = {"help": ["--help"], "runs": ["runs", str(args.records / "runs")],
                "recompiles": ["recompiles", str(args.records / "explain"), "--explain"]}  # 100k events, 1k recompiles
    names = [n for n in args.only.split(",") if n]
    # As cli_speed.py runs them; no PYTHONDONTWRITEBYTECODE, so both installs use their .pyc files.
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "COLUMNS")}
    env["CI"] = "true"
    installs = {"before": str(args.before), "after": str(args.after)}
    cpu: dict[tuple[str, str], list[float]] = {(n, i): [] for n in names for i in installs}
    for rep in range(args.reps + 1):  # the first is a warm-up
        for name in names:
            order = list(installs.items()) if rep % 2 else list(reversed(installs.items()))
            for install, script in order:
                spent = cpu_of([script, *commands[name]], env)
                if rep:
                    cpu[(name, install)].append(spent)
    load = os.getloadavg()[0]
    print(f"{args.reps} interleaved repetitions after a warm-up; load average {load:.2f} at the end; CPU = user + system, ms")
    print(f"{'command':<8} {'install':<7} {'median':>7} {'min':>7} {'max':>7}")
    for name in names:
        for install in installs:
            values = cpu[(name, install)]
            print(f"{name:<8} {install:<7} {1e3 * statistics.median(values):7.1f} {1e3 * min(values):7.1f} {1e3 * max(values):7.1f}")
        diffs = [a - b for a, b in zip(cpu[(name, "after")], cpu[(name, "before")])]
        print(f"{name:<8} after - before, median of the per-repetition differences: {1e3 * statistics.median(diffs):+.1f} ms")


if __name__ == "__main__":
    main()
