"""`cagtool recompiles`: every recompile of a recorded run, and with --explain why and what to do."""

from __future__ import annotations

import gc
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Optional

import typer

from cagtool.commands._common import RUN_ARG, STRICT_OPT, TextOrJson

if TYPE_CHECKING:
    from cagtool.record.loader import RunRecord
    from cagtool.report.ranks.analysis import RankFocus
    from cagtool.report.recompiles import RecompileTable
    from cagtool.report.recompiles.explain import Explanation


@dataclass(frozen=True)
class RecompilesOptions:
    run: Optional[str] = None  # run directory; None: the latest
    explain: bool = False
    format: str = "text"  # text | json
    strict: bool = False
    mode: Optional[str] = None  # one mode; None: every mode of the run
    rank: Optional[int] = None  # multi-rank runs: this rank's record; None: rank 0
    width: Optional[int] = None  # console width (tests); None: the terminal's or 100
    verify: bool = False  # re-run the job with each applicable fix and measure it
    repeat: int = 3  # repetitions of the baseline and of each fix (--verify)
    fix: Optional[str] = None  # verify this fix only
    rerun_timeout: Optional[float] = None  # --verify: seconds a re-run may take (None: the default, from the record; 0: no limit)


def recompile_tables(
    run: str | None, strict: bool = False, mode: str | None = None, rank: int | None = None
) -> tuple[RunRecord, list[RecompileTable], list[RankFocus]]:
    """The tables of the named mode, or of every mode of the run, and one line per multi-rank mode
    saying which ranks exist and whether they diverge. A multi-rank mode's table is rank `rank`'s
    (default: rank 0). Lenient reads parse only what recompiles needs (recompiles_load); --strict
    reads and validates every line with the one loader."""
    from cagtool.record.loader import load_run
    from cagtool.record.schema import StepEvent
    from cagtool.report.recompiles import StepSummary, load_filtered, recompile_table, step_summary

    record = load_run(run, strict=True) if strict else load_filtered(run)[0]
    if mode is None and not record.modes:
        record.mode()  # raises UnreadableInput: the run has no mode records (killed before any began)
    if mode is not None:
        chosen = record.mode(mode)
        modes = [(next((key for key, r in record.modes.items() if r is chosen), chosen.mode), chosen)]
    else:
        modes = list(record.modes.items())
    tables, notes = [], []
    for key, main in modes:
        if rank is None and not main.processes and main.rank is None:
            focused, note = main, None  # one process: nothing to focus on or say (no ranks analysis imported)
        else:
            from cagtool.report.ranks.analysis import focus_note, focus_record

            focused, focus = focus_record(record, main, rank)
            note = focus_note(main, focus)
        steps = step_summary(focused) if strict else StepSummary.counted(focused.kind_counts[StepEvent.kind])
        table = recompile_table(focused, steps)
        if key != table.mode:
            table.label = key
        tables.append(table)
        if note is not None:
            notes.append(note)
    return record, tables, notes


def run_recompiles(options: RecompilesOptions, out: IO[str] | None = None, err: IO[str] | None = None) -> int:
    """Load, analyse, render. Raises UnreadableInput (exit 3) for a missing, corrupt or newer record."""
    # The events, rows and explanations hold no reference cycles: the cyclic collector would only
    # rescan the tens of thousands of objects decoding allocates, again and again (~10 ms here).
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _run_recompiles(options, out, err)
    finally:
        if was_enabled:
            gc.enable()


