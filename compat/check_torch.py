"""Does cagtool work on another torch? Builds one virtualenv per torch version, installs cagtool
into it, and runs what pins cagtool's reliance on torch's internals:

- the torch-internals tests (tests/test_torch_internals.py), doctor's tests (tests/test_doctor.py) and
  the graph-code tests (tests/test_graph_code.py: what cagtool reads of an FX graph module);
- `cagtool doctor` (one line per check: the entry points cagtool wraps, a real CA capture whose
  cache-miss messages must still parse);
- a capture of every sample script in the `ca` mode (eager backend), whose exit code and CA graph
  count are recorded.

    python compat/check_torch.py 2.13.0 2.14.1 2.15.0            # install (first time) and check
    python compat/check_torch.py --json compat/results.json 2.15.0
    python compat/check_torch.py --install-only 2.15.0

Venvs live under .compat/venv-<version> (git-ignored). torch 2.14 and 2.15 pull their CUDA runtime
packages (~5 GB) and then run compiled autograd on CPU. A machine whose pip configuration caps torch
(this project's CI machines do) needs that cap lifted for 2.15: the script runs pip with
PIP_CONFIG_FILE=/dev/null for versions above the cap. The table it prints goes in docs/compat.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VENVS = ROOT / ".compat"
DEPS = ["typer>=0.12,<0.29", "rich>=13", "depyf>=0.20", "pandas>=2.0", "msgspec>=0.19", "vl-convert-python>=1.6",
        "pytest>=8", "jsonschema>=4", "altair>=5.4", "scipy>=1.11"]
TESTS = ["tests/test_torch_internals.py", "tests/test_doctor.py", "tests/test_graph_code.py"]
SAMPLE_ARGS = {"train_ddp.py": ["--steps", "3"], "transformer_lm.py": ["--steps", "6"]}
# Samples that need a library the version's venv does not install: skipped (said so), not failed.
SAMPLE_NEEDS = {"deepspeed_zero.py": "deepspeed"}


def venv_python(version: str) -> Path:
    return VENVS / f"venv-{version}" / "bin" / "python"


def install(version: str) -> None:
    python = venv_python(version)
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(python.parent.parent)], check=True)
    env = {**os.environ}
    if version != "2.13.0":
        env["PIP_CONFIG_FILE"] = "/dev/null"  # a machine-wide cap on torch would refuse the version asked for
    torch = f"torch=={version}"
    subprocess.run([str(python), "-m", "pip", "install", "-q", torch, *DEPS], check=True, env=env)
    # cagtool's own pin on torch is what is being checked: install it without resolving it.
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", "-e", str(ROOT)], check=True, env=env)


def _run(argv: list[str], timeout: float = 900) -> tuple[int, str, float]:
    began = time.monotonic()
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=str(ROOT), env={**os.environ, "CI": "true"})
        return proc.returncode, proc.stdout + proc.stderr, time.monotonic() - began
    except subprocess.TimeoutExpired:
        return 124, "timed out", time.monotonic() - began


def check(version: str, out_dir: Path) -> dict:
    python = str(venv_python(version))
    result: dict = {"torch": version}
    code, text, _ = _run([python, "-c", "import torch; print(torch.__version__)"])
    result["installed"] = text.strip() if code == 0 else f"import failed: {text[-300:]}"
    code, text, wall = _run([python, "-m", "pytest", "-q", "-p", "no:cacheprovider", *TESTS])
    failures = [line for line in text.splitlines() if line.startswith(("FAILED", "ERROR"))]
    result["internals_tests"] = {"exit": code, "summary": (text.strip().splitlines() or [""])[-1], "wall_s": round(wall), "failures": failures,
                                 "tail": "" if code == 0 else text[-3000:]}
    code, text, _ = _run([python, "-m", "cagtool", "doctor", "--format", "json"])
    try:
        doctor = json.loads(text[text.index("{"):])
    except ValueError:
        doctor = {"raw": text[-500:]}
    result["doctor"] = {"exit": code, "checks": doctor.get("checks", doctor)}
    captures = {}
    for script in sorted((ROOT / "sample_scripts").glob("*.py")):
        need = SAMPLE_NEEDS.get(script.name)
        if need and _run([python, "-c", f"import {need}"])[0] != 0:
            captures[script.name] = {"exit": None, "skipped": f"needs {need}, not installed here"}
            continue
        run_dir = out_dir / f"{version}-{script.stem}"
        shutil.rmtree(run_dir, ignore_errors=True)  # an earlier check's record: this one records afresh
        code, text, wall = _run([python, "-m", "cagtool", "run", "--modes", "ca", "--backend", "eager", "--no-report", "-o", str(run_dir),
                                 str(script), *SAMPLE_ARGS.get(script.name, [])])
        graphs = None
        try:
            manifest = json.loads((run_dir / "ca" / "manifest.json").read_text())
            graphs = manifest.get("torch_counters", {}).get("compiled_autograd", {}).get("captures", 0)
        except (OSError, ValueError):
            pass
        captures[script.name] = {"exit": code, "ca_captures": graphs, "wall_s": round(wall), "tail": "" if code == 0 else text[-400:]}
    result["captures"] = captures
    result["passed"] = (result["internals_tests"]["exit"] == 0 and result["doctor"]["exit"] == 0
                        and all(c["exit"] == 0 for c in captures.values() if not c.get("skipped")))
    return result


def table(results: list[dict]) -> str:
    lines = ["| torch | internals, doctor and graph-code tests | `cagtool doctor` | sample captures (ca, eager backend) | verdict |", "| --- | --- | --- | --- | --- |"]
    for r in results:
        ran = {name: c for name, c in r["captures"].items() if not c.get("skipped")}
        ok = sum(c["exit"] == 0 for c in ran.values())
        failed = [name for name, c in ran.items() if c["exit"] != 0]
        skipped = [f"{name}: {c['skipped']}" for name, c in r["captures"].items() if c.get("skipped")]
        lines.append(f"| {r['installed']} | {r['internals_tests']['summary']} | exit {r['doctor']['exit']} | {ok} of {len(ran)}"
                     f"{' (failed: ' + ', '.join(failed) + ')' if failed else ''}{' (skipped ' + '; '.join(skipped) + ')' if skipped else ''}"
                     f" | {'verified' if r['passed'] else 'NOT verified'} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("versions", nargs="+")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--install-only", action="store_true")
    parser.add_argument("--out", type=Path, default=VENVS / "runs")
    args = parser.parse_args()
    results = []
    for version in args.versions:
        install(version)
        if args.install_only:
            continue
        results.append(check(version, args.out))
        print(f"torch {version}: {'verified' if results[-1]['passed'] else 'NOT verified'}", file=sys.stderr, flush=True)
    if results:
        print(table(results))
        if args.json:
            args.json.write_text(json.dumps({"date": time.strftime("%Y-%m-%d"), "results": results}, indent=1) + "\n")
    return 0 if all(r["passed"] for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
