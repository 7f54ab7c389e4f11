"""A comparison as one JSON document (`--format json`): raw figures, for machines."""

from __future__ import annotations

import csv
import io
import math
from typing import Any

from cagtool.report.figures.metrics import load_range
from cagtool.report.text.safe_text import safe_line
from cagtool.report.compare.headline import Headline, change_headline, run_headline
from cagtool.report.compare.analysis import (
    AnyComparison,
    Comparison,
    ModeColumn,
    Numerics,
    NumericsDiff,
    RunComparison,
    Speedup,
    mode_fields,
    speedup,
)

JSON_FORMAT = "cagtool-compare"
JSON_RUNS_FORMAT = "cagtool-compare-runs"
JSON_SCHEMA_VERSION = 1


def finite(value: Any) -> Any:
    """JSON has no inf/nan: write them as strings a reader can still recognise."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def _speedup_json(s: Speedup) -> dict[str, Any]:
    return {
        "mode": s.mode,
        "baseline": s.baseline,
        "speedup": s.ratio,
        "low": s.low,
        "high": s.high,
        "within_noise": s.within_noise,
        "confidence": s.interval.confidence if s.interval else None,
        "interval_unit": s.interval.unit if s.interval else None,
        "interval_units": list(s.interval.units) if s.interval else None,
        "interval_method": s.interval.method if s.interval else None,  # sign | rank | t | assumed (noise not measured)
        "measure": s.interval.measure if s.interval else None,  # cpu | wall | device
        "run_to_run_noise": s.interval.spread if s.interval else None,  # A/A: two processes differ by up to this, 90% of the time
        "noise_measured": s.measured,
        "blocks_needed": s.blocks_needed,  # for an inconclusive verdict: run --repeat N
        # processes far from their side's others (intervals.OUTLIER_NOISES): the side (mode or baseline),
        # the process (its repetition), its median step time over the others'
        "outliers": [{"side": s.baseline if o.side == "top" else s.mode if o.side == "bottom" else o.side, "process": o.process, "times_others": o.factor}
                     for o in (s.interval.outliers if s.interval else ())],
        "verdict": s.verdict,
        "steady_steps": {"mode": s.steady_steps[0], "baseline": s.steady_steps[1]},
        "repetition_ratios": list(s.repetition_ratios),
        "load_factor": s.load_factor,  # what waiting for a CPU alone makes of the ratio, by the CPU-bound model (None: not measured)
        "load_range": list(load_range(s.load_factor, "cpu" if s.on_cpu else "wall")) if s.load_factor is not None else None,  # and by the law measured on torch steps
        # a median step that waited half its time or more; and the most the load may have slowed it
        "heavy_load": {"mode": s.heavy_load[0] is not None, "baseline": s.heavy_load[1] is not None},
        "heavy_load_bound": {"mode": s.heavy_load[0], "baseline": s.heavy_load[1]},
        # The two backwards' compilers where they differ (ca's by --backend, aot's by the script's torch.compile).
        "compilers": {"ca": s.compilers[0], "aot": s.compilers[1]} if s.compilers else None,
        # The steps each side ran to the job's own end, where they differ (Speedup.courses).
        "courses": {"baseline": s.courses[0], "mode": s.courses[1]} if s.courses else None,
        "note": s.note,
    }


def _diff_json(d: NumericsDiff) -> dict[str, Any]:
    return {
        "quantity": d.quantity,
        "record": d.record,
        "reference": d.reference,
        "compared": d.compared,
        "max_rel_diff": finite(d.max_rel_diff),
        "worst_step": d.worst_step,
        "value": finite(d.value),
        "reference_value": finite(d.reference_value),
        "agrees": d.agrees,
        "inputs_differ": d.inputs_differ,
        "drift": d.drift or None,
        "jumped_at": d.jumped_at,
        "parts_growing_from": d.parts_growing_from,
        "note": d.note,
    }


def _numerics_json(n: Numerics) -> dict[str, Any]:
    return {
        "reference": n.reference,
        "rtol": n.tolerance.rtol,
        "atol": n.tolerance.atol,
        "agree": n.agree,
        "compared": bool(n.diffs),  # false: no mode but the reference recorded values (`agree` then says nothing)
        "disagree": bool(n.disagreements),  # beyond the tolerance, not drift nor inputs that differ
        "drift": n.drift_words,  # record -> why its differences beyond the tolerance are drift
        "max_rel_diff": finite(n.max_rel_diff),
        "diffs": [_diff_json(d) for d in n.diffs],
        "notes": list(n.notes),
        # record -> the files an earlier mode wrote before it started / that --isolate-workdir moved away after it
        "written_before": {record: {"paths": list(w.paths), "count": w.count} for record, w in n.written_before.items()},
        "set_aside": {record: {"paths": list(w.paths), "count": w.count} for record, w in n.set_aside.items()},
    }


def _mode_json(column: ModeColumn, numerics: Numerics) -> dict[str, Any]:
    data = mode_fields(column)
    data["records"] = list(column.records)
    data["compile_phases_s"] = dict(column.compile_phases_s)
    data["repetition_step_time_median_s"] = list(column.repetition_medians)
    data["loss_max_rel_diff"] = finite(numerics.worst_for(column.name))
    wait = column.cpu_wait
    data["cpu_wait"] = None if wait is None else {
        "fraction": round(wait.fraction, 4), "wait_s": round(wait.wait_s, 3), "run_s": round(wait.run_s, 3), "window_s": round(wait.window_s, 3),
    }
    data["failures"] = [
        {"record": f.record, "status": f.status, "exit_code": f.exit_code, "reason": f.reason, "not_run": f.not_run} for f in column.failures
    ]
    return data


def _headline_json(line: Headline) -> dict[str, str]:
    data = {"text": line.text, "tone": line.tone}
    if line.advice:
        data["advice"] = line.advice
    return data


def comparison_to_json(comparison: AnyComparison, headline: Headline | None = None) -> dict[str, Any]:
    """`headline`: the one the caller made with more than the comparison holds (one run's
    recompile causes, read from its record); the comparison's own when None."""
    if isinstance(comparison, RunComparison):
        return {
            "format": JSON_RUNS_FORMAT,
            "schema_version": JSON_SCHEMA_VERSION,
            "before": comparison_to_json(comparison.before),
            "after": comparison_to_json(comparison.after),
            "changes": {
                c.mode: {
                    "in_before": c.before is not None,
                    "in_after": c.after is not None,
                    "deltas": c.deltas,
                    "speedup": _speedup_json(c.speedup) if c.speedup else None,
                    "numerics": [_diff_json(d) for d in c.numerics],
                }
                for c in comparison.changes
            },
            "notes": comparison.notes,
            "problems": comparison.problems,
            "headline": _headline_json(change_headline(comparison)),
        }
    return {
        "format": JSON_FORMAT,
        "schema_version": JSON_SCHEMA_VERSION,
        "headline": _headline_json(headline or run_headline(comparison)),
        "run": str(comparison.run_path),
        "target": comparison.target,
        "target_argv": list(comparison.target_argv),
        "versions": comparison.versions,
        "options": comparison.options,
        "modes": {name: _mode_json(c, comparison.numerics) for name, c in comparison.modes.items()},
        "speedups": {s.label: _speedup_json(s) for s in comparison.speedups},
        "numerics": _numerics_json(comparison.numerics),
        "grad_parity": grad_parity_json(comparison.grad_parity),
        "problems": comparison.problems,
    }