def _run_recompiles(options: RecompilesOptions, out: IO[str] | None, err: IO[str] | None) -> int:
    out = out if out is not None else sys.stdout
    err = err if err is not None else sys.stderr
    if not options.verify and (options.fix is not None or options.rerun_timeout is not None):
        from cagtool.errors import UsageError

        given = "--fix" if options.fix is not None else "--rerun-timeout"
        raise UsageError(f"{given} applies to --verify's re-runs: add --verify (nothing is re-run without it)")
    from cagtool.report.text.console import make_console
    from cagtool.report.recompiles import (
        ExplanationRenderer,
        RecompilesJsonRenderer,
        RecompilesTableRenderer,
        explain,
        print_wrapped,
        record_notes,
    )

    record, tables, rank_notes = recompile_tables(options.run, options.strict, options.mode, options.rank)
    run_label = str(options.run) if options.run else ""
    run_label = run_label or str(record.path)
    if options.rank is not None:
        run_label += f" --rank {options.rank}"  # the hints it ends up in name the same rank
    explanations = [explain(t) for t in tables] if options.explain or options.verify else None
    verification = None
    if options.verify:
        assert explanations is not None
        verification = _verify(record, tables, explanations, options, err)
    if options.format == TextOrJson.json.value:
        text = RecompilesJsonRenderer().render(str(record.path), tables, explanations, ranks=[n.to_json() for n in rank_notes])
        if verification is not None:
            import json

            text = json.dumps({**json.loads(text), "verification": verification.to_dict()}, indent=2)
        out.write(text + "\n")
        for table in tables:
            for note in record_notes(table):
                print(f"cagtool: {note}", file=err)
        return 0
    console = make_console(out, width=options.width)
    for note in rank_notes:
        print_wrapped(console, note.line)
    if explanations is not None:
        ExplanationRenderer(console).render(explanations, run_label)
        for table, explanation in zip(tables, explanations):
            from cagtool.torch_text import pgo_shown

            if (said := pgo_suggestion(record, table.name)) is not None:
                print_wrapped(console, f"Torch's own words (its PGO, mode {table.name}): {pgo_shown(said, table.name)}" + pgo_scope(explanation, said))
    else:
        RecompilesTableRenderer(console).render(tables, run_label)
    if verification is not None:
        from cagtool.report.recompiles.verification import verification_lines

        for line in verification_lines(verification.to_dict()):
            print_wrapped(console, line)
    return 0


def _one_run_a_patch(patches: dict) -> None:
    """Causes whose patches are one edit (a hook two causes trace back to) share one patch, and one
    re-run; two different edits of one kind get names of their own (name-2), so no two re-runs
    claim one name (each names its folder under verify/). Edits not made are one only where their
    reason is one: each cause keeps why its own was not made."""
    by_name: dict = {}
    for number, patch in patches.items():
        first = by_name.get(patch.name)
        if first is None:
            by_name[patch.name] = patch
        elif (first.patched, first.diff, first.why_not) == (patch.patched, patch.diff, patch.why_not):
            first.causes = tuple(sorted({*first.causes, *patch.causes}))
            patches[number] = first
        else:
            k = 2
            while f"{patch.name}-{k}" in by_name:
                k += 1
            patch.name = f"{patch.name}-{k}"
            by_name[patch.name] = patch


