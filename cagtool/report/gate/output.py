"""Renderers of a gate result: a human table, JSON, JUnit XML (one testcase per check),
GitHub Actions annotations and a Markdown step summary. Each renders; `emit_gate_result`
decides which to write where."""

from __future__ import annotations

import os
import platform
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import IO

from rich.console import Console
from rich.table import Table
from rich.text import Text

from cagtool.record.atomic import write_atomic
from cagtool.errors import CagtoolError, UnreadableInput
from cagtool.report.text.console import make_console
from cagtool.report.text.markdown import md_text
from cagtool.report.text.safe_text import safe_line, safe_text
from cagtool.report.gate.checks import CheckResult, Outcome
from cagtool.report.gate.run import GateOptions, GateResult
from cagtool.report.gate.result_file import GATE_RESULT_FILE, gate_from_document, gate_json

_LABEL = {Outcome.PASS: "PASS", Outcome.FAIL: "FAIL", Outcome.IMPROVED: "IMPROVED", Outcome.ERROR: "ERROR", Outcome.INCONCLUSIVE: "INCONCLUSIVE"}
_STYLE = {Outcome.PASS: "green", Outcome.FAIL: "bold red", Outcome.IMPROVED: "yellow", Outcome.ERROR: "bold red", Outcome.INCONCLUSIVE: "bold yellow"}


def result_label(result: CheckResult) -> str:
    label = _LABEL[result.outcome]
    if result.outcome is Outcome.IMPROVED and result.failed:
        label += " (fails)"
    return label


def verdict_line(gate: GateResult) -> str:
    total = len(gate.results)
    failed = len(gate.failures)
    improved = gate.count(Outcome.IMPROVED)
    extra = f", {improved} improved" if improved else ""
    undecided = gate.count(Outcome.INCONCLUSIVE)
    if gate.passed and undecided:
        return (f"gate INCONCLUSIVE: {undecided} of {total} checks could not be decided on this evidence, "
                f"the other {total - undecided} passed{extra} (exit 5)")
    if gate.passed:
        return f"gate passed: {total} checks{extra}"
    more = f", {undecided} inconclusive" if undecided else ""
    return f"gate FAILED: {failed} of {total} checks failed{more}{extra}"


def _elsewhere(gate: GateResult) -> str:
    """The checks that count another mode than the gated one (a CA limit reads the ca mode), said
    beside the gated mode, so the header never names a mode some rows are not on: " (max-ca-graphs on
    mode ca: only ca captures CA graphs)"."""
    on: dict[str, list[str]] = {}
    for r in gate.results:
        if r.data.get("gated_mode") and r.check not in on.setdefault(r.mode.split("@rank")[0], []):
            on[r.mode.split("@rank")[0]].append(r.check)
    said = [f"{', '.join(checks)} on mode {mode}" for mode, checks in on.items() if checks and mode != gate.mode]
    return f" ({'; '.join(said)}: only ca captures CA graphs)" if said else ""


def _sources(gate: GateResult) -> str:
    parts = [f"run {gate.run_path}", f"mode {gate.mode}{_elsewhere(gate)}"]
    if gate.ranks:
        parts.append(f"ranks {', '.join(str(r) for r in gate.ranks)}")
    if gate.baseline_path is not None:
        parts.append(f"baseline {gate.baseline_path}")
    if gate.config_path is not None:
        parts.append(f"config {gate.config_path}")
    return ", ".join(parts)


_BASELINE_CHECKS = ("max-regression", "max-compile-regression")


def refresh_hint(gate: GateResult) -> str | None:
    """What to do about improvements: refresh the baseline, or tighten the limits."""
    improved = [r for r in gate.results if r.outcome is Outcome.IMPROVED]
    if not improved:
        return None
    if gate.baseline_path is not None and any(r.source == "baseline" or r.check in _BASELINE_CHECKS for r in improved):
        return f"improved: refresh the baseline with: cagtool baseline save {gate.run_path} -o {gate.baseline_path}"
    return "improved: tighten the improved limits (flags or [tool.cagtool.gate]) so the gain is kept"


def render_text(gate: GateResult, console: Console) -> None:
    """The gate's report, one line per item. Every line and table cell is `safe_line`: the run's
    path, a mode's name, a baseline's target or torch version are text a pull request can plant,
    and a newline in one would start a line of its own in the CI log (`::stop-commands::` silences
    the annotations below it; a forged `gate passed` reads as the verdict)."""
    x = safe_line
    console.print(x(f"cagtool gate: {_sources(gate)}"), markup=False, soft_wrap=True)
    table = Table(show_edge=False, pad_edge=False, box=None, header_style="bold")
    for column in ("Check", "Mode", "Actual", "Limit", "Result", "Source"):
        table.add_column(column, no_wrap=True)
    for r in gate.results:
        table.add_row(x(r.check), x(r.mode), x(r.actual), x(r.limit), Text(result_label(r), style=_STYLE[r.outcome]), x(_short_source(r.source)))
    console.print(table)
    for r in gate.results:
        if r.outcome is not Outcome.PASS or r.notes or r.warnings:
            console.print(x(f"{result_label(r)}: {r.message}"), style=_STYLE[r.outcome], markup=False, soft_wrap=True)
            for note in r.notes:
                console.print(x(f"  note: {note}"), markup=False, soft_wrap=True)
            for warning in r.warnings:
                console.print(x(f"  warning: {warning}"), style="yellow", markup=False, soft_wrap=True)
    for warning in gate.warnings:
        console.print(x(f"warning: {warning}"), style="yellow", markup=False, soft_wrap=True)
    hint = refresh_hint(gate)
    if hint:
        console.print(x(hint), markup=False, soft_wrap=True)
    console.print(verdict_line(gate), style="bold red" if not gate.passed else "bold yellow" if gate.inconclusive else "bold green", markup=False)


