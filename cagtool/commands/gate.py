"""`cagtool gate`: fail CI when compiled autograd gets worse. Also the gate flags that
`cagtool run --gate` shares (`with_gate_options`)."""

from __future__ import annotations

import functools
import inspect
from dataclasses import replace
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Callable, List, Optional

import typer

from cagtool.commands._common import RUN_ARG, STRICT_OPT, TextOrJson

if TYPE_CHECKING:
    from cagtool.report.gate import GateOptions

GATE_HELP = """Check a recorded run against CI thresholds; exit 1 when one is exceeded.

Thresholds come from flags and from [tool.cagtool.gate] in the nearest pyproject.toml (flags win). Counts are exact and direction-aware: more than allowed fails; fewer is reported as IMPROVED (tighten the limit or refresh the baseline), and --fail-on-improvement makes that fail too. With --baseline, the baseline's own counts are the limits of the counts not given. Speedups, step time and compile time go through one rule (docs/ci.md), with each process as one piece of evidence (its steps share its state): a check FAILS when the 90% interval of the ratio lies wholly beyond its threshold, PASSES when it lies wholly within it, and is INCONCLUSIVE (exit 5) when it contains it, saying how many processes would resolve it, or that the machine's run-to-run noise is wider than the threshold. Step time is CPU time per step where both sides' steps were CPU-bound on one thread (the machine's load moves it less), else wall time. Where neither side has 3 processes the run-to-run noise is assumed (two processes +/-79% apart in CPU time, +/-166% in wall time, 90% of the time: what this check prints as A/A): one run a side then catches a slowdown of 2.0x in CPU time or 2.9x in wall time at a 10% threshold (2.2x and 3.3x at 25%), never a 5% one. For a gate that resolves small changes, save the baseline from several processes (run --repeat 5, or baseline save --accumulate) and keep the threshold above the A/A noise each check prints. Fewer than 5 steady steps is an error. --require-power turns INCONCLUSIVE into a failure (exit 1). A median step-time threshold also warns (one line naming the tail) when the p90 alone regressed; --max-regression p90:PCT fails on it.

Threshold grammar: counts N or KIND:N (--max-recompiles kinds: total, ca, dynamo; repeat the flag for several); speedups X or NUM/DEN:X (default ca/aot, i.e. aot step time / ca step time); memory ratios R, NUM/DEN:R (default ca/aot) or baseline:R; times PCT, PCT%, or SECONDSs, and for --max-regression FIELD:... with FIELD median (default), mean, p10 or p90 (repeat the flag for several fields).

Multi-rank runs (DDP): every threshold holds for every rank on its own (per rank, not summed: --max-recompiles ca:0 means no rank recompiled; results labelled ca@rank1, a rank the script started again (a second process group) ca@rank1#2 for its second start; --rank N checks one), and the gate fails when a rank is missing (fewer rank records than the world size), failed, or was not followed (process_not_followed), or when the ranks diverge (different CA graphs or cache misses, step counts, or final norms).

The result is kept in the run (gate.json, the latest gate's), so `cagtool report RUN` shows it.

Exit codes: 0 passed; 1 a check failed, or could not count a process (named: steps whose wall, CPU or device time is no time, a figure of 0 s from a clock coarser than the steps); 2 usage error; 3 unreadable run or baseline (also two repetitions with the same step times, also with some steps edited, shifted or reordered: one process's record under two names); 5 inconclusive: no check failed, and a timing check could not be decided on this evidence.

Examples:

  \b
  cagtool gate --max-ca-graphs 1 --max-recompiles ca:0 --max-graph-breaks 0

  \b
  cagtool gate RUN --min-speedup 1.05 --junit gate.xml

  \b
  cagtool gate --baseline cagtool-baseline.json --max-regression 25% --max-regression p90:40% --max-compile-regression 50%

  \b
  cagtool gate --format json | jq .checks
"""