def _verify(record: "RunRecord", tables: list, explanations: list, options: RecompilesOptions, err: IO[str]):
    """--verify: the fixes for the verified mode's causes, applied by re-running the job."""
    from cagtool.errors import UsageError
    from cagtool.record.seal import check_job, sealed_bytes
    from cagtool.verify.fixes import fixes_for, patch_fix, unanswered_causes
    from cagtool.verify.last_batch import drop_last_patch, fix_call
    from cagtool.verify.patch import reimports_script
    from cagtool.verify.patches import patch_for, with_evaluations_recompiles
    from cagtool.verify.verification import estimate_seconds, rerun_key, verify

    # Before the record's script is read for a patch or anything runs: a job this user recorded, unchanged.
    check_job(record.path, record.meta.job_seal, record.meta.target, record.meta.target_argv, record.meta.cwd, dict(record.meta.options or {}))
    mode = options.mode or ("ca" if "ca" in record.modes else next(iter(record.modes)))
    index = next((i for i, t in enumerate(tables) if t.name == mode), 0)
    explanation = explanations[index]
    # A repetition of `run --repeat K` (`ca.3`): its explanation, re-run as its mode (`run --modes ca`).
    mode = tables[index].mode if tables[index].name == mode else mode
    from cagtool.report.recompiles.explain import advises_drop_last, ca_started_dynamic, plural

    # ca-dynamic changes nothing where compiled autograd already started dynamic: `run --dynamic`,
    # or the script's own `_enable(compiler, dynamic=True)` (its first graph took its sizes as inputs).
    started_dynamic = bool((record.meta.options or {}).get("dynamic")) or ca_started_dynamic(tables[index])
    fixes = fixes_for(explanation, dynamic_already=started_dynamic, pgo_suggestion=pgo_suggestion(record, mode))
    configured = {n for f in fixes for n in f.causes}
    script, display = _script_of(record)
    # The explanation's "drop the last batch": a code change measured beside the run settings that
    # answer the same causes, never in their place.
    roots = {c.number for c in explanation.causes if advises_drop_last(c, record.meta.cwd or "")}
    last_batch = tuple(c.number for c in explanation.causes if c.number in roots or c.caused_by in roots)  # with what follows from them
    # Read once, checked against the seal: a patched copy is made of what was checked, never of
    # what the path holds after check_job read it (a file swapped between the two would run).
    source = sealed_bytes(record.meta.job_seal, script) if script is not None and (last_batch or any(
        c.number not in configured for c in explanation.causes)) else None
    patches = {}
    for cause in explanation.causes:
        if cause.number not in configured and (patch := patch_for(cause, script, display, source, list(record.meta.target_argv or ())[1:])) is not None:
            patches[cause.number] = patch
    if script is not None:
        patches = {n: with_evaluations_recompiles(p, explanation.causes, script) for n, p in patches.items()}
    _one_run_a_patch(patches)
    recorded = record.modes.get(mode)
    reimports = reimports_script(recorded)
    if reimports:
        for patch in patches.values():
            if patch.applicable:
                patch.applicable, patch.patched = False, None
                patch.why_not = ("the job's worker processes (DDP ranks, multiprocessing spawn) re-import the script by its path, "
                                 "so they would run your file, not a patched copy: apply the diff and record again")
    fixes += [patch_fix(p) for p in {id(p): p for p in patches.values()}.values() if p.applicable]
    dropped = drop_last_patch(last_batch, script, display, source) if last_batch else None
    if dropped is not None and dropped.applicable and reimports:
        dropped.applicable, dropped.patched = False, None
        dropped.why_not = "the job's worker processes re-import the script by its path, so they would run your file, not a patched copy"
    if dropped is not None and dropped.applicable:
        fixes.append(patch_fix(dropped))
    applicable = {n for f in fixes for n in f.causes}
    if options.fix is not None:
        names = [f.name for f in fixes]
        wanted = [w.strip() for w in options.fix.split(",") if w.strip()]
        unknown = [w for w in wanted if w not in names]
        if unknown or not wanted:
            raise UsageError(f"--fix {options.fix}: no such fix applies to this run's causes (applicable: {', '.join(names) or 'none'})")
        fixes = [f for f in fixes if f.name in wanted]
    answered = {n for f in fixes for n in f.causes}
    not_applied = unanswered_causes(explanation, answered, applicable, patches, record.meta.cwd or "", options.fix)
    if dropped is not None and not dropped.applicable:
        # Said beside the cause even where a run setting answers it: the explanation's first advice.
        not_applied += [{"cause": n, "code": next(c.code for c in explanation.causes if c.number == n), "who": "your code",
                         "why": f"{fix_call(dropped)}, the explanation's fix for the last batch, not applied: {dropped.why_not}",
                         "patch": None, "nothing_to_change": False} for n in dropped.causes]
    if not fixes:
        # Nothing re-runs without a fix: no baseline is announced that never runs.
        needs_change = not not_applied or not all(item["nothing_to_change"] for item in not_applied)
        said = "no fix cagtool can apply answers these causes" if needs_change else "the explanation finds nothing to change in your code for these causes"
        print(f"cagtool: nothing to verify in mode {mode}: {said}", file=err, flush=True)
    else:
        reruns = len({rerun_key(record, mode, options.repeat, f) for f in fixes})
        estimate = estimate_seconds(record, mode, options.repeat, reruns)
        when = f"; estimated {estimate:.0f} s" if estimate is not None else ""
        same = f" ({len(fixes) - reruns} the same re-run as another)" if reruns < len(fixes) else ""
        print(f"cagtool: verifying {plural(len(fixes), 'fix', 'fixes')}{same} in mode {mode}: the baseline and each fix "
              f"{plural(options.repeat, 'time')}, each its own process{when}", file=err, flush=True)
    from cagtool.report.text.safe_text import safe_line

    # The lines quote the record (its paths, a fix's environment): shown, never obeyed by the terminal.
    from cagtool.report.recompiles.explain import cause_key

    return verify(record.path, mode, fixes, options.repeat, not_applied, progress=lambda line: print(f"cagtool: {safe_line(line)}", file=err, flush=True),
                  cause_keys={c.number: cause_key(c, explanation.causes) for c in explanation.causes}, rerun_timeout=options.rerun_timeout)


