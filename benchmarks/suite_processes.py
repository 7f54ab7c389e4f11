"""Where the suite's CPU goes by process: every Python process the suite starts (the xdist workers,
each `cagtool run` and its mode processes, the tests' plain `python script.py` baselines, DDP ranks)
writes one line as it exits (atexit and os._exit): its pid, parent, CPU user and system, wall,
whether it imported torch, the test it ran for ($PYTEST_CURRENT_TEST, which subprocesses inherit)
and its argv. What is not a Python process (Inductor's C++ compiler, chromium) is the difference
between benchmarks/suite_cpu.py's per-test figure and the Python processes of the test.

    python benchmarks/suite_processes.py --install .venv-test --out procs.tsv   # a .pth in the venv
    CPU_PER_TEST_OUT=cpu.jsonl PYTHONPATH=benchmarks .venv-test/bin/python -m pytest -q -n 3 --dist worksteal -p suite_cpu
    python benchmarks/suite_processes.py --uninstall .venv-test
    python benchmarks/suite_processes.py --report procs.tsv --per-test cpu.jsonl

The hook is a measuring device, for a venv of one's own: it is never installed by cagtool or its tests.
The argv it writes holds the machine's paths; a file kept in benchmarks/results/ has them made
relative (the repository's root left out, `<venv>/`, `<tmp>/` and `<python>/` for the rest).
"""

from __future__ import annotations

import argparse
import collections
import json
import statistics
import sys
from pathlib import Path

_HOOK = '''import atexit, os, sys, time
_t0 = time.time()
_done = []
def _dump():
    if _done:
        return
    _done.append(1)
    try:
        t = os.times()
        test = os.environ.get("PYTEST_CURRENT_TEST", "-").split(" ")[0]
        argv = " ".join(sys.argv[:3])[:200].replace("\\t", " ").replace("\\n", " ")
        with open(OUT, "a") as f:
            f.write("%d\\t%d\\t%.2f\\t%.2f\\t%.2f\\t%d\\t%s\\t%s\\n" % (os.getpid(), os.getppid(), t.user, t.system,
                    time.time() - _t0, int("torch" in sys.modules), test, argv))
    except Exception:
        pass
atexit.register(_dump)
_exit = os._exit
def _exit_after_dump(code, _exit=_exit):
    _dump()
    _exit(code)
os._exit = _exit_after_dump
'''
_MODULE, _PTH = "_suite_processes_hook.py", "zz_suite_processes_hook.pth"


def _site_packages(venv: str) -> Path:
    [site] = Path(venv).glob("lib/python3*/site-packages")
    return site


def install(venv: str, out: str) -> None:
    site = _site_packages(venv)
    (site / _MODULE).write_text(f"OUT = {str(Path(out).resolve())!r}\n" + _HOOK)
    (site / _PTH).write_text(f"import {_MODULE[:-3]}\n")


def uninstall(venv: str) -> None:
    site = _site_packages(venv)
    for name in (_MODULE, _PTH):
        (site / name).unlink(missing_ok=True)


def report(path: str, per_test: str | None) -> None:
    rows = []
    for line in open(path):
        fields = line.rstrip("\n").split("\t")
        if len(fields) == 8:
            rows.append((float(fields[2]) + float(fields[3]), fields[5] == "1", fields[6], fields[7]))
    total = sum(r[0] for r in rows)
    torch_rows = [r[0] for r in rows if r[1]]
    parents = sorted(r[0] for r in rows if not r[1] and r[3].split(" ")[1:2] == ["run"])
    print(f"# Python processes: {len(rows)}, {total:.1f} CPU-s")
    print(f"#   that imported torch: {len(torch_rows)}, {sum(torch_rows):.1f} CPU-s, median {statistics.median(torch_rows):.2f} CPU-s each")
    if parents:
        print(f"#   `cagtool run` parents: {len(parents)}, {sum(parents):.1f} CPU-s, median {statistics.median(parents):.2f} CPU-s each")
    print(f"#   with no test in their environment (workers, ranks started with an environment of their own): "
          f"{sum(r[0] for r in rows if r[2] == '-'):.1f} CPU-s")
    if per_test:
        tests = {}
        for line in open(per_test):
            record = json.loads(line)
            tests[record["id"]] = record["self"] + record["children"]
        python = collections.Counter()
        for cpu, _, test, _ in rows:
            python[test] += cpu
        gaps = sorted(((cpu - python.get(test, 0.0), cpu, test) for test, cpu in tests.items()), reverse=True)
        print(f"# per test: {sum(tests.values()):.1f} CPU-s; not in a Python process of its own test (C++ compiles, "
              f"chromium, processes with no test in their environment): {sum(g[0] for g in gaps if g[0] > 0):.1f}")
        for gap, cpu, test in gaps[:20]:
            print(f"{gap:7.1f} of {cpu:6.1f}  {test}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--install", metavar="VENV")
    parser.add_argument("--out", default="procs.tsv")
    parser.add_argument("--uninstall", metavar="VENV")
    parser.add_argument("--report", metavar="PROCS_TSV")
    parser.add_argument("--per-test", metavar="CPU_JSONL", help="suite_cpu.py's file of the same run")
    args = parser.parse_args()
    if args.install:
        install(args.install, args.out)
    elif args.uninstall:
        uninstall(args.uninstall)
    elif args.report:
        report(args.report, args.per_test)
    else:
        parser.print_help()
        sys.exit(2)


if __name__ == "__main__":
    main()
