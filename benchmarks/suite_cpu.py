"""A pytest plugin that writes each test's CPU: its own process's and that of every subprocess it
waited for (`getrusage` SELF and CHILDREN around the test), one JSON line per test, to the file
$CPU_PER_TEST_OUT; then `--report` sums them per file and lists the costliest tests. The suite is
CPU-bound on 2 cores, so its wall time is its CPU over ~1.95: this is where that CPU goes.

    CPU_PER_TEST_OUT=cpu.jsonl PYTHONPATH=benchmarks python -m pytest -q -n 3 --dist worksteal -p suite_cpu
    python benchmarks/suite_cpu.py --report cpu.jsonl > benchmarks/results/suite_cpu/<date>-<commit>.txt

A subprocess's CPU counts where the test waits for it (a `cagtool run` and its mode processes
do; a process left to a session fixture counts in the first test that asked for it).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import resource

import pytest


def _cpu() -> tuple[float, float]:
    own, waited = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, waited.ru_utime + waited.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    before = _cpu()
    yield
    after = _cpu()
    with open(os.environ["CPU_PER_TEST_OUT"], "a") as out:
        out.write(json.dumps({"id": item.nodeid, "self": after[0] - before[0], "children": after[1] - before[1]}) + "\n")


def report(path: str, files: int = 60, least: float = 3.0) -> None:
    rows = [json.loads(line) for line in open(path)]
    total = sum(r["self"] + r["children"] for r in rows)
    print(f"# CPU seconds per test (the test's process + every subprocess it waited for): {len(rows)} tests, {total:.1f} CPU-s")
    by_file: collections.Counter[str] = collections.Counter()
    for r in rows:
        by_file[r["id"].split("::")[0]] += r["self"] + r["children"]
    print("# per file")
    for name, cpu in by_file.most_common(files):
        print(f"{cpu:8.1f} {name}")
    print(f"# per test >= {least} CPU-s")
    for r in sorted(rows, key=lambda r: -(r["self"] + r["children"])):
        if r["self"] + r["children"] >= least:
            print(f"{r['self'] + r['children']:7.1f} {r['id']}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--report", required=True, metavar="JSONL")
    report(parser.parse_args().report)
