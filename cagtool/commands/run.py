"""`cagtool run`: run a training script under instrumented compiled autograd and record it."""

from __future__ import annotations

import math
import secrets
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer

from cagtool.errors import CagtoolError, UsageError

# cagtool.record.schema.MODES, spelled out so that registering `run` loads no record code
# (start-up time; tests/test_cli_startup.py checks the two agree).
DEFAULT_MODES = "eager,aot,ca"

if TYPE_CHECKING:
    from cagtool.record.loader import RunRecord
    from cagtool.report.gate import GateOptions


def parse_modes(text: str) -> tuple[str, ...]:
    from cagtool.record.schema import MODES

    modes = tuple(m.strip() for m in text.split(",") if m.strip())
    bad = [m for m in modes if m not in MODES]
    if bad or not modes:
        raise UsageError(f"--modes takes a comma-separated list of {', '.join(MODES)} (got {text!r})")
    if len(set(modes)) != len(modes):
        raise UsageError(f"--modes lists a mode twice: {text!r}")
    return modes


def write_summary_json(run_path: Path, dest: Path, run: "RunRecord | None" = None) -> None:
    """The machine-readable summary goes to a file: cagtool's stdout is the script's."""
    import json

    from cagtool.record.atomic import write_atomic
    from cagtool.record.loader import load_run
    from cagtool.report.summary import summary_json

    text = json.dumps(summary_json(run if run is not None else load_run(run_path)), indent=2, default=str) + "\n"
    try:
        write_atomic(dest, text)
    except OSError as exc:
        raise UsageError(f"cannot write --json {dest}: {exc.strerror or exc}") from None


# The longest --max-time (115 days): a bound the mode's interval timer and clocks can hold.
MAX_TIME_S = 1e7


def _check_json_destination(dest: Path) -> None:
    """--json's file can be written once the job ends: checked before it starts (an hours-long CI
    job must not end with a usage error about its output file)."""
    parent = dest.parent if str(dest.parent) else Path(".")
    if dest.is_dir():
        raise UsageError(f"cannot write --json {dest}: it is a directory")
    if not parent.is_dir():
        raise UsageError(f"cannot write --json {dest}: no directory {parent}")


def warm_end_of_run_imports(report: bool) -> None:
    """Import the code `cagtool run` needs after its last mode (the record reader, the summary and
    the mode comparison, report.html), so that it is loaded by the time the last mode ends
    (~0.09 s of CPU off the run's end). Run in a thread while the first mode process imports
    torch on one core; a failure here is left for the real import to report."""
    try:
        import cagtool.commands.summary  # noqa: F401
        import cagtool.record.columns  # noqa: F401
        import cagtool.record.loader  # noqa: F401
        import cagtool.report.compare.analysis  # noqa: F401
        import cagtool.report.compare.grad_parity  # noqa: F401
        import cagtool.report.compare.headline  # noqa: F401
        import cagtool.report.compare.render  # noqa: F401
        import cagtool.report.text.console  # noqa: F401
        import cagtool.report.summary  # noqa: F401
        import cagtool.report.recompiles.verification  # noqa: F401
        import cagtool.record.cpu_wait_file  # noqa: F401
        import cagtool.report.checkpointing  # noqa: F401
        import cagtool.report.recompiles.budget  # noqa: F401
        import cagtool.report.recompiles.budget_words  # noqa: F401
        import cagtool.report.recompiles.phases  # noqa: F401
        import cagtool.report.recompiles.unexpected  # noqa: F401

        if report:
            import cagtool.commands.report  # noqa: F401
            import cagtool.report.html.document  # noqa: F401
            import cagtool.report.html.phase_section  # noqa: F401
            from cagtool.report.html.document import prepare

            prepare()
            import vl_convert  # noqa: F401 - the Vega bundle's versions (vega_bundle.py)
    except Exception:  # noqa: BLE001 - see the docstring
        pass


