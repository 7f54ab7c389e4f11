"""Run a gate: load the run (and baseline), build the checks from the settings, evaluate them.

The library half of `cagtool gate` and `cagtool run --gate`: returns a `GateResult`, writes
nothing (report.gate_output renders and writes files).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cagtool.errors import EXIT_GATE_FAILED, EXIT_INCONCLUSIVE, EXIT_OK, UnreadableInput, UsageError
from cagtool.record.integrity import refuse_damaged
from cagtool.record.loader import RunRecord, load_run
from cagtool.record.schema import IMPORTED_MODE, STATUS_RUNNING
from cagtool.report.gate.baseline import (
    Baseline,
    environment_warnings,
    load_baseline,
    ranks_trained,
    run_snapshots,
)
from cagtool.report.gate.checks import (
    insist_on_power,
    BASELINE,
    FILES_UNNAMED,
    RECOMPILE_KINDS,
    Check,
    CheckResult,
    CompileTimeRegressionCheck,
    CountLimit,
    MaxCountCheck,
    MaxMemoryRatioCheck,
    MinSpeedupCheck,
    ModeStatusCheck,
    Outcome,
    StepTimeRegressionCheck,
    evaluate_all,
)
from cagtool.report.gate.config import GateSettings, resolve_settings
from cagtool.report.gate.ranks import per_rank_results, processes_followed, ranks_as_baseline, run_level_results
from cagtool.report.ranks.analysis import analyze_ranks, focused_run, not_followed

if TYPE_CHECKING:
    from cagtool.report.recompiles.explain import Cause, Explanation


@dataclass(frozen=True)
class GateOptions:
    """Everything a gate needs besides the run. `settings` holds the thresholds given as flags;
    they are merged over `[tool.cagtool.gate]` of `config` (or of the pyproject.toml found
    upward from cwd) unless `use_config` is False."""

    settings: GateSettings = field(default_factory=GateSettings)
    config: Path | None = None
    use_config: bool = True
    strict: bool = False
    format: str = "text"  # text | json
    junit: Path | None = None
    rank: int | None = None  # multi-rank runs: check only this rank's thresholds (None: every rank)


@dataclass(frozen=True)
class GateResult:
    run_path: Path
    mode: str
    settings: GateSettings  # merged: flags over config
    config_path: Path | None
    baseline_path: Path | None
    results: list[CheckResult]
    warnings: list[str]
    ranks: tuple[int, ...] = ()  # the ranks whose records were checked (multi-rank runs only)

    @property
    def passed(self) -> bool:
        return not any(r.failed for r in self.results)

    @property
    def inconclusive(self) -> bool:
        return self.passed and any(r.outcome is Outcome.INCONCLUSIVE for r in self.results)

    @property
    def exit_code(self) -> int:
        if not self.passed:
            return EXIT_GATE_FAILED
        return EXIT_INCONCLUSIVE if self.inconclusive else EXIT_OK

    def count(self, outcome: Outcome) -> int:
        return sum(1 for r in self.results if r.outcome is outcome)

    @property
    def failures(self) -> list[CheckResult]:
        return [r for r in self.results if r.failed]


def default_mode(run: RunRecord) -> str:
    """The mode gated when --mode is not given: the most informative one the run *asked for*
    (ca, then aot, then eager), recorded or not. A ca mode that never ran is then gated, and fails
    as missing, rather than eager's record being read in its place."""
    return run.default_mode_name() or "ca"


_CA_METRICS = frozenset({"ca_graphs", "ca_recompiles", "ca_cache_misses"})