def _short_source(source: str) -> str:
    return Path(source).name if source not in ("flag", "baseline", "run") and "+" not in source else source


def save_gate_result(gate: GateResult, run_dir: Path) -> Path:
    path = run_dir / GATE_RESULT_FILE
    try:
        write_atomic(path, render_json(gate) + "\n", root=run_dir)  # a report rendered meanwhile reads the previous result or this one, never half of one
    except OSError as exc:
        raise UnreadableInput(f"cannot write {path}: {exc.strerror}") from None
    return path


def keep_gate_result(gate: GateResult, stderr: IO[str] | None = None) -> Path | None:
    """Save the result in its run for `cagtool report` (the latest gate's wins). A run that cannot
    be written (a read-only CI artifact) costs one line on stderr, never the gate's exit code."""
    try:
        return save_gate_result(gate, gate.run_path)
    except (CagtoolError, OSError) as exc:
        print(safe_line(f"cagtool: gate result not saved in the run: {exc}"), file=stderr if stderr is not None else sys.stderr)
        return None


def load_gate_result(run_dir: Path) -> GateResult | None:
    """The gate result `cagtool gate` or `run --gate` saved in the run, or None when it was not gated."""
    from cagtool.record.loader import inside, read_json_object

    path = run_dir / GATE_RESULT_FILE
    if not path.exists():
        return None
    return gate_from_document(read_json_object(inside(run_dir, GATE_RESULT_FILE, "gate result"), "gate result"))


def render_json(gate: GateResult) -> str:
    return gate_json(gate)


def render_junit(gate: GateResult) -> str:
    """JUnit XML as CI systems read it: one <testcase> per check; a failed check has <failure>
    (an unmeasurable one <error>, an inconclusive one <skipped type="inconclusive">: not run to a
    verdict, which CI systems show apart from a pass), every check's message is in <system-out>. Every text and
    attribute passes `safe_text`: ElementTree writes a control character (an ANSI-coloured
    exception's ESC) as it is, which XML 1.0 forbids, and a CI that cannot parse the file drops
    the whole report."""
    x = safe_text
    failures = sum(1 for r in gate.results if r.failed and r.outcome is not Outcome.ERROR)
    errors = sum(1 for r in gate.results if r.outcome is Outcome.ERROR)
    skipped = gate.count(Outcome.INCONCLUSIVE)
    counts = {"tests": str(len(gate.results)), "failures": str(failures), "errors": str(errors), "skipped": str(skipped)}
    suites = ET.Element("testsuites", {"name": "cagtool gate", **counts, "time": "0"})
    suite = ET.SubElement(suites, "testsuite", {"name": "cagtool.gate", **counts, "time": "0", "hostname": platform.node()})
    props = ET.SubElement(suite, "properties")
    for name, value in (("run", gate.run_path), ("mode", gate.mode), ("baseline", gate.baseline_path), ("config", gate.config_path)):
        if value is not None:
            ET.SubElement(props, "property", {"name": name, "value": x(str(value))})
    for r in gate.results:
        case = ET.SubElement(suite, "testcase", {"classname": x(f"cagtool.gate.{r.mode.replace('/', '_')}"), "name": x(r.check), "time": "0"})
        text = x("\n".join([r.message, *(f"note: {n}" for n in r.notes), *(f"warning: {w}" for w in r.warnings)]))
        if r.outcome is Outcome.ERROR:
            element = ET.SubElement(case, "error", {"message": x(r.message), "type": "unmeasurable"})
            element.text = text
        elif r.outcome is Outcome.INCONCLUSIVE:
            element = ET.SubElement(case, "skipped", {"message": x(f"INCONCLUSIVE: {r.message}"), "type": "inconclusive"})
            element.text = text
        elif r.failed:
            kind = "improvement" if r.outcome is Outcome.IMPROVED else "regression"
            element = ET.SubElement(case, "failure", {"message": x(r.message), "type": kind})
            element.text = text
        ET.SubElement(case, "system-out").text = text
    if gate.warnings:
        ET.SubElement(suite, "system-err").text = x("\n".join(f"warning: {w}" for w in gate.warnings))
    ET.indent(suites)
    return ET.tostring(suites, encoding="unicode", xml_declaration=True) + "\n"