def pgo_scope(explanation: "Explanation", said: str = "") -> str:
    """What torch's PGO line can remove, where it cannot: its profile marks every size that changed
    between two compiles of a frame, also across a recompile for another cause (an evaluation under
    no_grad with a larger batch), which starting those sizes dynamic would not remove."""
    import re

    from cagtool.report.recompiles.explain import size_recompiles
    from cagtool.report.recompiles.table import SOURCE_DYNAMO_CA_GRAPH
    from cagtool.torch_text import size_guard, specialised_size, tree_source

    # A source torch lists that a value recompile above is on (a dropout's `p` changed): its profile
    # marks a Python number too, and starting it dynamic is another matter than a size.
    listed = re.search(r'TORCH_COMPILE_DYNAMIC_SOURCES="([^"]*)"', said)
    values = {tree_source(c.source) for cause in explanation.causes for c in cause.facts.get("value_changes") or ()}
    if listed and any(source in values for source in listed.group(1).split(",")):
        return ""

    if size_recompiles(explanation) and explanation.total:
        guards = [guard for cause in explanation.causes for _, guard in cause.facts.get("failures") or ()
                  if guard and (size_guard(guard) is not None or specialised_size(guard) is not None)]
        # Every size guard on the compiled modules' shared frame was another module's first call (a
        # GAN's G, then D: D's input has another size): a size torch's profile notes, not one
        # module's input changing. torch 2.13, checked by hand on a spectral-norm GAN: with the
        # source torch lists set, D's first call recompiles on the same size guard (a size the
        # module's weight ties is specialised).
        others = [guard for cause in explanation.causes if cause.facts.get("other_module") or cause.facts.get("other_module_by_guards")
                  for _, guard in cause.facts.get("failures") or () if guard and size_guard(guard) is not None]
        if guards and len(others) == len(guards) == size_recompiles(explanation) and not any(
                row.source == SOURCE_DYNAMO_CA_GRAPH for row in explanation.table.recompiles):
            return (" [cagtool: every size recompile of this mode was another compiled module's first call on the frame the "
                    "compiled modules share (cause above), not a change of one module's input: this setting would not remove "
                    "them]")
        sizes = [size_guard(guard) for guard in guards]
        # torch 2.13, checked by hand: TORCH_COMPILE_DYNAMIC_SOURCES leaves a first size of 1 specialised,
        # and a last batch of one row (a dynamic size carries `2 <= x.size()[0]`).
        if sizes and all(size is not None and size[2] in (0, 1) for size in sizes):
            return (" [cagtool: every size recompile of this mode was from a first size of 0 or 1, which Dynamo specialises "
                    "even in a source named dynamic: this setting would not remove them]")
        # Said only where those guards are every size recompile of the mode: compiled autograd's misses
        # on sizes and Dynamo's recompiles of its graphs' code (on `L['sizes'][i]`) are the setting's too.
        only_these = len(guards) == size_recompiles(explanation) and not any(
            row.source == SOURCE_DYNAMO_CA_GRAPH for row in explanation.table.recompiles)
        if sizes and only_these and all(size is None or size[3] in (0, 1) for size in sizes):
            return (" [cagtool: every size recompile of this mode was for a size of 0 or 1 (a batch of one row), which Dynamo "
                    "specialises even in a source named dynamic: this setting would not remove them]")
        return ""
    if not explanation.total:
        return ""
    return (" [cagtool: no recompile of this mode failed on a tensor's size: the sizes changed at a recompile for another "
            "cause above (torch's profile notes them there too), and this setting would not remove it]")