def options_after_script(ctx: typer.Context, args: list[str], exit_codes: list[int | None]) -> list[str]:
    """The script's arguments that are `cagtool run`'s own options (`train.py -o out --modes ca`:
    cagtool's options written after the script, which passes them to it), where every mode exited
    with code 2, an argument parser's usage error. [] otherwise: a script may take `--steps` itself."""
    if not exit_codes or any(code != 2 for code in exit_codes):
        return []
    names = {name for param in ctx.command.params for name in (*param.opts, *param.secondary_opts) if name.startswith("-")}
    return list(dict.fromkeys(arg.split("=", 1)[0] for arg in args if arg.split("=", 1)[0] in names))


def run_command(
    ctx: typer.Context,
    script: Optional[str] = typer.Argument(None, metavar="SCRIPT [ARGS]...", help="The training script, then its own arguments.", show_default=False),
    module: Optional[str] = typer.Option(None, "-m", "--module", help="Run a module as `python -m MODULE` would."),
    output: Optional[str] = typer.Option(None, "-o", "--output", help="Run directory to write (default: ./.cagtool/runs/<script>-<time>)."),
    modes: str = typer.Option(DEFAULT_MODES, "--modes", help="Modes to run, each in a fresh process: eager (torch.compile off), aot (torch.compile as written, CA forced off), ca (compiled autograd on every backward)."),
    backend: str = typer.Option("inductor", "--backend", help="Backend that compiles compiled-autograd graphs: inductor, aot_eager or eager."),
    dynamic: bool = typer.Option(False, "--dynamic", help="Start CA sizes dynamic (default: static, as in the tutorial, so shape-change misses show)."),
    steps: Optional[int] = typer.Option(None, "--steps", min=1, help="Stop each mode after N steps: optimizer steps (a step ends at optimizer.step()), or top-level backward calls when the script has no optimizer."),
    max_time: Optional[float] = typer.Option(None, "--max-time", help="Stop each mode after S seconds (0.1 or more)."),
    repeat: int = typer.Option(
        1, "--repeat", min=1,
        help="Run the modes K times, in K blocks of one process per mode, each block's order shuffled. A time verdict needs "
        "K >= 5 (each process is one piece of evidence); with fewer, speedups are figures, not verdicts.",
    ),
    warm_cache: bool = typer.Option(False, "--warm-cache", help="Share the Inductor cache between modes instead of a fresh one per mode."),
    isolate_workdir: bool = typer.Option(
        False, "--isolate-workdir",
        help="Start every mode from the job's working directory as the first mode found it: what a mode creates there "
        "(a checkpoint the job would resume from) is moved into <run>/workdir/<mode>/ before the next mode and after the "
        "last. Files that were there before and that a mode changed cannot be put back (the comparison names them).",
    ),
    trace_nodes: bool = typer.Option(False, "--trace-nodes", help="Record where each autograd node was created (anomaly-mode tracebacks: exact source lines for recompiles, slower)."),
    depyf: bool = typer.Option(False, "--depyf", help="Also write depyf's readable dump of every compiled graph into the run directory. "
                                 "Compiled autograd's capture is then hidden from Dynamo (with depyf's hooks it recurses, "
                                 "as under plain torch), so Dynamo's frame counters are not the plain job's."),
    torch_trace: bool = typer.Option(False, "--torch-trace/--no-torch-trace", help="Also write a TORCH_TRACE log (open it with tlparse) in each mode's directory. Off by default: with it torch builds every structured record of every compile (graph code, guards), work the job does not do without it, so compile times include it."),
    seed: str = typer.Option("0", "--seed", metavar="N|off", help="Seed random, torch and numpy with N in every process of every mode before the script runs, so modes compare (a script that seeds itself still does); off: leave them unseeded."),
    parity_every: Optional[int] = typer.Option(None, "--parity-every", min=1, metavar="K", help="Also digest every parameter's gradient every K steps (always: step 0, steps that compiled or captured a graph, and the last step while its gradients are held at the end: not after a zero_grad() that follows the last step()); `cagtool compare` names the first step and parameter where modes disagree."),
    parity: bool = typer.Option(False, "--parity", help="Compiled modes draw random numbers as eager does (torch._inductor.config.fallback_random), so gradients of jobs with dropout compare across modes."),
    keep_cache: bool = typer.Option(False, "--keep-cache", help="Keep each mode's Inductor cache under <run>/inductor-cache (default: a temporary directory, removed when the run ends)."),
    fmt: str = typer.Option("text", "--format", hidden=True, help="Summary format on stderr: text. For JSON use --json FILE (stdout is the script's)."),
    json_file: Optional[str] = typer.Option(None, "--json", metavar="FILE", help="Also write the summary as JSON to FILE (what `cagtool summary --format json` prints)."),
    no_report: bool = typer.Option(False, "--no-report", help="Do not write report.html (the HTML report) into the run directory."),
    gate: bool = typer.Option(False, "--gate", help="Gate the run when it ends (thresholds from the flags below or [tool.cagtool.gate]); exit 1 if a check fails.", rich_help_panel="Gate"),
    *,
    gate_options: "GateOptions | None",  # None: no gate flag given (with_gate_options)
) -> None:
    """Run SCRIPT exactly as `python SCRIPT ARGS` would, under compiled autograd, and record it.

    Every backward the script makes is compiled by compiled autograd (CA) in the `ca` mode,
    whether or not the script asks for it (but where torch's compiled autograd captures nothing,
    as in a torch.func transform: the summary says so); each CA graph, cache miss (recompile) and Dynamo
    compile is recorded in a run directory that the other commands read. By default the script
    also runs in `eager` and `aot` mode, each in its own process, for a side-by-side comparison.

    Everything after SCRIPT goes to the script, but a first `--`, which is dropped
    (`cagtool run train.py -- --steps 3` passes `--steps 3`; to pass a `--` first, give it twice):

        \b
        cagtool run train.py --lr 3e-4
        cagtool run --modes ca --backend eager train.py
        cagtool run -m mypkg.train -- --lr 3e-4
        cagtool run torchrun --nproc-per-node 2 train.py     # every rank followed

        \b
        cagtool run --gate --max-recompiles ca:0 train.py     # record, then gate (CI)

    Before the script runs, cagtool seeds Python's random, torch and numpy with 0 (--seed N,
    or --seed off to leave them alone) in every mode and in every process the script starts
    (a torchrun worker gets N + its RANK), so that modes compute on the same numbers; a script
    that seeds itself keeps its own seed.

    The script's stdout and stderr are its own (the live status is drawn on the terminal's
    bottom row, never by capturing them); cagtool writes to stderr, and JSON with --json FILE.
    The exit code is the script's (130 after Ctrl-C, 143 after SIGTERM, 129 after SIGHUP;
    2 for bad arguments); with --gate, 1 when the script succeeded but a gate check failed.
    """
    from cagtool.capture.run.orchestrate import RunOptions, run
    from cagtool.capture.run.target import check_target

    args = list(ctx.args)
    if module and script is not None:
        args.insert(0, script)
        script = None
    if args and args[0] == "--":
        args = args[1:]
    if script is not None and script.startswith("-") and script != "-":
        raise UsageError(f"no such option: {script} (cagtool run [OPTIONS] SCRIPT [ARGS]...; see cagtool run --help)")
    if fmt == "json":
        raise UsageError("cagtool run --format json would mix JSON into the script's own stdout; use --json FILE, or `cagtool summary --format json` after the run")
    if fmt != "text":
        raise UsageError(f"--format on run takes text (got {fmt!r}); for JSON use --json FILE")
    if output is not None and not output.strip():
        raise UsageError("-o/--output is empty (an unset variable?); give a run directory, or leave -o out for the default")
    if json_file is not None and not str(json_file).strip():
        raise UsageError("--json is empty; give a file name")
    if backend not in ("inductor", "aot_eager", "eager"):
        raise UsageError(f"--backend takes inductor, aot_eager or eager (got {backend!r})")
    # Checked here, not by typer's min=: one message on every typer (0.29's range check words its own, and lets no NaN by).
    if max_time is not None and not (math.isfinite(max_time) and 0.1 <= max_time <= MAX_TIME_S):
        raise UsageError(f"--max-time takes seconds from 0.1 to {MAX_TIME_S:.0f} (got {max_time!r})")
    if json_file is not None:
        _check_json_destination(Path(json_file))
    if gate and gate_options is None:  # --gate alone: thresholds from [tool.cagtool.gate], read before the job runs
        from cagtool.commands.gate import gate_options_from_flags

        gate_options = gate_options_from_flags()
    if gate and gate_options is not None and not gate_options.settings.has_thresholds():
        raise UsageError("--gate with no gate thresholds: give flags such as --max-recompiles 0 or --baseline FILE, "
                         "or a [tool.cagtool.gate] table in pyproject.toml (see cagtool gate --help)")
    from cagtool.capture.run.seeding import parse_seed

    try:
        run_seed = parse_seed(seed)
    except ValueError:
        raise UsageError(f"--seed takes an integer from 0 to 2**63-1, or off (got {seed!r})") from None
    target = check_target(script, module, args)
    options = RunOptions(
        target=target,
        modes=parse_modes(modes),
        output=Path(output) if output is not None else None,
        keep_cache=keep_cache,
        backend=backend,
        dynamic=dynamic,
        steps=steps,
        max_time=max_time,
        repeat=repeat,
        warm_cache=warm_cache,
        isolate_workdir=isolate_workdir,
        trace_nodes=trace_nodes,
        depyf=depyf,
        torch_trace=torch_trace,
        seed=run_seed,
        parity_every=parity_every,
        parity=parity,
        cagtool_argv=tuple(sys.argv),
        order_seed=secrets.randbits(32) if repeat > 1 else None,
    )

    def progress(name: str, index: int, total: int) -> None:
        if total > 1:
            from cagtool.report.text.safe_text import safe_line

            # The script's name as given (a line break, a `::`, a `##[` in it): shown, never obeyed by a CI log.
            print(f"cagtool: mode {name} ({index}/{total}): running {safe_line(target.name)}", file=sys.stderr, flush=True)

    import threading

    warmer = threading.Thread(target=warm_end_of_run_imports, args=(not no_report,), name="cagtool-warm-imports", daemon=True)

    def started(name: str) -> None:
        if warmer.ident is None:  # the first mode process is importing torch: load the end-of-run code beside it
            warmer.start()

    outcome = run(options, on_progress=progress, on_started=started)
    if warmer.ident is not None:
        warmer.join()
    if outcome.startup_error:
        raise UsageError(outcome.startup_error)
    from cagtool.commands.summary import print_run_report
    from cagtool.record.loader import load_run

    # The record is read once, with its step columns: the summary, --json and report.html come
    # from this one copy in memory.
    record = load_run(outcome.path, columns=True)
    print_run_report(outcome.path, fmt="text", after_run=True, loaded=record)
    if json_file is not None:
        write_summary_json(outcome.path, Path(json_file), record)
    code = outcome.exit_code
    gate_result = None
    if (gate or (gate_options is not None and gate_options.settings.has_thresholds())) and code == 0:
        from cagtool.commands.gate import gate_options_from_flags
        from cagtool.report.gate.output import emit_gate_result, save_gate_result
        from cagtool.report.gate.run import run_gate

        if gate_options is None:  # --gate and no gate flag: thresholds from [tool.cagtool.gate]
            gate_options = gate_options_from_flags()

        gate_result = run_gate(outcome.path, gate_options)
        code = emit_gate_result(gate_result, gate_options, stdout=sys.stderr)
        try:
            save_gate_result(gate_result, outcome.path)  # for report.html, now and when re-rendered
        except CagtoolError as exc:
            print(f"cagtool: gate result not saved: {exc}", file=sys.stderr)
    if not no_report:
        from cagtool.commands.report import report_after_run

        report_after_run(outcome.path, gate_result, record)
    if (misplaced := options_after_script(ctx, args, [o.exit_code for o in outcome.outcomes])):
        print(f"cagtool: every mode exited with code 2 (a usage error?), and the script was given {', '.join(misplaced)}: "
              "cagtool run's own options, which after the script go to the script; put them before it: "
              "cagtool run [OPTIONS] SCRIPT [ARGS]...", file=sys.stderr)
    raise typer.Exit(code)


def register(app: typer.Typer) -> None:
    from cagtool.commands.gate import with_gate_options

    app.command(
        "run",
        context_settings={"allow_extra_args": True, "ignore_unknown_options": True, "allow_interspersed_args": False},
    )(with_gate_options(none_when_unset=True)(run_command))
