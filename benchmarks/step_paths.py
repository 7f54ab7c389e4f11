"""What each way of reading a record's steps saves: `cagtool summary RUN` on cli_speed.py's summary
record (3 modes x 20,000 steps), CPU time (user + sys) of the whole process, three variants
interleaved run by run (A B C A B C ...) so the machine's load falls on all three alike:

- `numpy`: the tree as it is: the columns sidecar (record/columns.py) and, for the step figures,
  numpy arrays over its columns (report/figures/metrics.py `held_steps`);
- `sidecar`: the sidecar, the figures from its columns as lists (`held_steps` made to say None,
  in a copy of the package);
- `lines`: the record without its sidecar: every line decoded by msgspec into its event.

The three summaries must print the same text (checked once, before timing).

    python benchmarks/step_paths.py --repeat 9 [--steps 20000] [--json F]
    python benchmarks/step_paths.py --repeat 5 --job-scale .job-scale --only numpy,sidecar

--job-scale DIR: job_scale.py's record instead (100,000 steps x 3 modes x 8 ranks, built in DIR
once and kept: --steps and --ranks set its size); its `lines` variant takes about a minute a run.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))

from cli_speed import machine, write_training_run  # noqa: E402
from job_scale import write_job  # noqa: E402

NUMPY_PATH = "def _held_steps(record: ModeRecord) -> HeldSteps | None:\n"


def package_without_numpy_path(base: Path) -> Path:
    """A copy of the package whose step figures never take the numpy path."""
    copy = base / "no_numpy"
    shutil.copytree(REPO / "cagtool", copy / "cagtool", ignore=shutil.ignore_patterns("__pycache__"))
    metrics = copy / "cagtool" / "report" / "figures" / "metrics.py"
    text = metrics.read_text()
    assert NUMPY_PATH in text, "metrics.py no longer has _held_steps: update this benchmark"
    metrics.write_text(text.replace(NUMPY_PATH, NUMPY_PATH + "    return None\n", 1))
    return copy


def cpu_of(argv: list[str], path: Path) -> tuple[float, str]:
    """CPU time of `argv` with the package at `path` first on sys.path. Run from `path`: `python -m`
    puts the working directory before PYTHONPATH, and the checkout's own package would win."""
    env = {**os.environ, "PYTHONPATH": str(path), "CI": "true", "COLUMNS": "100"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=str(path))
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"{argv} failed: {proc.stderr[-2000:]}")
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), proc.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=9)
    parser.add_argument("--steps", type=int, help="steps per mode (default: cli_speed's summary record, 20,000; job_scale's, 100,000)")
    parser.add_argument("--job-scale", type=Path, help="use job_scale.py's multi-rank record, built (once) and kept here")
    parser.add_argument("--ranks", type=int, default=8, help="with --job-scale")
    parser.add_argument("--only", default="numpy,sidecar,lines", help="comma-separated variants")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="cagtool-step-paths-"))
    try:
        if args.job_scale:
            args.steps = args.steps or 100_000
            run = write_job(args.job_scale / "run", args.steps, args.ranks)  # the layout of job_scale.py --keep
        else:
            args.steps = args.steps or 20_000
            run = write_training_run(base / "summary", args.steps)
        lines_run = base / "summary-lines"
        if "lines" in args.only.split(","):
            shutil.copytree(run, lines_run)
            for sidecar in lines_run.glob("**/columns.json"):
                sidecar.unlink()
        python = [sys.executable, "-m", "cagtool", "summary"]
        variants = {
            "numpy": (python + [str(run)], REPO),
            "sidecar": (python + [str(run)], package_without_numpy_path(base)),
            "lines": (python + [str(lines_run)], REPO),
        }
        variants = {name: variant for name, variant in variants.items() if name in args.only.split(",")}
        texts = {}
        for name, (argv, path) in variants.items():  # warm-up: .pyc files, the OS file cache
            texts[name] = cpu_of(argv, path)[1].replace(str(lines_run), str(run))
        if cpu_of([sys.executable, "-c", "import cagtool; print(cagtool.__file__)"], variants["sidecar"][1] if "sidecar" in variants else REPO)[1].startswith(str(REPO)) and "sidecar" in variants:
            raise SystemExit("the `sidecar` variant imports the checkout's package, not its copy")
        if len(set(texts.values())) != 1:
            raise SystemExit("the three variants print different summaries")
        cpu: dict[str, list[float]] = {name: [] for name in variants}
        for _ in range(args.repeat):
            for name, (argv, path) in variants.items():
                cpu[name].append(cpu_of(argv, path)[0])
        load = os.getloadavg()[0]
        for name, values in cpu.items():
            print(f"{name:8} median {statistics.median(values):.3f} s  min {min(values):.3f}  max {max(values):.3f}  ({len(values)} runs)")
        print(f"load {load:.1f}")
        if args.json:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps({"machine": machine(), "load": load, "steps": args.steps, "ranks": args.ranks if args.job_scale else 1, "repeat": args.repeat, "cpu_s": cpu}, indent=1) + "\n")
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