def pgo_suggestion(record: "RunRecord", mode: str) -> str | None:
    """torch's profile-guided suggestion recorded for the mode (capture/observe/torch_logs.py),
    verbatim; for a multi-rank mode, rank 0's."""
    found = record.modes.get(mode)
    ranks = found.ranks() if found is not None else {}
    if ranks:  # a multi-rank mode: rank 0's, the record `recompiles` explains
        found = ranks[next(iter(ranks))]
    said = (found.manifest.options or {}).get("pgo_suggestion") if found is not None else None
    # torch words it on one printable line: anything else (a line break, an escape, a NUL) is not
    # torch's, and is neither shown nor put in a re-run's environment.
    return said if isinstance(said, str) and said.isprintable() else None


def _script_of(record: "RunRecord") -> tuple[str | None, str | None]:
    """The recorded job's script (a path to read) and its name as the record gives it; (None,
    None) for a module job."""
    import os

    target = record.meta.target or {}
    if target.get("kind") != "script":
        return None, None
    from cagtool.report.recompiles.reads import display_path

    return os.path.join(record.meta.cwd or ".", target["name"]), display_path(target["name"], record.meta.cwd or "")


def recompiles(
    run: Optional[Path] = RUN_ARG,
    explain_: bool = typer.Option(False, "--explain", help="Group recompiles by root cause; say why and what to do."),
    format: TextOrJson = typer.Option(TextOrJson.text, "--format", help="text (a table or the explanation) or json."),
    strict: bool = STRICT_OPT,
    mode: Optional[str] = typer.Option(None, "--mode", help="Only this mode's record: ca, aot or eager (default: every mode of the run)."),
    rank: Optional[int] = typer.Option(None, "--rank", min=0, metavar="N", help="Multi-rank runs: rank N's recompiles (default: rank 0)."),
    verify: bool = typer.Option(False, "--verify", help="Re-run the job with each fix cagtool can apply (no edit of your script) and measure it: verified, no effect or harmful."),
    repeat: int = typer.Option(3, "--repeat", min=1, help="With --verify: runs of the baseline and of each fix, each its own process."),
    fix: Optional[str] = typer.Option(None, "--fix", metavar="NAME[,NAME]", help="With --verify: only these fixes, comma-separated (the names under --verify above)."),
    rerun_timeout: Optional[float] = typer.Option(
        None, "--rerun-timeout", min=0, metavar="SECONDS",
        help="With --verify: stop a re-run that takes longer (SIGTERM, then SIGKILL; a fix that hangs the job is FAILED, "
             "the baseline stops the verification). Default: 10x the recorded mode's time, at least 600 s; 0: no limit."),
) -> None:
    """Every recompile of a recorded run: why the backward (or a forward frame) was compiled again.

    Reads the record `cagtool run` wrote (the latest run by default); nothing is re-run.

    Three sources of recompiles, named with the ids torch prints:

      CA miss !N: compiled autograd missed its cache and captured graph !N; kind "new node" (the
      autograd graph's structure differs) or "shapes" (sizes changed).

      Dynamo F/C: Dynamo recompiled forward frame F because a guard failed.

      Dynamo CA !N/F/C: Dynamo recompiled the code of compiled-autograd graph !N.

    The first capture of a run (!0, a miss on GraphRoot) is the initial compile: listed, not counted.

    A multi-rank run (DDP) shows rank 0's recompiles (--rank N for another), after a line naming
    the ranks recorded and whether they diverge (see `cagtool summary` for the per-rank table).

    With --explain, recompiles are grouped by root cause (the graph's structure changing between
    steps, a hook added or removed, .grad None vs defined, changed shapes, Dynamo guard failures);
    recompile storms and recompile-limit fallbacks to eager come first. Each cause names its
    evidence (compile ids, steps, and the seq of its events in <run>/<mode>/events.jsonl) and a fix.
    A compiled-autograd recompile that follows a forward recompile in the same step (the backward
    of one batch-size change) is listed under that cause, as its consequence (JSON: caused_by,
    consequences); a Dynamo recompile names the line of your code that called the recompiled code.

    With --verify, the job is run again (as recorded: script, arguments, cwd, backend, steps) in
    the verified mode, --repeat times as a baseline and --repeat times with each fix cagtool can
    apply without editing the script (ca-dynamic: compiled autograd's sizes start dynamic;
    dynamic-sources: Dynamo compiles the inputs whose size guards failed dynamic from the start,
    TORCH_COMPILE_DYNAMIC_SOURCES; accelerate-dynamic: where HF accelerate (HF Trainer's
    torch_compile=True) made the compile call, ACCELERATE_DYNAMO_USE_DYNAMIC=1; capture-scalars: where
    a frame resuming after a graph break on .item() recompiled on the number it returned,
    TORCHDYNAMO_CAPTURE_SCALAR_OUTPUTS=1), and with each code change it can make safely, shown as a
    diff against your script and run on a patched copy of it, never on the file itself
    (hook-before-loop: a hook registered mid-run registered before the loop, its condition left
    out; hook-dynamo-disable: a traced hook that Dynamo recompiles wrapped in
    torch._dynamo.disable; zero-grad-to-none: zero_grad(set_to_none=False) made True;
    scalar-to-tensor: a Python number Dynamo guards on passed as a tensor; backend-aot-eager: a
    custom autograd.Function in code compiled with backend="eager", compiled with "aot_eager";
    drop-last: the training DataLoader's smaller last batch dropped, drop_last=True, its losses
    not compared since it trains on fewer samples; eval-uncompiled: an evaluation under no_grad
    (or after model.eval()) that recompiles the model training uses calls the module before
    torch.compile); a code change it cannot make is shown with why not. A patch must keep what the job does: the backward hooks
    run are counted in each re-run, and a fix that runs fewer is harmful. A recompile torch's own PGO explains carries torch's suggestion verbatim, and
    torch-pgo verifies that suggestion applied as torch words it (torch-pgo-ca-dynamic: with
    ca-dynamic, where torch's list names the CA graph's inputs). Every fix, by the name --fix takes:

      \b
      ca-dynamic            dynamic-sources       torch-pgo
      torch-pgo-ca-dynamic  hook-before-loop      hook-dynamo-disable
      zero-grad-to-none     scalar-to-tensor      backend-aot-eager
      drop-last             accelerate-dynamic    eval-uncompiled
      capture-scalars

    Each fix gets before -> after for CA and Dynamo recompiles,
    compile time, time to first step, steady step time (with its 90% confidence interval), peak
    memory and numerics, and a verdict: verified, partly verified (a cause it answers is still there), no effect or harmful. The re-runs are kept
    under RUN/verify/<time>/, the result in RUN/verification.json (summary and report show it).

    --verify EXECUTES THE RECORDED JOB (its script, arguments and working directory, as run.json
    says), 2 x --repeat times or more. It runs only a job your own `cagtool run` recorded on this
    machine (run.json carries a seal made with your key, ~/.local/state/cagtool/record.key) and
    whose script is unchanged since (its SHA-256 is in the seal); any other record is refused
    (exit 3) before anything runs. The re-runs read no stdin (/dev/null); when the job fails
    without any fix, it says so and why (exit 1), and no fix is judged.

    Examples:

      \b
      cagtool recompiles                      # the latest run, as a table

      \b
      cagtool recompiles --explain --verify   # and prove each fix on your job (re-runs it)

      \b
      cagtool recompiles --explain            # why, and what to do

      \b
      cagtool recompiles RUN --format json    # for scripts (schema "cagtool-recompiles", version 1)

    Exit codes: 0 ok; 3 the record is missing, corrupt (with --strict) or from a newer cagtool;
    130 interrupted (Ctrl-C; with --verify, the re-runs made so far are kept and named, no verdict).
    """
    options = RecompilesOptions(
        run=str(run) if run is not None else None,
        explain=explain_,
        format=format.value,
        strict=strict,
        mode=mode,
        rank=rank,
        verify=verify,
        repeat=repeat,
        fix=fix,
        rerun_timeout=rerun_timeout,
    )
    raise typer.Exit(run_recompiles(options))


def register(app: typer.Typer) -> None:
    app.command("recompiles")(recompiles)
