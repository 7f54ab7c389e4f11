"""Graph-break counts are torch's counter, never the number of log records."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cagtool.record.loader import load_run
from cagtool.record.schema import GraphBreakEvent
from cagtool.report.figures.metrics import mode_metrics

SCRIPT = str(Path(__file__).parent / "scripts" / "graph_break_logged_twice.py")


@pytest.mark.slow
def test_duplicated_graph_break_log_counts_once(record_run):
    run = record_run(SCRIPT, modes="aot")
    assert run.returncode == 0, run.stderr
    aot = load_run(run.path).mode("aot")
    torch_count = sum(aot.manifest.torch_counters["graph_break"].values())
    logged = aot.of(GraphBreakEvent)
    # The situation this guards: torch logged the break more often than it counted it.
    assert len(logged) > torch_count == 1
    metrics = mode_metrics(aot)
    assert metrics.graph_breaks == torch_count and metrics.graph_breaks_from_torch
    assert [(Path(s.file).name, s.line, s.logged) for s in metrics.graph_break_sites] == [("graph_break_logged_twice.py", 11, len(logged))]
    assert [s.breaks for s in metrics.graph_break_sites] == [torch_count]  # each reason's count is torch's too
    assert "1 graph break at 1 site," in run.stderr
    assert "graph break site graph_break_logged_twice.py:11 (1 break): " in run.stderr


def test_summary_json_gives_torch_count_and_sites(record_run):
    from conftest import cagtool_in_process

    run = record_run(SCRIPT, modes="aot")
    out = cagtool_in_process("summary", "--format", "json", str(run.path))
    assert out.returncode == 0, out.stderr
    body = json.loads(out.stdout)["modes"]["aot"]
    assert body["graph_breaks"] == 1 and body["graph_breaks_counted_by"] == "torch"
    assert [site["line"] for site in body["graph_break_sites"]] == [11]


def test_saved_empty_counters_are_zero_breaks_and_only_unsaved_ones_fall_back_to_sites(record_run, tmp_path):
    """torch's counters are Counters, saved without the keys never incremented: a finished process
    whose job compiled nothing saves `{}`, which is 0 graph breaks counted by torch (the summary
    said "torch's counters were not saved"). Only a process that never saved them (killed) is
    counted by its logged sites."""
    import shutil

    from cagtool.record.manifest import mode_manifest_from_dict, to_dict

    run = record_run(SCRIPT, modes="aot")
    from cagtool.report.figures.metrics import graph_breaks_per_compile

    logged = graph_breaks_per_compile(load_run(run.path).mode("aot").of(GraphBreakEvent))
    assert logged >= 1
    # An imported TORCH_TRACE log holds no counters at all: its breaks are counted from the log.
    for status, imported, from_torch, breaks in (("finished", None, True, 0), ("killed", None, False, logged), ("finished", {"files": []}, False, logged)):
        copy = tmp_path / f"{status}-{imported is not None}"
        shutil.copytree(run.path, copy)
        manifest_path = copy / "aot" / "manifest.json"
        manifest = mode_manifest_from_dict(json.loads(manifest_path.read_text()))
        manifest.torch_counters, manifest.status, manifest.imported = {}, status, imported
        manifest_path.write_text(json.dumps(to_dict(manifest)))
        metrics = mode_metrics(load_run(copy).mode("aot"))
        assert (metrics.graph_breaks_from_torch, metrics.graph_breaks) == (from_torch, breaks), status


LSTM = str(Path(__file__).parent / "scripts" / "lstm_unresumable.py")


def test_a_break_dynamo_cannot_resume_after_is_counted_apart_and_gated(record_run):
    """tests/scripts/lstm_unresumable.py (word_language_model's shape): Dynamo compiles the forward
    up to the LSTM and runs the rest eagerly; torch counts that break in counters["unimplemented"],
    not counters["graph_break"]. cagtool said "0 graph breaks" and `gate --max-graph-breaks 0`
    passed a model whose LSTM never compiled. The count stays torch's; the break it could not resume
    after is said beside it, in the JSON, and counted by the gate, which names it."""
    from conftest import cagtool_in_process

    run = record_run(LSTM, modes="aot")
    assert run.returncode == 0, run.stderr
    aot = load_run(run.path).mode("aot")
    counters = aot.manifest.torch_counters
    if aot.manifest.versions["torch"] >= "2.15":
        # torch 2.15 resumes after the LSTM's break: an ordinary break, in torch's count and in cagtool's (the compat check)
        assert sum(counters["graph_break"].values()) == 1 and not counters.get("unimplemented")
        assert (mode_metrics(aot).graph_breaks, mode_metrics(aot).unresumable_breaks) == (1, 0)
        gate = cagtool_in_process("gate", str(run.path), "--max-graph-breaks", "0", "--no-config")
        assert gate.returncode == 1 and "graph breaks 1 > 0 allowed (+1): 1 at lstm_unresumable.py:25" in " ".join(gate.stdout.split())
        return
    assert "graph_break" not in counters and sum(counters["unimplemented"].values()) == 1  # torch's own view
    metrics = mode_metrics(aot)
    assert (metrics.graph_breaks, metrics.unresumable_breaks) == (0, 1)
    said = " ".join(run.stderr.split())
    assert "0 graph breaks and 1 break it could not resume after at 1 site (the rest of the function ran eagerly" in said, said
    assert "Dynamo could not resume after the break at lstm_unresumable.py:25" in said
    # torch's hint (allow_rnn=True) fails an LSTM's training compile on CPU (pytorch/examples'
    # mnist_rnn, torch 2.13-2.15): said beside it, with what runs instead.
    assert ("torch's hint: Set torch._dynamo.config.allow_rnn=True" in said
            and "cagtool: on CPU it fails an RNN's training compile (checked on an LSTM" in said), said
    body = json.loads(cagtool_in_process("summary", "--format", "json", str(run.path)).stdout)["modes"]["aot"]
    assert (body["graph_breaks"], body["unresumable_graph_breaks"]) == (0, 1)
    gate = cagtool_in_process("gate", str(run.path), "--max-graph-breaks", "0", "--no-config")
    assert gate.returncode == 1, gate.stdout
    assert ("graph breaks 1 > 0 allowed (+1): 1 at lstm_unresumable.py:25: [GB0014] Attempted to wrap RNN, GRU, or LSTM "
            "(Dynamo could not resume after it") in " ".join(gate.stdout.split()), gate.stdout


def test_a_compiled_function_dynamo_gave_up_on_whole_is_the_headlines_first_advice(record_run):
    """tests/scripts/lstm_given_up.py (pytorch/examples' mnist_rnn with torch.compile): Dynamo gives
    up on the whole forward at the LSTM and torch.compile compiles nothing. The headline said only
    "(it compiles nothing itself: the aot mode ran it eagerly)" and had no advice: it names the
    function Dynamo gave up on and says what to do, torch's hint with what following it does on CPU."""
    from conftest import cagtool_in_process

    run = record_run(str(Path(__file__).parent / "scripts" / "lstm_given_up.py"), modes="aot,ca")
    assert run.returncode == 0, run.stderr
    sites = mode_metrics(load_run(run.path).mode("aot")).graph_break_sites
    text = " ".join(cagtool_in_process("compare", str(run.path)).stdout.split())
    if not any(site.fell_back for site in sites):  # a torch that compiles the forward around the LSTM (the compat check)
        assert "Dynamo gave up on the function" not in text and "Dynamo ran the function" not in text, text
        return
    assert ("compiled autograd: " in text and "the speed of the script without it (Dynamo gave up on the function holding "
            "lstm_given_up.py:19: the aot mode ran it eagerly)") in text, text
    assert ("what to do: torch.compile compiled nothing: Dynamo ran the function holding lstm_given_up.py:19 eagerly, whole "
            "(Attempted to wrap RNN, GRU, or LSTM); torch's hint, to set torch._dynamo.config.allow_rnn=True") in text, text
    assert "there, call the RNN outside the compiled function and compile the modules around it" in text, text


def test_a_break_it_could_not_resume_after_at_a_site_it_also_resumed_at_is_said_at_that_site(tmp_path):
    """A tiny GPT-2 under HF Trainer (transformers 5.25): its logger call at modeling_utils.py:4824
    broke the graph in five compiles and, in two more, Dynamo could not resume after it. One place,
    one reason: one site, and the summary said "2 breaks it could not resume after at 0 sites". It
    says they are at the same site. Hand-built as the ca mode recorded it (torch 2.13)."""
    from conftest import cagtool_in_process
    from event_records import line, write_run

    place = {"file": "/venv/lib/python3.11/site-packages/transformers/modeling_utils.py", "line": 4824, "code": "logger.warning_once(msg)"}
    said = ("logging.Logger method not supported for non-export cases\n  Explanation: logging.Logger methods are not supported "
            "for non-export cases.\n  Hint: Add the logging method to `torch._dynamo.config.ignore_logging_functions`.")
    resumed = "Encountered graph break when attempting to trace CALL: a function call, e.g. f(x, y):\n" + said
    stopped = ("Encountered graph break that we cannot resume from. Compiling up to the previous resumable state, then skipping "
               "the rest of the function. Graph break encountered:\n" + said)
    events = [GraphBreakEvent(seq=n, t=0.01 * n, compile_id=cid, step=0, reason=reason, **place)
              for n, (cid, reason) in enumerate([("0/0", resumed), ("1/0", resumed), ("2/0", stopped), ("2/1", stopped)])]
    run = write_run(tmp_path / "run", {"aot": [line(e) for e in events]})
    out = " ".join(cagtool_in_process("summary", str(run)).stdout.split())
    # (no torch counters in a hand-built manifest: torch's count reads 0, its log's one site is named)
    assert "and 2 breaks it could not resume after at the same site (the rest of the function ran eagerly" in out, out
    assert "at 0 sites" not in out


def test_a_known_library_break_is_told_what_removes_it_from_the_call_the_record_keeps(tmp_path):
    """A tiny GPT-2 under HF Trainer (transformers 5.25): every compile of its forward broke the
    graph on transformers' `logger.warning_once(` in `loss_function`, whose message (the call's next
    line, which the record keeps as `rest`) says the model's loss_type is unset. `summary` says what
    removes it (checked: graph breaks 4 -> 0 with `model.loss_type = "ForCausalLM"`); the same logger
    call with another message, or the line alone, gets torch's hint only. The call's lines are read
    as the capture reads them, from the file at the break."""
    from conftest import cagtool_in_process
    from event_records import line, write_run

    from cagtool.capture.observe.torch_logs import _call_rest

    source = tmp_path / "site-packages" / "transformers" / "modeling_utils.py"
    source.parent.mkdir(parents=True)
    source.write_text("def loss_function(self):\n    if loss_type is None:\n        logger.warning_once(\n"
                      '            f"`loss_type={loss_type}` was set in the config but it is unrecognized. "\n'
                      '            f"Using the default loss: `ForCausalLM`."\n        )\n        loss_type = "ForCausalLM"\n')
    rest = _call_rest(str(source), 3, "logger.warning_once(")
    assert rest == ('f"`loss_type={loss_type}` was set in the config but it is unrecognized. " '
                    'f"Using the default loss: `ForCausalLM`." )'), rest
    assert _call_rest(str(source), 7, 'loss_type = "ForCausalLM"') == ""  # no call left open
    reason = ("Encountered graph break when attempting to trace CALL: a function call, e.g. f(x, y):\nlogging.Logger method not "
              "supported for non-export cases\n  Explanation: logging.Logger methods are not supported for non-export cases.\n"
              "  Hint: Add the logging method to `torch._dynamo.config.ignore_logging_functions`.")

    def summary(rest: str, name: str) -> str:
        event = GraphBreakEvent(seq=0, t=0.0, compile_id="0/0", step=0, reason=reason, file=str(source), line=3,
                                code="logger.warning_once(", rest=rest)
        return " ".join(cagtool_in_process("summary", str(write_run(tmp_path / name, {"aot": [line(event)]}))).stdout.split())

    said = summary(rest, "run")
    assert ('what removes it: transformers warns in every compiled forward that the model\'s loss_type is unset (a model class '
            'whose name names no loss, such as GPT2LMHeadModel), and Dynamo breaks the graph on that warning: set it before '
            'training, `model.loss_type = "ForCausalLM"`') in said, said
    assert "what removes it" not in summary('"`torch_dtype` is deprecated! Use `dtype` instead!")', "other")
    assert "what removes it" not in summary("", "alone")
