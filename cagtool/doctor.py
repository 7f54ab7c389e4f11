"""`cagtool doctor`'s checks: can this machine record compiled autograd? Each check is a small
function returning a `Check`; `run_checks` runs them in order, in this process, in seconds.

What is checked is what `cagtool run` relies on (docs/torch-internals.md): the torch version and
the private compiled-autograd entry points cagtool wraps, the C++ compiler Inductor would call, a
tiny real compiled-autograd capture whose cache-miss messages still parse with cagtool's own
parser, and the directory runs are written to.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from collections.abc import Mapping
from typing import Any, Callable

OK = "ok"
WARN = "warn"  # works, but outside what cagtool was tested with
FAIL = "fail"

DOCTOR_FORMAT = "cagtool-doctor"
DOCTOR_VERSION = 1
TESTED_TORCH = "2.13"  # constraints.txt pins torch==2.13.0 (the install, the tests and CI)
# Versions on which compat/check_torch.py passed (the torch-internals and doctor tests, doctor and
# a capture of every sample script): docs/compat.md holds the table.
VERIFIED_TORCH = ("2.13.0", "2.14.1", "2.15.0")

# The private torch names cagtool wraps or calls (docs/torch-internals.md, "What is wrapped").
CA_ENTRY_POINTS = (
    "torch._dynamo.compiled_autograd._enable",
    "torch._dynamo.compiled_autograd.reset",
    "torch._dynamo.compiled_autograd.AutogradCompilerInstance.begin_capture",
    "torch._dynamo.compiled_autograd.AutogradCompilerInstance.log_compile_reasons",
    "torch._dynamo.compiled_autograd.AutogradCompilerInstance.end_capture",
    "torch._dynamo.compiled_autograd.AutogradCompilerInstance.create_graph_module",
    "torch._C._dynamo.compiled_autograd.set_verbose_logger",
    "torch._C._dynamo.compiled_autograd.set_autograd_compiler",
    "torch.autograd._engine_run_backward",
    "torch.autograd.graph._engine_run_backward",
    # what observe/dynamo_taps.py taps (its TAPPED; tests/test_dynamo_taps.py checks the two agree)
    "torch._dynamo.utils.add_compilation_metrics_to_chromium",
    "torch._dynamo.guards.get_and_maybe_log_recompilation_reasons",
    "torch._dynamo.convert_frame.get_and_maybe_log_recompilation_reasons",
    "torch._dynamo.symbolic_convert.InstructionTranslatorBase.log_graph_break",
    "torch._functorch._aot_autograd.graph_compile._log_fw_bw_graphs",
    "torch._functorch._aot_autograd.aot_autograd_result.GenericAOTAutogradResult._log_cached_graphs",
    # and its ARTIFACT_TAPPED (each compile's stack, graphs, output code, guards)
    "torch._dynamo.convert_frame.log_dynamo_start",
    "torch._dynamo.output_graph.OutputGraph.call_user_compiler",
    "torch._inductor.graph.GraphLowering._compile_to_module_lines",
    "torch._inductor.codecache.FxGraphCache.cache_hit_post_compile",
    "torch._dynamo.guards.CheckFunctionManager.__init__",
    # what observe/compiling_now.py wraps (the live status line's compile in progress)
    "torch._dynamo.callback.CompilationCallbackHandler.install_callbacks",
    # what capture/steps/hooks.py's replacement of _engine_run_backward runs in its place (torch 2.13's body)
    "torch.autograd.graph.log",
    "torch.autograd.graph._register_logging_hooks_on_whole_graph",
    "torch.autograd.variable.Variable._execution_engine.run_backward",
    "torch._C._stash_obj_in_tls",
    "torch._C._remove_obj_from_tls",
    "torch._dynamo.trace_rules.add",
    "torch.optim.optimizer.register_optimizer_step_pre_hook",
    "torch.optim.optimizer.register_optimizer_step_post_hook",
    # whose contexts' enter_exit_hooks capture/steps/hooks.py adds to (a compiled call's return)
    "torch._dynamo.eval_frame.OptimizeContext.__init__",
    # whose traced code capture/steps/hooks.py reads (a compile that traced an optimizer's step())
    "torch._dynamo.output_graph.OutputGraph.call_cleanup_hooks",
)

# What a compiler must get through for Inductor's CPU kernels: a C++17 translation unit.
_CXX_PROBE = "#include <cmath>\n#include <vector>\nint main() { std::vector<float> v(4, 1.0f); return (int)std::sqrt(v[0]) - 1; }\n"


@dataclass
class Check:
    name: str
    status: str  # ok | warn | fail
    detail: str
    seconds: float = 0.0
    facts: dict[str, Any] = field(default_factory=dict)


@dataclass
class DoctorReport:
    checks: list[Check]
    seconds: float

    @property
    def ok(self) -> bool:
        return all(c.status != FAIL for c in self.checks)

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": DOCTOR_FORMAT,
            "version": DOCTOR_VERSION,
            "ok": self.ok,
            "seconds": round(self.seconds, 3),
            "checks": [asdict(c) for c in self.checks],
        }


def _resolve(dotted: str) -> Any:
    """The object a dotted name points to, importing modules on the way; raises on a missing part."""
    import importlib

    parts = dotted.split(".")
    obj: Any = importlib.import_module(parts[0])
    for index, part in enumerate(parts[1:], start=1):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            obj = importlib.import_module(".".join(parts[: index + 1]))
    return obj


def check_python() -> Check:
    return Check("python", OK, f"{platform.python_version()} ({sys.executable})", facts={"version": platform.python_version()})


def check_torch() -> Check:
    try:
        import torch
    except Exception as exc:  # noqa: BLE001 - any failure to import is the finding
        return Check("torch", FAIL, f"cannot import torch: {type(exc).__name__}: {exc}; install it with: pip install -c constraints.txt torch")
    version = torch.__version__
    missing = []
    for name in CA_ENTRY_POINTS:
        try:
            _resolve(name)
        except (ImportError, AttributeError):
            missing.append(name)
    facts = {"version": version, "missing": missing}
    if missing:
        return Check("torch", FAIL, f"torch {version} lacks what cagtool wraps: {', '.join(missing)} (cagtool needs torch {TESTED_TORCH})", facts=facts)
    release = version.split("+", 1)[0]
    facts["verified"] = release in VERIFIED_TORCH
    if not facts["verified"]:
        return Check("torch", WARN, f"torch {version}: not verified (cagtool is verified on torch {', '.join(VERIFIED_TORCH)}; docs/compat.md); "
                     "compiled autograd present, message formats may differ: see the capture check", facts=facts)
    return Check("torch", OK, f"{version}: verified; compiled autograd present ({len(CA_ENTRY_POINTS)} entry points cagtool wraps found)", facts=facts)


def inductor_cxx() -> tuple[str | None, str]:
    """(compiler, how it was found): what Inductor itself picks (its config.cpp.cxx search: $CXX,
    else g++), or, without an importable Inductor, $CXX / g++ on PATH."""
    try:
        from torch._inductor import config as inductor_config
        from torch._inductor.cpp_builder import get_cpp_compiler
    except Exception as exc:  # noqa: BLE001 - no torch, or a broken one: look where Inductor would
        for name in (os.environ.get("CXX"), "g++", "c++", "clang++"):
            if name and shutil.which(name):
                return shutil.which(name), f"on PATH (Inductor not importable: {type(exc).__name__})"
        return None, f"none on PATH ($CXX, g++, c++, clang++) and Inductor not importable ({type(exc).__name__})"
    try:
        return get_cpp_compiler(), "torch._inductor.cpp_builder.get_cpp_compiler()"
    except Exception as exc:  # noqa: BLE001 - InvalidCxxCompiler: Inductor will fail the same way
        searched = [c for c in inductor_config.cpp.cxx if c]
        return None, f"Inductor searched {searched} and found none that runs ({type(exc).__name__})"


def check_cxx() -> Check:
    compiler, how = inductor_cxx()
    if compiler is None:
        return Check("c++ compiler", FAIL, f"none: {how}. Inductor (the default backend) needs one: install g++ (apt-get install g++) or set CXX; or run with --backend eager|aot_eager")
    try:
        version = subprocess.run([compiler, "--version"], capture_output=True, text=True, timeout=20).stdout.splitlines()[0:1]
        probe = subprocess.run([compiler, "-std=c++17", "-x", "c++", "-fsyntax-only", "-"], input=_CXX_PROBE, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as exc:
        return Check("c++ compiler", FAIL, f"{compiler} ({how}) does not run: {exc}")
    facts = {"compiler": compiler, "found_by": how, "version": version[0] if version else ""}
    if probe.returncode != 0:
        first = (probe.stderr.strip().splitlines() or ["no output"])[0]
        return Check("c++ compiler", FAIL, f"{compiler} cannot compile a small C++17 file: {first}", facts=facts)
    return Check("c++ compiler", OK, f"{compiler} ({facts['version'] or 'version unknown'}), compiles C++17; found by {how}", facts=facts)


@dataclass
class TinyCapture:
    """What a tiny real compiled-autograd run produced: graph class names and cache-miss reasons."""

    graphs: list[str]  # class names of the GraphModules the compiler received, e.g. CompiledAutograd0
    verbose_messages: list[str]  # what C++ passed to the verbose logger
    compile_reasons: list[list[str]]  # what log_compile_reasons received, per capture


def tiny_capture(sizes: tuple[int, ...] = (2, 2, 3)) -> TinyCapture:
    """Backward of (x * 2).sum() under compiled autograd (eager backend, static sizes), once per
    size: the first capture misses on GraphRoot, a repeated size hits, a new size misses on
    changed shapes. The state torch keeps is reset afterwards."""
    import torch
    from torch._dynamo import compiled_autograd as ca

    messages: list[str] = []
    reasons: list[list[str]] = []
    graphs: list[str] = []

    class Collect:
        def debug(self, message: str, *args: Any) -> None:
            messages.append(str(message) % args if args else str(message))

    collector = Collect()  # C++ holds a borrowed pointer: keep it alive until reset below
    original_reasons = ca.AutogradCompilerInstance.log_compile_reasons

    def log_compile_reasons(inst: Any, compile_reasons: list[str]) -> Any:
        reasons.append(list(compile_reasons))
        return original_reasons(inst, compile_reasons)

    def compiler_fn(gm: Any) -> Any:
        graphs.append(type(gm).__name__)
        return torch.compile(gm, backend="eager")

    ca.AutogradCompilerInstance.log_compile_reasons = log_compile_reasons
    torch._C._dynamo.compiled_autograd.set_verbose_logger(collector)
    try:
        with ca._enable(compiler_fn, dynamic=False):
            for n in sizes:
                x = torch.ones(n, 3, requires_grad=True)
                (x * 2).sum().backward()
    finally:
        ca.AutogradCompilerInstance.log_compile_reasons = original_reasons
        torch._dynamo.reset()  # drops the compiler, the verbose logger and the CA cache
    return TinyCapture(graphs, messages, reasons)


def check_capture() -> Check:
    try:
        from cagtool.torch_text import parse_miss

        capture = tiny_capture()
    except Exception as exc:  # noqa: BLE001 - any failure is the finding
        return Check("ca capture", FAIL, f"a tiny compiled-autograd backward failed: {type(exc).__name__}: {str(exc)[:300]}")
    misses = [m for m in capture.verbose_messages if m.startswith("Cache miss")]
    parsed = [parse_miss(m) for m in misses]
    kinds = [p["miss_kind"] for p in parsed]
    facts = {"graphs": capture.graphs, "messages": misses, "kinds": kinds, "compile_reasons": capture.compile_reasons}
    problems = []
    if len(capture.graphs) != 2:
        problems.append(f"expected 2 captures (sizes 2, 2, 3), got {len(capture.graphs)}")
    if kinds != ["new_node", "changed_shapes"]:
        problems.append(f"cache-miss messages parse as {kinds}, expected ['new_node', 'changed_shapes']: {misses}")
    elif parsed[0].get("node") != "torch::autograd::GraphRoot":
        problems.append(f"first miss names {parsed[0].get('node')!r}, expected torch::autograd::GraphRoot")
    if len(capture.compile_reasons) != len(capture.graphs):
        problems.append(f"log_compile_reasons called {len(capture.compile_reasons)} times for {len(capture.graphs)} captures")
    if problems:
        return Check("ca capture", FAIL, "; ".join(problems) + " (cagtool's recompile reports would be wrong on this torch)", facts=facts)
    return Check("ca capture", OK, f"{len(capture.graphs)} captures ({', '.join(capture.graphs)}); cache-miss messages parse: new node GraphRoot, then changed shapes", facts=facts)


def check_engine_copy() -> Check:
    """capture/steps/hooks.py runs a copy of torch 2.13's `_engine_run_backward` body in its place
    (capture/steps/engine_copy.py): the installed torch's must be the same code, or cagtool would run
    the job's backward through an older body than torch's."""
    from cagtool.capture.steps.engine_copy import FUNCTION, MODULE, compare_with_installed

    name = f"{MODULE}.{FUNCTION}"
    result = compare_with_installed()
    facts = {"source_file": result.source_file, "same": result.same, "diff": result.diff}
    if result.problem:
        return Check("backward entry", FAIL, f"{name}: {result.problem}", facts=facts)
    if not result.same:
        changed = sum(1 for line in result.diff.splitlines() if line[:1] in "+-" and line[:3] not in ("+++", "---"))
        return Check("backward entry", FAIL, f"{name} in this torch differs from the body cagtool runs in its place (torch 2.13's; "
                     f"{changed} lines differ, see --format json): `cagtool run` would change what the job's backward does", facts=facts)
    return Check("backward entry", OK, f"{name} is the body cagtool runs in its place (torch 2.13's, compared as code)", facts=facts)


def check_runs_dir(cwd: Path | None = None) -> Check:
    from cagtool.record.loader import DEFAULT_RUNS_DIR

    target = ((cwd or Path.cwd()) / DEFAULT_RUNS_DIR).resolve()
    existing = target
    while not existing.exists():
        existing = existing.parent
    facts: dict[str, Any] = {"path": str(target), "exists": target.exists()}
    try:
        if not existing.is_dir():
            raise OSError(f"{existing} is not a directory")
        with tempfile.TemporaryFile(dir=existing):
            pass
    except OSError as exc:
        return Check("runs dir", FAIL, f"{target}: cannot write in {existing} ({exc}); run elsewhere or pass -o DIR to cagtool run", facts=facts)
    free = shutil.disk_usage(existing).free
    facts["free_bytes"] = free
    where = "exists" if target.exists() else f"will be created under {existing}"
    status = WARN if free < 1 << 30 else OK
    low = " (under 1 GiB free: graphs and TORCH_TRACE logs may not fit)" if status == WARN else ""
    return Check("runs dir", status, f"{target} ({where}; writable; {free / 2**30:.1f} GiB free){low}", facts=facts)


def check_inductor_cache(env: Mapping[str, str] | None = None) -> Check:
    """What the job's Inductor cache holds of what Inductor keeps per machine (its CPU ISA checks,
    capture/run/inductor_machine.py): each mode's fresh cache starts with them; where there are none
    yet, every Inductor mode of the next run compiles them inside its compile time, as the plain
    job's first run does, and the run leaves them there. Informational: never a failure."""
    from cagtool.capture.run.inductor_machine import isa_checks, job_cache_dir

    cache = job_cache_dir(os.environ if env is None else env)
    found = len(isa_checks(cache))
    facts: dict[str, Any] = {"path": cache, "isa_checks": found}
    if found:
        return Check("inductor cache", OK, f"{cache}: {found} CPU ISA checks kept; each mode's fresh cache starts with them, "
                     "as the plain job finds them", facts=facts)
    return Check("inductor cache", OK, f"{cache}: no CPU ISA checks yet; the next Inductor run's modes each compile them inside "
                 "their compile time (~7 s on a 2-core VM), as the plain job's first run does, and leave them here", facts=facts)


CHECKS: tuple[Callable[[], Check], ...] = (check_python, check_torch, check_engine_copy, check_cxx, check_capture, check_inductor_cache, check_runs_dir)


def run_checks(checks: tuple[Callable[[], Check], ...] = CHECKS) -> DoctorReport:
    start = time.perf_counter()
    results: list[Check] = []
    torch_failed = False
    for check in checks:
        if check in (check_capture, check_engine_copy) and torch_failed:
            # Without a usable torch these cannot run; say so instead of a second traceback.
            results.append(Check("ca capture" if check is check_capture else "backward entry", FAIL, "skipped: the torch check failed"))
            continue
        t0 = time.perf_counter()
        result = check()
        result.seconds = round(time.perf_counter() - t0, 3)
        results.append(result)
        torch_failed = torch_failed or (result.name == "torch" and result.status == FAIL)
    return DoctorReport(results, time.perf_counter() - start)