# The flags `cagtool gate` and `cagtool run --gate` share: name -> (annotation, typer option).
_GATE_FLAG_PARAMS: dict[str, tuple[Any, Any]] = {
    "max_ca_graphs": (Optional[str], typer.Option(None, "--max-ca-graphs", metavar="N", help="Most compiled-autograd graphs allowed.", rich_help_panel="Gate")),
    "max_recompiles": (
        Optional[List[str]],
        typer.Option(None, "--max-recompiles", metavar="[KIND:]N", help="Most recompiles allowed: N (total), ca:N (CA cache misses), dynamo:N (Dynamo recompiles). Repeatable.", rich_help_panel="Gate"),
    ),
    "max_graph_breaks": (Optional[str], typer.Option(None, "--max-graph-breaks", metavar="N", help="Most graph breaks allowed.", rich_help_panel="Gate")),
    "min_speedup": (
        Optional[List[str]],
        typer.Option(None, "--min-speedup", metavar="[NUM/DEN:]X", help="Least speedup of step time: X for ca/aot, or e.g. ca/eager:1.2. Repeatable.", rich_help_panel="Gate"),
    ),
    "max_memory_ratio": (
        Optional[List[str]],
        typer.Option(None, "--max-memory-ratio", metavar="[NUM/DEN:|baseline:]R", help="Most peak memory ratio (CUDA max allocated, else peak RSS): R for ca/aot, e.g. ca/eager:1.5, or baseline:1.1 (the gated mode vs the baseline's). Repeatable.", rich_help_panel="Gate"),
    ),
    "baseline": (Optional[Path], typer.Option(None, "--baseline", metavar="FILE", help="Baseline JSON (cagtool baseline save); its counts become limits unless given.", rich_help_panel="Gate")),
    "max_regression": (
        Optional[List[str]],
        typer.Option(None, "--max-regression", metavar="[FIELD:]PCT", help="Most step-time regression vs the baseline: 10, 10%, 0.002s (median), or FIELD:... with FIELD mean, p10 or p90 (p90:15% gates the tail). Repeatable. A median or mean threshold warns on a p90 regression beyond the noise unless p90 has its own.", rich_help_panel="Gate"),
    ),
    "max_compile_regression": (
        Optional[str],
        typer.Option(None, "--max-compile-regression", metavar="PCT", help="Most total compile-time regression vs the baseline: 25, 25%, 0.5s. Each process's compile time is one unit (run --repeat, baseline save --accumulate); with fewer than 3 a side the run-to-run noise is assumed and only a change beyond it is called.", rich_help_panel="Gate"),
    ),
    "fail_on_improvement": (
        Optional[bool],
        typer.Option(None, "--fail-on-improvement/--no-fail-on-improvement", help="Fail when a check improved, so the limit or baseline gets refreshed.", show_default=False, rich_help_panel="Gate"),
    ),
    "require_power": (
        Optional[bool],
        typer.Option(None, "--require-power/--no-require-power", help="Fail (exit 1) a timing check the evidence could not decide, instead of the gate's INCONCLUSIVE outcome (exit 5).", show_default=False, rich_help_panel="Gate"),
    ),
    "max_grad_diff": (
        Optional[str],
        typer.Option(None, "--max-grad-diff", metavar="X", help="Fail when a mode's gradients differ from eager's, per parameter at the digested steps, beyond X times the tolerance set by dtype and size (1, 2x, auto = 1; see cagtool compare).", rich_help_panel="Gate"),
    ),
    "rank": (Optional[int], typer.Option(None, "--rank", min=0, metavar="N", help="Multi-rank runs: hold only rank N to the thresholds (default: every rank).", rich_help_panel="Gate")),
    "junit": (Optional[Path], typer.Option(None, "--junit", metavar="FILE", help="Also write JUnit XML, one testcase per check.", rich_help_panel="Gate")),
    "no_config": (bool, typer.Option(False, "--no-config", help="Ignore [tool.cagtool.gate] in pyproject.toml.", rich_help_panel="Gate")),
}
_THRESHOLD_KEYS = (
    "max_ca_graphs", "max_recompiles", "max_graph_breaks", "min_speedup", "max_memory_ratio", "baseline",
    "max_regression", "max_compile_regression", "fail_on_improvement", "require_power", "max_grad_diff",
)


def gate_options_from_flags(
    *,
    config: Optional[Path] = None,
    no_config: bool = False,
    junit: Optional[Path] = None,
    format: str = "text",
    strict: bool = False,
    mode: Optional[str] = None,
    rank: Optional[int] = None,
    **thresholds: Any,
) -> GateOptions:
    """GateOptions from raw flag values (strings, as typed); parses the threshold grammar now,
    so a bad threshold is a usage error before anything runs."""
    from cagtool.report.gate import GateOptions, settings_from_values

    unknown = set(thresholds) - set(_THRESHOLD_KEYS)
    if unknown:
        raise TypeError(f"unknown gate flags: {sorted(unknown)}")
    settings = settings_from_values({**thresholds, "mode": mode}, "flag")
    return GateOptions(settings=settings, config=config, use_config=not no_config, strict=strict, format=format, junit=junit, rank=rank)