def build_checks(settings: GateSettings, mode: str, baseline: Baseline | None) -> list[Check]:
    """The checks the settings ask for, in a stable order. Without explicit count limits, a
    baseline's own counts are the limits (exact, direction-aware)."""
    if not settings.has_thresholds():
        raise UsageError(
            "no gate thresholds: give flags such as --max-recompiles 0 or --baseline FILE, "
            "or a [tool.cagtool.gate] table in pyproject.toml (see cagtool gate --help)"
        )
    for name, value in (("--max-regression", settings.max_regression or None), ("--max-compile-regression", settings.max_compile_regression)):
        if value is not None and baseline is None:
            raise UsageError(f"{name} compares against a baseline: give --baseline FILE (or baseline = ... in the config)")

    ratios = [
        replace(r, numerator=r.numerator or mode) for r in settings.max_memory_ratio.values()
    ]
    if any(r.denominator == BASELINE for r in ratios) and baseline is None:
        raise UsageError("--max-memory-ratio baseline:R compares against a baseline: give --baseline FILE (or baseline = ... in the config)")
    modes = [
        mode,
        *(m for t in settings.min_speedup.values() for m in (t.numerator, t.denominator)),
        *(m for r in ratios for m in (r.numerator, r.denominator) if m != BASELINE),
    ]
    modes_checked = list(dict.fromkeys(modes))
    checks: list[Check] = [ModeStatusCheck(m) for m in modes_checked]

    def count(name: str, metric: str, given: CountLimit | None, source: str) -> None:
        if given is not None:
            # A compiled-autograd limit is about the ca mode whichever mode is gated: aot and
            # eager capture no CA graph by design, so their 0 would pass (or read "improved") on a
            # run that never measured CA. An imported trace has one mode, holding what the job did.
            # Said, never silent: the check's note, and the report's header (`gated_mode`).
            counted = "ca" if metric in _CA_METRICS and mode != IMPORTED_MODE else mode
            if counted not in modes_checked:
                modes_checked.append(counted)
                checks.insert(len(modes_checked) - 1, ModeStatusCheck(counted))
            checks.append(MaxCountCheck(name, metric, counted, given.limit, source, gated_mode=mode))
        elif baseline is not None:  # the baseline's own count of the same mode: like against like
            checks.append(MaxCountCheck(name, metric, mode, None, "baseline"))

    count("max-ca-graphs", "ca_graphs", settings.max_ca_graphs, settings.source_of("max_ca_graphs"))
    if settings.max_recompiles:
        for kind in RECOMPILE_KINDS:
            if kind in settings.max_recompiles:
                name = "max-recompiles" if kind == "total" else f"max-recompiles:{kind}"
                count(name, RECOMPILE_KINDS[kind], settings.max_recompiles[kind], settings.source_of("max_recompiles", kind))
    elif baseline is not None:
        for kind in ("ca", "dynamo"):
            checks.append(MaxCountCheck(f"max-recompiles:{kind}", RECOMPILE_KINDS[kind], mode, None, "baseline"))
    count("max-graph-breaks", "graph_breaks", settings.max_graph_breaks, settings.source_of("max_graph_breaks"))
    for pair, threshold in settings.min_speedup.items():
        checks.append(MinSpeedupCheck(threshold, source=settings.source_of("min_speedup", pair)))
    for key, ratio in zip(settings.max_memory_ratio, ratios):
        checks.append(MaxMemoryRatioCheck(ratio, source=settings.source_of("max_memory_ratio", key)))
    # One check per step-time field; a median or mean check watches the tail (warns on a p90
    # regression beyond the noise) unless the p90 has a threshold of its own.
    for field_name, threshold in settings.max_regression.items():
        name = "max-regression" if field_name == "median" else f"max-regression:{field_name}"
        watch = "p90" not in settings.max_regression
        checks.append(StepTimeRegressionCheck(threshold, mode, name=name, source=settings.source_of("max_regression", field_name), watch_tail=watch))
    if settings.max_compile_regression is not None:
        checks.append(
            CompileTimeRegressionCheck(settings.max_compile_regression, mode, source=settings.source_of("max_compile_regression"))
        )
    return checks


