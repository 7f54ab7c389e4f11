"""How often a torchrun restart hangs, under plain torchrun and under `cagtool run` (docs/reliability.md,
Known limits: "A torchrun restart over torchrun's default (static) rendezvous").

The job: `torchrun --nproc-per-node 2 --max-restarts 1` on tests/scripts/ddp_dies_once.py with
`--shared-keys` (rank 1 of the first attempt exits 1 after 2 steps; the job calls
`init_process_group("gloo")` as most jobs do, so every attempt uses the same keys in torchrun's store).
Each launcher runs it `--runs` times, alternating try by try so that both see the same load. A try
that has not ended after `--timeout` seconds is a hang: its whole tree is stopped (SIGTERM to the
launcher, which under cagtool leaves every rank's stacks beside its record; then SIGKILL to every
process left below this one, which is their subreaper, so nothing outlives the try). A try that ends
with a non-zero exit is a failure, its reason taken from the job's stderr. Prints the counts per
launcher with a 95 % Clopper-Pearson interval for each hang rate, and writes every try to --json.

    python benchmarks/torchrun_restart_hang.py --runs 8 --json benchmarks/results/torchrun_restart/<date>.json
    python benchmarks/torchrun_restart_hang.py --runs 8 --standalone   # torchrun's c10d rendezvous on a free port
    python benchmarks/torchrun_restart_hang.py --pool benchmarks/results/torchrun_restart/*.json   # the counts of several sessions
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import platform
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

from cagtool.capture.processes.lifeline import _reap as reap_children
from cagtool.capture.processes.lifeline import descendants

REPO = Path(__file__).resolve().parent.parent
JOB = REPO / "tests" / "scripts" / "ddp_dies_once.py"
LAUNCHERS = ("torchrun", "cagtool")
# What a failed try said, in the order looked for: the first that matches names it.
REASONS = (
    ("gloo connection refused", re.compile(r"Connection refused")),
    ("gloo connectFullMesh", re.compile(r"connectFullMesh")),
    ("rendezvous", re.compile(r"Rendezvous\w*(Error|Timeout|Closed)")),
    ("store timeout", re.compile(r"(Socket Timeout|timed out|DistStoreError)")),
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _command(launcher: str, out: Path, standalone: bool) -> list[str]:
    rendezvous = ["--standalone"] if standalone else ["--master-port", str(_free_port())]
    torchrun = [*rendezvous, "--nproc-per-node", "2", "--max-restarts", "1", "--monitor-interval", "0.1",
                str(JOB), "--steps", "4", "--die-after", "2", "--shared-keys"]
    if launcher == "torchrun":
        return [sys.executable, "-m", "torch.distributed.run", *torchrun]
    return [sys.executable, "-m", "cagtool", "run", "--modes", "ca", "--backend", "eager", "-o", str(out / "r"),
            "-m", "torch.distributed.run", "--", *torchrun]


def _end_everything_below(grace_s: float) -> list[int]:
    """SIGKILL to every process still below this one after grace_s; returns those that were left."""
    deadline = time.monotonic() + grace_s
    while descendants(os.getpid()) and time.monotonic() < deadline:
        reap_children()
        time.sleep(0.2)
    left = descendants(os.getpid())
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    time.sleep(0.2)
    reap_children()
    return left


def _reason(stderr: str) -> str:
    for name, pattern in REASONS:
        if pattern.search(stderr):
            return name
    return "other"


def _hung_stacks(record: Path) -> list[str]:
    """Under cagtool: the innermost frame of each rank's main thread at the SIGTERM (StopStacks files)."""
    found = []
    for path in sorted(record.glob("**/signal_stacks/SIGTERM.txt")):
        text = path.read_text(errors="replace")
        current = text.split("Current thread", 1)[-1].splitlines()
        frames = [line.strip() for line in current if line.strip().startswith("File ")]
        process = path.parent.parent.name
        found.append(f"{process}: {frames[0] if frames else '(no stack)'}")
    return found


