"""Every graph-break reason, with its count and line, in `summary` and in a failed
`gate --max-graph-breaks`; the counts torch's.

The two reasons below are a real record's (`cagtool run --modes ca train.py`, torch 2.13, a
forward with `print(h.sum().item())` at line 10): Dynamo breaks on `.item()` in the forward's frame
(compile 0/0), then on `print` of the float in the resume frame, compiled twice (1/0, and 1/1 for
a new float value). torch's counters["graph_break"]: 1 and 2. The summary said "3 graph breaks at
1 site" and named only the first reason; the gate's FAIL line named none.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import cagtool_in_process

from cagtool.record.schema import GraphBreakEvent
from cagtool.report.figures.metrics import graph_break_reasons, graph_break_sites

_GENERIC = "Encountered graph break when attempting to trace CALL: a function call, e.g. f(x, y):\n"
ITEM = (_GENERIC + "Unsupported Tensor.item() call with capture_scalar_outputs=False\n  Explanation: Dynamo does not support tracing "
        "`Tensor.item()` with config.capture_scalar_outputs=False.\n  Hint: Set `torch._dynamo.config.capture_scalar_outputs = True` or "
        "`export TORCHDYNAMO_CAPTURE_SCALAR_OUTPUTS=1` to include these operations in the captured graph.")
PRINT = (_GENERIC + "Failed to trace builtin operator\n  Explanation: Dynamo does not know how to trace builtin operator `print` with "
         "argument types ['float'] (has_kwargs False)\n  Hint: Avoid calling builtin `print` with argument types ['float']. Consider "
         "using an equivalent alternative function/method to `print`.")
# torch's counter keys: the exception's message (gb_type first), as the record's manifest keeps them.
COUNTED = {ITEM.split("\n", 1)[1][:200]: 1, PRINT.split("\n", 1)[1][:250]: 2}


def _event(seq: int, compile_id: str, reason: str, file: str = "/job/train.py", line: int = 10) -> GraphBreakEvent:
    return GraphBreakEvent(seq=seq, t=float(seq), compile_id=compile_id, step=0, reason=reason, file=file, line=line,
                           code="print(h.sum().item())")


def test_torchs_advice_is_the_hint_that_names_a_change_not_the_one_it_gives_a_whole_class():
    """Torch 2.13 gives some breaks a hint true of their whole class (graph_break_hints.py: "It may be
    possible to write Dynamo tracing rules ... report an issue"), before or instead of one that names
    a change (allow_rnn): the advice shown is the latter, or none."""
    rnn = (_GENERIC + "Attempted to call function marked as skipped\n  Explanation: Dynamo does not support RNN, GRU, or LSTM.\n"
           "  Hint: It may be possible to write Dynamo tracing rules for this code. Please report an issue to PyTorch if you "
           "encounter this graph break often and it is causing performance issues.\n"
           "  Hint: Set torch._dynamo.config.allow_rnn=True to enable experimental support for RNN, GRU, and LSTM in Dynamo")
    only_generic = rnn.rsplit("\n", 1)[0].replace("does not support RNN, GRU, or LSTM.", "does not trace `helper`, marked as skipped.")
    [with_advice, without] = graph_break_reasons(graph_break_sites([_event(1, "0/0", rnn, line=5), _event(2, "1/0", only_generic, line=7)]))
    assert with_advice.advice == "Set torch._dynamo.config.allow_rnn=True to enable experimental support for RNN, GRU, and LSTM in Dynamo"
    assert without.advice is None
    assert [r.advice for r in graph_break_reasons(graph_break_sites([_event(1, "0/0", ITEM)]))] == [
        "Set `torch._dynamo.config.capture_scalar_outputs = True` or `export TORCHDYNAMO_CAPTURE_SCALAR_OUTPUTS=1` to include these "
        "operations in the captured graph."]


def test_two_reasons_at_one_line_are_two_sites_with_torchs_counts():
    events = [_event(1, "0/0", ITEM), _event(9, "1/0", PRINT), _event(31, "1/1", PRINT)]
    sites = graph_break_sites(events, COUNTED)
    assert [(s.line, s.gb_id, s.breaks) for s in sites] == [(10, "GB0124", 1), (10, "GB0059", 2)]
    assert sum(s.breaks for s in sites) == sum(COUNTED.values())
    # Without torch's counters (a killed process), once per compile: the same here.
    assert [s.breaks for s in graph_break_sites(events)] == [1, 2]
    # A reason logged twice in one compile (Dynamo restarting the frame's analysis) is one break.
    assert [s.breaks for s in graph_break_sites([*events, _event(32, "1/1", PRINT)])] == [1, 2]
    # The same break logged again under torch's other preface, when Dynamo falls back to eager for
    # the frame (a real record of tests/scripts/graph_break_logged_twice.py): one reason, torch's 1.
    user = "Call to `torch._dynamo.graph_break()`\n  Explanation: User-inserted graph break. Message: None\n  Hint: Remove the `torch._dynamo.graph_break()` call."
    twice = [_event(1, "0/0", _GENERIC + user, line=11),
             _event(2, "1/0", "Failed to handle graph break gracefully. Skipping the function and falling back to eager. Graph break "
                    "encountered:\n" + user, line=11)]
    [site] = graph_break_sites(twice, {user: 1})
    assert (site.gb_id, site.logged, site.breaks) == ("GB0025", 2, 1) and site.reason.startswith("Call to `torch._dynamo.graph_break()`: ")
    # ... and Dynamo ran that frame eagerly, whole: said of the site and of its reason.
    assert site.fell_back and graph_break_reasons([site])[0].fell_back == (("/job/train.py", 11),)
    assert not any(s.fell_back for s in graph_break_sites(events))
    # One reason at two lines: one reason, two places, its breaks together.
    [reason] = graph_break_reasons(graph_break_sites([_event(1, "0/0", PRINT, line=12), _event(2, "1/0", PRINT, line=14)]))
    assert (reason.gb_id, reason.breaks, [line for _, line in reason.places]) == ("GB0059", 2, [12, 14])


def _with_a_second_reason(run: Path, dest: Path) -> tuple[Path, str, int]:
    """The ca record of a real run of sample_scripts/graph_breaks.py with a break for a second reason
    at the line of its first break, in a later compile, and torch's counter of it: what a line that
    breaks for two reasons records. Returns (the copy, that line's file name and number)."""
    shutil.copytree(run, dest)
    events_file = dest / "ca" / "events.jsonl"
    events = [json.loads(line) for line in events_file.read_text().splitlines() if line.strip()]
    first = next(e for e in events if e["kind"] == "graph_break")
    last = max(e["seq"] for e in events)
    extra = {**first, "seq": last + 1, "t": events[-1]["t"], "compile_id": "9/0", "reason": PRINT}
    events_file.write_text("".join(json.dumps(e) + "\n" for e in [*events, extra]))
    (dest / "ca" / "columns.json").unlink(missing_ok=True)
    manifest_file = dest / "ca" / "manifest.json"
    manifest = json.loads(manifest_file.read_text())
    manifest["torch_counters"].setdefault("graph_break", {})[PRINT.split("\n", 1)[1]] = 1
    manifest_file.write_text(json.dumps(manifest))
    return dest, Path(first["file"]).name, first["line"]


def _ca_break_lines(summary: str) -> list[str]:
    """The graph-break lines of the ca mode's part of a summary."""
    ca = summary[summary.index("mode ca:"):]
    return [text.strip() for text in ca.splitlines() if text.strip().startswith("graph break site")]


@pytest.mark.slow  # the gate tests' recording (conftest `graph_breaks`)
def test_summary_lists_every_reason_with_its_count_and_line(graph_breaks, tmp_path):
    plain = cagtool_in_process("summary", graph_breaks)
    assert plain.returncode == 0, plain.stderr
    # graph_breaks.py breaks at lines 12 and 14 for one reason: one line names both.
    assert "2 graph breaks at 2 sites," in plain.stdout
    said = _ca_break_lines(plain.stdout)
    assert said == ["graph break sites graph_breaks.py:12, graph_breaks.py:14 (2 breaks): [GB0025] Call to `torch._dynamo.graph_break()`: "
                    "User-inserted graph break. Message: None"]
    # Torch's hint that names a change, on a line of its own under its reason.
    ca = plain.stdout[plain.stdout.index("mode ca:"):].splitlines()
    at = next(i for i, text in enumerate(ca) if text.strip().startswith("graph break sites graph_breaks.py:12"))
    assert ca[at + 1].strip() == "torch's hint: Remove the `torch._dynamo.graph_break()` call."
    run, name, line = _with_a_second_reason(graph_breaks, tmp_path / "two-reasons")
    out = cagtool_in_process("summary", run)
    assert out.returncode == 0, out.stderr
    assert "3 graph breaks at 2 sites for 2 reasons," in out.stdout
    lines = _ca_break_lines(out.stdout)
    assert len(lines) == 2 and lines[0].startswith("graph break sites graph_breaks.py:12, graph_breaks.py:14 (2 breaks): [GB")
    assert lines[1].startswith(f"graph break site {name}:{line} (1 break): [GB0059] Failed to trace builtin operator: Dynamo does not "
                               "know how to trace builtin operator `print`")
    body = json.loads(cagtool_in_process("summary", "--format", "json", run).stdout)["modes"]["ca"]
    assert body["graph_breaks"] == 3 == sum(site["breaks"] for site in body["graph_break_sites"])


@pytest.mark.slow
def test_a_failed_graph_break_count_names_its_reasons_and_lines(graph_breaks, tmp_path):
    run, name, line = _with_a_second_reason(graph_breaks, tmp_path / "two-reasons")
    proc = cagtool_in_process("gate", run, "--max-graph-breaks", "0", "--no-config", cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    [failed] = [text for text in proc.stdout.splitlines() if text.startswith("FAIL: max-graph-breaks")]
    assert failed.startswith("FAIL: max-graph-breaks (ca): graph breaks 3 > 0 allowed (+3): 2 at graph_breaks.py:12, graph_breaks.py:14: "
                             "[GB")
    assert failed.endswith(f"; 1 at {name}:{line}: [GB0059] Failed to trace builtin operator")
    data = json.loads(cagtool_in_process("gate", "--format", "json", run, "--max-graph-breaks", "0", "--no-config", cwd=tmp_path).stdout)
    [check] = [c for c in data["checks"] if c["check"] == "max-graph-breaks"]
    assert [(r["gb_id"], r["breaks"]) for r in check["data"]["reasons"]][1] == ("GB0059", 1)
    assert check["data"]["source"]["line"] == 12  # the annotation's line: the first place of the reason with most breaks


@pytest.mark.slow
def test_a_break_torch_did_not_count_is_no_count_of_sites(graph_breaks, tmp_path):
    """A data-dependent branch (`if buffer == 1:` on a tensor) that made Dynamo restart the frame:
    its log names a break while torch's counters["graph_break"] stay empty. The summary read "0 graph
    breaks at 1 site": torch's 0 stands, and the sites are said as the log's."""
    run = Path(shutil.copytree(graph_breaks, tmp_path / "uncounted"))
    manifest_file = run / "ca" / "manifest.json"
    manifest = json.loads(manifest_file.read_text())
    manifest["torch_counters"]["graph_break"] = {}
    manifest_file.write_text(json.dumps(manifest))
    out = cagtool_in_process("summary", run)
    assert out.returncode == 0, out.stderr
    ca = out.stdout[out.stdout.index("mode ca:"):]
    assert "0 graph breaks (torch's count; its log names 2 sites)," in " ".join(ca.split()), ca
    assert "at 2 sites" not in ca