def _evaluate(
    checks: list[Check], run: RunRecord, mode: str, baseline: Baseline | None, fail_on_improvement: bool, rank: int | None
) -> tuple[list[CheckResult], tuple[int, ...]]:
    """The checks on the run: on its records as they are for a single-process run; for a multi-rank
    one, the launcher's status, then every check on every rank's record (gate/ranks.py), then the
    run-level rank checks."""
    base = baseline.modes if baseline is not None else None
    snapshots = run_snapshots(run)
    record = run.modes.get(mode)
    analysis = analyze_ranks(record) if record is not None else None
    if analysis is None or not analysis.rows:
        if rank is not None and record is not None:
            run.mode(record.path.name, rank=rank)  # --rank on a run without that rank: UnreadableInput naming the ranks (none)
        blind = [f.message for f in not_followed(record)] if record is not None else []
        if blind:  # its training ran in processes not followed (processes-followed fails), not in it
            checks = [replace(c, launcher=True) if isinstance(c, ModeStatusCheck) else c for c in checks]
        results = evaluate_all(checks, snapshots, base, fail_on_improvement)
        if blind:
            results.append(processes_followed(mode, blind))
        return results, ()
    if rank is not None:
        run.mode(record.path.name, rank=rank)  # raises UnreadableInput naming the ranks there are
    ranks = (rank,) if rank is not None else analysis.ranks
    launcher = [replace(c, launcher=True) for c in checks if isinstance(c, ModeStatusCheck)]
    results = evaluate_all(launcher, snapshots, base, fail_on_improvement) if record.rank is None else []
    results += per_rank_results(checks, run, ranks, base, fail_on_improvement)
    results += run_level_results(analysis)
    return results, ranks


_RECOMPILE_METRICS = ("recompiles", "ca_recompiles", "dynamo_recompiles", "ca_cache_misses")


def _causes_of(explanation: "Explanation", metric: str | None) -> list["Cause"]:
    from cagtool.report.compare.headline import root_causes
    from cagtool.report.recompiles.table import SOURCE_CA

    by_number = {c.number: c for c in explanation.causes}

    def counted(cause: "Cause") -> bool:
        rows = [row for c in (cause, *(by_number[n] for n in cause.consequences if n in by_number)) for row in c.rows]
        if metric in ("ca_recompiles", "ca_cache_misses"):
            return any(row.source == SOURCE_CA for row in rows)
        if metric == "dynamo_recompiles":
            return any(row.source != SOURCE_CA for row in rows)
        return True

    return [c for c in root_causes(explanation) if counted(c)]


def _with_causes(results: list[CheckResult], run: RunRecord, mode: str, rank: int | None) -> list[CheckResult]:
    """A failed recompile count names its cause, step and line (report.recompiles.explain, as
    `recompiles --explain` words it): `CA recompiles 2 > 0 allowed (+2): the size of `args[0]`
    (dim 0) changed 32->4 ... at step 3 (train.py:19)`, in the terminal, annotations and JUnit,
    which all print the message. The cause's source line goes into `data` for the annotation."""
    failed = [r for r in results if r.failed and r.outcome is Outcome.FAIL and r.data.get("metric") in _RECOMPILE_METRICS and r.mode == mode]
    record = run.modes.get(mode) if rank is None else None
    if not failed or record is None:
        return results
    from cagtool.report.compare.headline import cause_phrase
    from cagtool.report.recompiles.explain import explain
    from cagtool.report.recompiles.table import recompile_table

    explanation = explain(recompile_table(record))
    out = []
    for r in results:
        # The causes behind the figure the check counts: a CA count's causes are those with a CA
        # capture (their own or a consequence's), a Dynamo count's those with a Dynamo recompile.
        roots = _causes_of(explanation, r.data.get("metric"))
        if r in failed and roots:
            more = f"; and {len(roots) - 1} more cause{'s' if len(roots) > 2 else ''} (cagtool recompiles --explain)" if len(roots) > 1 else ""
            source = roots[0].facts.get("state_changed_at") or roots[0].source  # the line cause_phrase names
            data = dict(r.data, cause=cause_phrase(roots[0]))
            if source is not None:
                data["source"] = {"file": source.file, "line": source.line}
            r = replace(r, message=f"{r.message}: {cause_phrase(roots[0])}{more}", data=data)
        out.append(r)
    return out


GRAPH_BREAK_REASONS_NAMED = 2  # in a failed graph-break count's line; the rest are counted, and summary lists them