def one_try(launcher: str, timeout_s: float, standalone: bool) -> dict:
    with tempfile.TemporaryDirectory(prefix="restart-") as tmp:
        out = Path(tmp)
        command = _command(launcher, out, standalone)
        env = {**os.environ, "CI": "true"}
        env.pop("TORCH_LOGS", None)
        with open(out / "stdout", "w") as stdout, open(out / "stderr", "w") as stderr:
            began = time.monotonic()
            process = subprocess.Popen(command, stdout=stdout, stderr=stderr, cwd=REPO, env=env, start_new_session=True)
            try:
                code: int | None = process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                code = None
                # The launcher passes SIGTERM to the ranks (cagtool's ranks leave their stacks first).
                os.kill(process.pid, signal.SIGTERM)
                try:
                    process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    pass
            elapsed = time.monotonic() - began
        left = _end_everything_below(grace_s=5.0 if code is None else 2.0)
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        err = (out / "stderr").read_text(errors="replace")
        finished = [json.loads(line) for line in (out / "stdout").read_text(errors="replace").splitlines() if line.startswith("{")]
        result = {
            "launcher": launcher,
            "outcome": "hang" if code is None else ("ok" if code == 0 else "fail"),
            "exit_code": code if code is not None else process.returncode,
            "seconds": round(elapsed, 1),
            "attempt1_ranks_finished": sorted(p["rank"] for p in finished if p.get("attempt") == 1 and "steps" in p),
            "processes_killed_after": len(left),
        }
        if code not in (0, None):
            result["reason"] = _reason(err)
        if code is None and launcher == "cagtool":
            result["stacks"] = _hung_stacks(out / "r")
        if code != 0:
            result["stderr_tail"] = err[-1500:]
        return result


def clopper_pearson(k: int, n: int) -> tuple[float, float]:
    from scipy.stats import binomtest

    interval = binomtest(k, n).proportion_ci(confidence_level=0.95, method="exact")
    return float(interval.low), float(interval.high)


def summarise(tries: list[dict]) -> dict:
    summary = {}
    for launcher in LAUNCHERS:
        mine = [t for t in tries if t["launcher"] == launcher]
        if not mine:
            continue
        counts = {outcome: sum(t["outcome"] == outcome for t in mine) for outcome in ("ok", "fail", "hang")}
        low, high = clopper_pearson(counts["hang"], len(mine))
        summary[launcher] = {**counts, "n": len(mine), "hang_rate": counts["hang"] / len(mine), "hang_rate_ci95": [round(low, 3), round(high, 3)],
                             "median_seconds_ok": _median([t["seconds"] for t in mine if t["outcome"] == "ok"])}
    return summary


def _print_summary(summary: dict) -> None:
    for launcher, figures in summary.items():
        low, high = figures["hang_rate_ci95"]
        print(f"{launcher}: {figures['hang']} hung, {figures['fail']} failed, {figures['ok']} ok of {figures['n']}; "
              f"hang rate {figures['hang_rate']:.2f} [95 % {low:.2f}, {high:.2f}]")


def _median(values: list[float]) -> float | None:
    values = sorted(values)
    if not values:
        return None
    middle = len(values) // 2
    return values[middle] if len(values) % 2 else (values[middle - 1] + values[middle]) / 2


def _commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=REPO, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=8, help="tries per launcher")
    parser.add_argument("--timeout", type=float, default=90.0, help="seconds before a try counts as a hang")
    parser.add_argument("--launchers", default=",".join(LAUNCHERS), help="torchrun,cagtool (in the order alternated)")
    parser.add_argument("--standalone", action="store_true", help="torchrun --standalone (c10d rendezvous) instead of a static one on a free port")
    parser.add_argument("--json", type=Path, help="write every try and the summary here")
    parser.add_argument("--pool", type=Path, nargs="+", help="no new tries: the counts over these result files")
    args = parser.parse_args()
    if args.pool:
        _print_summary(summarise([t for path in args.pool for t in json.loads(path.read_text())["tries"]]))
        return
    launchers = [name for name in args.launchers.split(",") if name]
    if any(name not in LAUNCHERS for name in launchers):
        parser.error(f"--launchers: each of {', '.join(LAUNCHERS)}")
    # Every process of a try is re-parented to this one if its launcher dies first, so the sweep
    # after each try finds them all (torchrun starts its ranks in sessions of their own).
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    started = datetime.now(timezone.utc)
    load_before = os.getloadavg()
    tries = []
    for run in range(args.runs):
        for launcher in launchers:
            result = one_try(launcher, args.timeout, args.standalone)
            tries.append(result)
            extra = result.get("reason") or "; ".join(result.get("stacks", []))
            print(f"{launcher} {run + 1}/{args.runs}: {result['outcome']} (exit {result['exit_code']}, {result['seconds']} s) {extra}", flush=True)
    summary = summarise(tries)
    _print_summary(summary)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({
            "benchmark": "torchrun_restart_hang", "started_at": started.isoformat(timespec="seconds"),
            "ended_at": datetime.now(timezone.utc).isoformat(timespec="seconds"), "commit": _commit(),
            "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "load_before": [round(x, 1) for x in load_before],
                        "load_after": [round(x, 1) for x in os.getloadavg()]},
            "options": {"runs": args.runs, "timeout_s": args.timeout, "launchers": launchers, "standalone": args.standalone},
            "summary": summary, "tries": tries,
        }, indent=1) + "\n")


if __name__ == "__main__":
    main()