def _escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")


def _workspace_path(path: str) -> str:
    """A source path as GitHub matches annotations: relative to the checkout ($GITHUB_WORKSPACE,
    else the current directory) when it is inside it."""
    import os

    root = os.environ.get("GITHUB_WORKSPACE") or os.getcwd()
    relative = os.path.relpath(path, root) if os.path.isabs(path) else path
    return path if relative.startswith("..") else relative


def github_annotations(gate: GateResult) -> list[str]:
    """Workflow commands: ::error for each failed check, ::warning for an inconclusive one, for a
    reported improvement and for each environment warning, ::notice for notes (what a timing check
    rested on)."""
    lines = []
    for r in gate.results:
        title = _escape_property(f"cagtool gate: {r.check} ({r.mode})")
        if r.failed:
            # A failed recompile count points at the line of its cause (report/gate/run.py).
            where = r.data.get("source") if isinstance(r.data.get("source"), dict) else None
            at = f"file={_escape_property(_workspace_path(where['file']))},line={where['line']}," if where else ""
            lines.append(f"::error {at}title={title}::{_escape_data(r.message)}")
        elif r.outcome is Outcome.INCONCLUSIVE:
            lines.append(f"::warning title={_escape_property(f'cagtool gate INCONCLUSIVE: {r.check} ({r.mode})')}::{_escape_data(r.message)}")
        elif r.outcome is Outcome.IMPROVED:
            lines.append(f"::warning title={title}::{_escape_data(r.message)}")
        for warning in r.warnings:
            lines.append(f"::warning title={title}::{_escape_data(warning)}")
        for note in r.notes:
            lines.append(f"::notice title={title}::{_escape_data(note)}")
    for warning in gate.warnings:
        lines.append(f"::warning title={_escape_property('cagtool gate: environment')}::{_escape_data(warning)}")
    return lines


def _md(text: str) -> str:
    return md_text(text)


def render_markdown(gate: GateResult) -> str:
    icon = {Outcome.PASS: "✅", Outcome.FAIL: "❌", Outcome.IMPROVED: "⬇️", Outcome.ERROR: "❌", Outcome.INCONCLUSIVE: "❔"}
    head = "❌ failed" if not gate.passed else "❔ inconclusive" if gate.inconclusive else "✅ passed"
    lines = [
        f"### cagtool gate: {head}",
        "",
        f"{_md(verdict_line(gate))} ({_md(_sources(gate))})",
        "",
        "| | Check | Mode | Actual | Limit | Result | Message |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in gate.results:
        lines.append(
            f"| {icon[r.outcome]} | `{r.check}` | {_md(r.mode)} | {_md(r.actual)} | {_md(r.limit)} | {result_label(r)} | {_md(r.message)} |"
        )
    warnings = [*(w for r in gate.results for w in r.warnings), *gate.warnings]
    if warnings:
        lines.append("")
        lines.extend(f"> **warning:** {_md(w)}" for w in warnings)
    hint = refresh_hint(gate)
    if hint:
        lines += ["", _md(hint)]
    return "\n".join(lines) + "\n\n"


def _write_file(path: Path, text: str) -> None:
    """A report file the gate writes (--junit): made anew, never written through a link planted at
    its name (an untrusted checkout's `junit.xml -> ~/.bashrc`): the link is replaced, as `baseline
    save` replaces one."""
    from cagtool.record.atomic import write_atomic

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, text)
    except OSError as exc:
        raise UnreadableInput(f"cannot write {path}: {exc.strerror}") from None


def _write(path: Path, text: str, mode: str = "w") -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open(mode, encoding="utf-8") as handle:
            handle.write(text)
    except OSError as exc:
        raise UnreadableInput(f"cannot write {path}: {exc.strerror}") from None


def emit_gate_result(gate: GateResult, options: GateOptions, stdout: IO[str] | None = None, stderr: IO[str] | None = None) -> int:
    """Render the result as asked and write the CI files; returns the gate's exit code.

    On GitHub Actions (GITHUB_ACTIONS=true) the annotations go to stdout after a text report and
    to stderr with --format json (the runner reads workflow commands from both, and stdout must
    stay parseable JSON). A Markdown table is appended to $GITHUB_STEP_SUMMARY when it is set."""
    out = stdout if stdout is not None else sys.stdout
    err = stderr if stderr is not None else sys.stderr
    if options.format == "json":
        out.write(render_json(gate) + "\n")
    else:
        render_text(gate, make_console(file=out))
    if options.junit is not None:
        _write_file(Path(options.junit), render_junit(gate))
    if os.environ.get("GITHUB_ACTIONS") == "true":
        stream = err if options.format == "json" else out
        for line in github_annotations(gate):
            # The command is ours; what follows it is shown as record text is (safe_line would
            # show the command's own leading `::` escaped).
            command, rest = line[:2], line[2:]
            stream.write(command + safe_line(rest) + "\n")
        stream.flush()
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary:
        _write(Path(summary), render_markdown(gate), mode="a")
    return gate.exit_code