def _with_graph_break_reasons(results: list[CheckResult], run: RunRecord, mode: str, rank: int | None) -> list[CheckResult]:
    """A failed graph-break count names its reasons and lines, as a failed recompile count names its
    cause (`graph breaks 3 > 0 allowed (+3): 2 at train.py:10: [GB0059] Failed to trace builtin
    operator; 1 at train.py:10: [GB0124] Unsupported Tensor.item() call ...`), most breaks first, the
    first two and how many more; the first one's line goes into `data` for the annotation."""
    failed = [r for r in results if r.failed and r.outcome is Outcome.FAIL and r.data.get("metric") == "graph_breaks" and r.mode == mode]
    record = run.modes.get(mode) if rank is None else None
    if not failed or record is None:
        return results
    from cagtool.report.figures.metrics import graph_break_reasons, mode_metrics, place_words

    reasons = sorted(graph_break_reasons(mode_metrics(record).graph_break_sites), key=lambda r: -r.breaks)  # stable: first seen among equals
    if not reasons:
        return results
    from cagtool.report.recompiles.reads import torch_frames_in_captures

    theirs = torch_frames_in_captures(record).break_places  # torch's own frames inside compiled autograd's captures (torch 2.14)

    def torchs(r: Any) -> str:
        return " (torch's frames inside compiled autograd's captures)" if set(r.places) <= theirs else ""

    def unresumable(r: Any) -> str:
        return " (Dynamo could not resume after it: the rest of the function ran eagerly; torch's own count leaves it out)" if r.unresumable else ""

    said = "; ".join(f"{r.breaks} at {place_words(r.places, 2)}{torchs(r)}: {r.label}{unresumable(r)}" for r in reasons[:GRAPH_BREAK_REASONS_NAMED])
    rest = len(reasons) - GRAPH_BREAK_REASONS_NAMED
    if rest > 0:
        said += f"; and {rest} more reason{'s' if rest > 1 else ''} (cagtool summary)"
    # The annotation goes on a line of the job's where there is one, not on torch's.
    places = [(file, line) for r in reasons for file, line in r.places if file and line is not None]
    first = next((p for p in places if p not in theirs), places[0] if places else None)
    out = []
    for r in results:
        if r in failed:
            data = dict(r.data, reasons=[{"gb_id": x.gb_id, "gb_type": x.gb_type, "breaks": x.breaks,
                                          "places": [{"file": file, "line": line} for file, line in x.places]} for x in reasons])
            if first is not None:
                data["source"] = {"file": first[0], "line": first[1]}
            r = replace(r, message=f"{r.message}: {said}", data=data)
        out.append(r)
    return out


def _with_written_files(results: list[CheckResult], run: RunRecord) -> list[CheckResult]:
    """A mode that trained nothing (mode-finished ERROR) and started after earlier modes wrote files in
    the job's directory (run.json `written_before`: a checkpoint it resumed from at the job's end)
    names those files, where the message only pointed at `cagtool compare`."""
    written = run.meta.written_before or {}
    out = []
    for r in results:
        files = written.get(r.mode.split("@")[0])
        if r.check == "mode-finished" and r.outcome is Outcome.ERROR and files is not None and FILES_UNNAMED in r.message:
            r = replace(r, message=r.message.replace(FILES_UNNAMED, f"it started after an earlier mode wrote {files.shown()} there", 1),
                        data={**r.data, "written_before": list(files.paths)})
        out.append(r)
    return out


def _speed_of_other_numerics(checks: list[Check], run: RunRecord) -> list[str]:
    """A speedup between two modes of the run whose numerics disagree (compare's rule, drift told
    apart by the gradients) times two different computations: said, as compare withholds its own
    verdict on it ("not a verdict: its numerics differ"). `--max-grad-diff` is the check that fails on it."""
    from cagtool.report.gate.checks import MinSpeedupCheck

    pairs = {(c.threshold.numerator, c.threshold.denominator) for c in checks if isinstance(c, MinSpeedupCheck)}
    pairs = {pair for pair in pairs if all(mode in run.modes for mode in pair)}
    if not pairs:
        return []
    from cagtool.report.compare.analysis import run_numerics
    from cagtool.report.compare.closeness import Tolerance
    from cagtool.report.compare.grad_parity import grad_parity

    # A multi-rank run's numerics are its lowest rank's records' (as compare reads them), not the launcher's.
    numerics = run_numerics(focused_run(run, None)[0], Tolerance(), grad_parity(run))
    wrong: dict[str, Any] = {}
    for d in numerics.disagreements:  # the loss's difference where it jumped: it names the step
        if d.record not in wrong or d.jumped_at is not None:
            wrong[d.record] = d
    said = []
    for numerator, denominator in sorted(pairs):
        for mode in (numerator, denominator):
            if (d := wrong.get(mode)) is not None and numerics.reference in (numerator, denominator):
                where = f" (its losses jump apart at step {d.jumped_at})" if d.jumped_at is not None else ""
                said.append(f"numerics of {mode} DISAGREE with {numerics.reference}{where}: min-speedup ({numerator}/{denominator}) times two "
                            "different computations (cagtool compare says why; gate --max-grad-diff 1 fails on it)")
    return said