def grad_parity_json(parity: Any) -> dict[str, Any] | None:
    """Gradient parity (grad_parity.py) for --format json; None when no mode recorded digests."""
    if parity is None:
        return None
    return {
        "reference": parity.reference,
        "agree": parity.agree,
        "summary": parity.summary(),
        "tolerance_scale": parity.tolerance.scale,
        "pairs": [
            {
                "record": p.record,
                "reference": p.reference,
                "across_ranks": p.across_ranks,
                "agrees": p.agrees,
                "not_comparable": p.not_comparable or None,
                "steps": list(p.steps),
                "params": p.params,
                "params_without_gradient": p.gradless,  # no gradient on either side: not compared
                "first_bad_step": p.first_bad_step,
                "bad_steps": list(p.bad_steps),
                "mismatches": p.mismatches,
                "max_excess": finite(p.max_excess),
                "compute_dtype": p.compute,  # held to this dtype's precision: the compiled graphs compute in it
                "first_bad": [
                    {"name": m.name, "step": m.step, "kind": m.kind, "norm": finite(m.norm), "reference_norm": finite(m.reference_norm),
                     "checksum": finite(m.checksum), "reference_checksum": finite(m.reference_checksum), "ratio": finite(m.ratio),
                     "excess": finite(m.excess), "other": m.other or None, "description": m.describe()}
                    for m in p.first_bad
                ],
                "only_record": list(p.only_record),
                "only_reference": list(p.only_reference),
                "drifted": list(p.drifted),  # steps that differ after the losses drifted apart (from parted_at): not counted
                "parted_at": p.parted_at,
                # the losses parted at this step, before the first differing one, and the drift rule could not set it apart: counted
                "after_parting": p.after_parting,
                # ... where that step is the one the losses left round-off (growing), still within the tolerance
                "parted_by_round_off": p.parted_by_round_off,
                "verdict": p.verdict(),
            }
            for p in parity.pairs
        ],
        "notes": list(parity.notes),
        "nonfinite": list(parity.nonfinite),
        # ca against aot where both differ from eager (the summary says which changed the gradients)
        "against_aot": [{"record": p.record, "reference": p.reference, "agrees": p.agrees, "first_bad_step": p.first_bad_step,
                         "verdict": p.verdict()} for p in parity.against_aot],
    }