def with_gate_options(config_flag: str | tuple[str, ...] = "--gate-config", none_when_unset: bool = False) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator for a typer command: adds the gate flags (thresholds, --baseline,
    --fail-on-improvement, --junit, CONFIG_FLAG, --no-config) and passes them to the command,
    parsed, as its keyword argument `gate_options: GateOptions`.

        @with_gate_options()
        def run(script: str = typer.Argument(...), gate: bool = typer.Option(False, "--gate"),
                *, gate_options: GateOptions) -> None:
            ...
            if gate or gate_options.settings.has_thresholds():
                raise typer.Exit(gate_and_report(run_dir, gate_options))
    """

    def decorate(func: Callable[..., Any]) -> Callable[..., Any]:
        signature = inspect.signature(func)
        hints = _type_hints(func, skip="gate_options")
        own = [p for p in signature.parameters.values() if p.name != "gate_options"]
        added = {**_GATE_FLAG_PARAMS, "config": (Optional[Path], typer.Option(None, *((config_flag,) if isinstance(config_flag, str) else config_flag), metavar="PYPROJECT", help="Read [tool.cagtool.gate] from this file instead of the nearest pyproject.toml.", rich_help_panel="Gate"))}
        params = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) if p.kind is inspect.Parameter.VAR_KEYWORD else p for p in own]
        # A flag that takes one value is collected as a list, so that giving it twice is refused
        # (click keeps the last): a CI owner who wrote two thresholds must not get one silently.
        once = {name: _given_once(ann) for name, (ann, _opt) in added.items() if _given_once(ann) is not None}
        added = {name: ((Optional[List[once[name]]], opt) if name in once else (ann, opt)) for name, (ann, opt) in added.items()}  # type: ignore[valid-type]
        params += [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=opt, annotation=ann) for name, (ann, opt) in added.items()]

        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            raw = {name: kwargs.pop(name) for name in added if name in kwargs}
            for name in once:
                raw[name] = _the_one_value(raw.get(name), added[name][1].param_decls)
            # `cagtool run` without a gate flag: None, and the gate code (~0.08 s of imports) is
            # not loaded before the first mode starts; `--gate` alone builds the
            # default options when the run ends.
            unset = none_when_unset and all(value == added[name][1].default for name, value in raw.items())
            kwargs["gate_options"] = None if unset else gate_options_from_flags(**raw)
            return func(*args, **kwargs)

        wrapper.__signature__ = inspect.Signature(params, return_annotation=signature.return_annotation)  # type: ignore[attr-defined]
        wrapper.__annotations__ = {
            **{k: v for k, v in hints.items() if k != "gate_options"},
            **{name: ann for name, (ann, _opt) in added.items()},
        }
        return wrapper

    return decorate


def _given_once(annotation: Any) -> Any:
    """X for an option annotated Optional[X] that takes one value (str, int, a path), else None
    (repeatable lists, on/off flags)."""
    import typing

    args = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
    return args[0] if len(args) == 1 and args[0] in (str, int, Path) else None


def _the_one_value(values: Optional[List[Any]], names: Any) -> Any:
    if not values:
        return None
    if len(values) > 1:
        from cagtool.errors import UsageError

        shown = ", ".join(str(value) for value in values)
        raise UsageError(f"{'/'.join(names)} given {len(values)} times ({shown}): give it once")
    return values[0]


def _type_hints(func: Callable[..., Any], skip: str) -> dict[str, Any]:
    """The function's annotations resolved, as typing.get_type_hints would (string annotations are
    evaluated in the function's module), minus `skip`, which may name a type imported locally."""
    namespace = getattr(func, "__globals__", {})
    return {
        name: eval(annotation, namespace) if isinstance(annotation, str) else annotation  # noqa: S307 - source annotations
        for name, annotation in getattr(func, "__annotations__", {}).items()
        if name != skip
    }


def gate_and_report(run_path: str | Path | None, options: GateOptions, stdout: Optional[IO[str]] = None, save: bool = False) -> int:
    """Gate a run and write its report (to `stdout`, default sys.stdout: `cagtool run --gate`
    passes sys.stderr, the script owning stdout), plus --junit, GitHub annotations and the step
    summary; with `save`, keep the result in the run (gate.json) for `cagtool report`. Returns
    the exit code (0 passed, 1 failed). Usage and unreadable-input problems raise CagtoolError
    (exit 2 / 3) as usual."""
    from cagtool.report.gate import emit_gate_result, run_gate
    from cagtool.report.gate.output import keep_gate_result

    result = run_gate(run_path, options)
    code = emit_gate_result(result, options, stdout=stdout)
    if save:
        keep_gate_result(result)
    return code


def register(app: typer.Typer) -> None:
    @app.command("gate", help=GATE_HELP, no_args_is_help=False)
    @with_gate_options(config_flag=("--config", "--gate-config"))
    def gate(
        run: Optional[str] = RUN_ARG,
        mode: Optional[str] = typer.Option(None, "--mode", help="Mode whose counts and step time are gated: ca, aot or eager (default: the most informative the run asked for, ca first, recorded or not)."),
        format: TextOrJson = typer.Option(TextOrJson.text, "--format", help="Report format on stdout."),
        strict: bool = STRICT_OPT,
        *,
        gate_options: GateOptions,
    ) -> None:
        from cagtool.report.gate import merge, settings_from_values

        settings = gate_options.settings
        if mode is not None:
            settings = merge(settings, settings_from_values({"mode": mode}, "flag"))
        options = replace(gate_options, settings=settings, strict=strict, format=format.value)
        code = gate_and_report(run, options, save=True)
        if code:
            raise typer.Exit(code)