def _speed_of_other_compilers(checks: list[Check], run: RunRecord) -> list[str]:
    """A ca/aot min-speedup whose two backwards different compilers compiled (the CA graphs by
    cagtool's --backend, aot's by the script's torch.compile): said, as compare's note does."""
    from cagtool.report.gate.checks import MinSpeedupCheck

    if not any(isinstance(c, MinSpeedupCheck) and {c.threshold.numerator, c.threshold.denominator} == {"ca", "aot"} for c in checks):
        return []
    from cagtool.report.figures.pooled import compilers_differ

    differ = compilers_differ(focused_run(run, None)[0])
    if not differ:
        return []
    ca, aot = differ
    return [f"min-speedup (ca/aot): the ca mode's backward was compiled by {ca}, the aot mode's by {aot} (the script's "
            "torch.compile): the ratio compares compilers as well as compiled autograd"]


def run_gate(run_path: str | Path | None, options: GateOptions | None = None) -> GateResult:
    """Gate a recorded run. Raises UsageError (exit 2) for bad or missing thresholds and
    UnreadableInput (exit 3) for an unreadable run or baseline; a failed check is in the result."""
    options = options or GateOptions()
    settings, config_path = resolve_settings(options.settings, options.config, options.use_config)
    if not settings.has_thresholds():
        build_checks(settings, "ca", None)  # raises the usage error before any loading
    run = load_run(run_path, strict=options.strict, columns=True)
    refuse_damaged(run, "gating it")
    if run.meta.status == STATUS_RUNNING:
        # The loader reads a run whose cagtool process is gone as killed: this one's runs (or ran on
        # another host). Its modes not yet run, or running, are no failures, and no verdict is whole.
        raise UnreadableInput(f"run {run.path} is still being recorded (its cagtool process is running, or it was copied while it "
                              "ran): gate it once `cagtool run` has finished")
    baseline = load_baseline(settings.baseline) if settings.baseline is not None else None
    mode = settings.mode or default_mode(run)
    checks = build_checks(settings, mode, baseline)
    results, ranks = _evaluate(checks, run, mode, baseline, bool(settings.fail_on_improvement), options.rank)
    held = baseline.mode(mode) if baseline is not None else None
    if held is not None and held.ranks is not None and mode in run.modes:
        results.append(ranks_as_baseline(mode, ranks_trained(run.modes[mode]), held.ranks))
    results = _with_causes(results, run, mode, options.rank)
    results = _with_graph_break_reasons(results, run, mode, options.rank)
    results = _with_written_files(results, run)
    if settings.max_grad_diff is not None:
        from cagtool.report.gate.grad_parity_check import grad_parity_result

        results.append(grad_parity_result(run, settings.max_grad_diff, settings.source_of("max_grad_diff")))
    if settings.require_power:
        results = [insist_on_power(r) for r in results]
    warnings = environment_warnings(baseline, run) if baseline is not None else []
    warnings += _speed_of_other_numerics(checks, run)
    warnings += _speed_of_other_compilers(checks, run)
    if settings.mode is None and mode not in ("ca", IMPORTED_MODE):  # an imported run has only that mode
        warnings.append(f"the run did not ask for the ca mode: gating mode {mode} (--mode to choose)")
    for name, record in run.modes.items():
        if record.skipped_lines:
            warnings.append(f"mode {name}: {record.skipped_lines} unreadable event lines skipped (--strict makes this an error)")
    return GateResult(
        run_path=run.path,
        mode=mode,
        settings=settings,
        config_path=config_path,
        baseline_path=settings.baseline,
        results=results,
        warnings=warnings,
        ranks=ranks,
    )