CSV_COLUMNS = (
    "name",  # the script (benchmarks/dynamo: the model)
    "mode",
    "status",
    "exit_code",
    "repetitions",
    "speedup",  # over eager: eager median step / this mode's (benchmarks/dynamo's meaning)
    "speedup_low",
    "speedup_high",
    "speedup_within_noise",
    "abs_latency",  # median steady step time, ms (as benchmarks/dynamo writes it)
    "abs_latency_p10",
    "abs_latency_p90",
    "compilation_latency",  # seconds
    "compression_ratio",  # eager peak memory / this mode's (peak RSS here)
    "peak_rss_bytes",
    "unique_graphs",
    "graph_breaks",
    "autograd_captures",
    "forward_graphs",
    "backward_graphs",
    "recompiles",
    "first_step_s",
    "steady_steps",
    "loss_max_rel_diff",
)


def _csv_rows(comparison: Comparison, run_label: str | None = None, baseline: Comparison | None = None) -> list[dict[str, Any]]:
    rows = []
    eager = comparison.modes.get("eager")
    for name, column in comparison.modes.items():
        f = mode_fields(column)
        m = column.metrics
        vs_eager = speedup(column, eager) if eager is not None else None
        within_noise = vs_eager.within_noise if vs_eager else None
        if name == "eager" and vs_eager is not None and vs_eager.ratio is not None:
            vs_eager, within_noise = Speedup("eager", "eager", 1.0, 1.0, 1.0), None
        eager_peak = eager.peak_rss_bytes if eager is not None else None
        unique = None
        if m is not None:
            # The record's count where torch's counters were not saved: graph breaks in a CA graph's
            # code split it into pieces Dynamo compiles (and recompiles) one by one, each a graph.
            split = m.ca_code_graphs.pieces + m.ca_code_graphs.recompiled
            unique = m.unique_graphs if m.unique_graphs is not None else m.forward_graphs + m.ca_graphs + split
        captures = None
        if m is not None:
            captures = m.autograd_captures if m.autograd_captures is not None else m.ca_graphs
        row: dict[str, Any] = {
            "name": comparison.target,
            "mode": name,
            "status": f["status"],
            "exit_code": f["exit_code"],
            "repetitions": f["repetitions"],
            "speedup": vs_eager.ratio if vs_eager else None,
            "speedup_low": vs_eager.low if vs_eager else None,
            "speedup_high": vs_eager.high if vs_eager else None,
            "speedup_within_noise": within_noise,
            "abs_latency": _ms(f["step_time_median_s"]),
            "abs_latency_p10": _ms(f["step_time_p10_s"]),
            "abs_latency_p90": _ms(f["step_time_p90_s"]),
            "compilation_latency": f["compile_time_s"],
            "compression_ratio": (eager_peak / column.peak_rss_bytes) if eager_peak and column.peak_rss_bytes else None,
            "peak_rss_bytes": f["peak_rss_bytes"],
            "unique_graphs": unique,
            "graph_breaks": f["graph_breaks"],
            "autograd_captures": captures,
            "forward_graphs": f["forward_graphs"],
            "backward_graphs": f["backward_graphs"],
            "recompiles": f["recompiles"],
            "first_step_s": f["first_step_s"],
            "steady_steps": f["steady_steps"],
            "loss_max_rel_diff": finite(comparison.numerics.worst_for(name)),
        }
        if run_label is not None:
            row = {"run": run_label, **row}
            before = baseline.modes.get(name) if baseline is not None else None
            change = speedup(column, before, paired=False) if before is not None else None
            row["speedup_vs_baseline"] = change.ratio if change else None
        rows.append(row)
    return rows


def _ms(value: float | None) -> float | None:
    return None if value is None else value * 1000


def comparison_csv(comparison: AnyComparison) -> str:
    buffer = io.StringIO()
    if isinstance(comparison, RunComparison):
        columns = ["run", *CSV_COLUMNS, "speedup_vs_baseline"]
        rows = _csv_rows(comparison.before, "A") + _csv_rows(comparison.after, "B", baseline=comparison.before)
    else:
        columns, rows = list(CSV_COLUMNS), _csv_rows(comparison)
    writer = csv.DictWriter(buffer, fieldnames=columns, lineterminator="\n", extrasaction="ignore")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: _csv_cell(v) for k, v in row.items()})
    return buffer.getvalue()


def _csv_cell(value: Any) -> Any:
    """A cell on one line: a record's text (a forged target name) with a line break, written as a
    quoted multi-line field, would start a line of the file, and of a CI log that shows it, with
    the record's words (`::error::`). Shown as a report shows a field within a line (`\\n`)."""
    if value is None:
        return ""
    return safe_line(value) if isinstance(value, str) else value
