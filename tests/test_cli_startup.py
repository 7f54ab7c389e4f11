"""Start-up cost: `cagtool --help` and the report commands load only what they use (the
speed targets of CONTRIBUTING.md; benchmarks/cli_speed.py times them). Checked by the modules a fresh interpreter
holds, which does not depend on how busy the machine is."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
from importlib.metadata import version

import pytest
from conftest import ROOT

# As a pipe or a CI log gets it: no COLUMNS (pytest's environment may carry the terminal's), so
# an off-terminal listing is never folded to a width (which only rich does).
UNBOUNDED_ENV = {k: v for k, v in os.environ.items() if k != "COLUMNS"}

HEAVY = ("torch", "pandas", "numpy", "typer.rich_utils", "rich.markdown", "cagtool.capture")

# typer 0.29 coerces every option through pydantic (+63 % CPU on `runs`, benchmarks/README.md):
# below it, a command must not load pydantic at all (constraints.txt pins the measured version).
TYPER_COERCION = () if tuple(int(p) for p in version("typer").split(".")[:2]) >= (0, 29) else ("pydantic",)


def loaded_after(code: str) -> set[str]:
    """The modules a fresh interpreter holds after running `code` (SystemExit from the CLI is fine)."""
    probe = (
        "import json, sys\n"
        f"try:\n    {code}\nexcept SystemExit:\n    pass\n"
        "sys.__stdout__.write('\\n' + json.dumps(sorted(sys.modules)))\n"
    )
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=str(ROOT), timeout=60, env=UNBOUNDED_ENV)
    assert proc.returncode == 0, proc.stderr
    return set(json.loads(proc.stdout.strip().splitlines()[-1]))


def test_importing_the_cli_loads_typer_and_no_cagtool_internals():
    loaded = loaded_after("import cagtool.cli")
    assert "typer" in loaded
    assert not [m for m in loaded if m.startswith(("cagtool.report", "cagtool.record", "cagtool.capture"))]
    assert not [m for m in loaded if m.split(".")[0] in ("torch", "pandas", "numpy")]


def test_help_loads_nothing_heavy():
    loaded = loaded_after("from cagtool.cli import main; main(['--help'])")
    assert not [m for m in loaded if m.startswith(HEAVY)], sorted(m for m in loaded if m.startswith(HEAVY))
    assert not [m for m in loaded if m.startswith("cagtool.report")]


def test_runs_and_report_commands_never_load_pandas_or_torch(tmp_path):
    heavy = ("torch", "pandas", *TYPER_COERCION)
    # `runs` on an empty directory and `recompiles` on a missing run both reach their bodies.
    for args in (["runs", str(tmp_path)], ["recompiles", str(tmp_path / "missing"), "--explain"], ["summary", str(tmp_path / "missing")]):
        loaded = loaded_after(f"from cagtool.cli import main; main({args!r})")
        assert not [m for m in loaded if m.split(".")[0] in heavy], args


def test_spelled_out_defaults_agree_with_their_owners():
    from cagtool.commands.baseline import DEFAULT_BASELINE_FILE
    from cagtool.commands.run import DEFAULT_MODES
    from cagtool.record.schema import MODES
    from cagtool.report import gate

    assert DEFAULT_MODES == ",".join(MODES)
    assert DEFAULT_BASELINE_FILE == gate.DEFAULT_BASELINE_FILE


def test_capability_packages_name_what_the_commands_use():
    from cagtool.report import compare, gate, graphs, recompiles

    for package in (compare, gate, graphs, recompiles):
        assert package.__all__ and all(hasattr(package, name) for name in package.__all__), package.__name__


def test_a_command_loads_its_own_module_only(tmp_path):
    # Commands are built when looked up (cli._LazyGroup): `runs` imports no other
    # command's module, and typer reads no other command's signature.
    loaded = loaded_after(f"from cagtool.cli import main; main(['runs', {str(tmp_path)!r}])")
    assert {m for m in loaded if m.startswith("cagtool.commands.")} == {"cagtool.commands.runs"}
    loaded = loaded_after(f"from cagtool.cli import main; main(['recompiles', {str(tmp_path / 'missing')!r}, '--explain'])")
    assert {m for m in loaded if m.startswith("cagtool.commands.")} == {"cagtool.commands.recompiles", "cagtool.commands._common"}


def test_every_command_module_is_listed_and_builds_its_own_command():
    from cagtool import cli

    modules = {p.stem for p in (ROOT / "cagtool" / "commands").glob("*.py") if not p.stem.startswith("_")}
    assert set(cli._COMMAND_MODULES.values()) == modules  # a new command module must be listed
    group = cli.typer.main.get_command(cli.app)
    assert group.list_commands(None) == list(cli._COMMAND_MODULES)
    for name in cli._COMMAND_MODULES:
        assert group.get_command(None, name).name == name  # _build_command raises if the module registers another
        assert group.get_command(None, name) is group.get_command(None, name)  # built once
    assert group.get_command(None, "no-such-command") is None


def _recompiling_run(root):
    """A one-mode record with an initial capture and one recompile (a new autograd node)."""
    from cagtool.record.manifest import ModeManifest, RunMeta, to_dict
    from cagtool.record.schema import CacheMissEvent, CAGraphEvent, StepEvent, event_to_dict, json_default

    events = []
    for ca_id, node in enumerate(("torch::autograd::GraphRoot", "MulBackward0")):
        events.append(CacheMissEvent(seq=len(events), t=float(ca_id), ca_id=ca_id, compile_id=f"!{ca_id}", step=ca_id + 1, miss_kind="new_node",
                                     message=f"Cache miss due to new autograd node: {node} (NodeCall 1) with key size 40, previous key sizes=[]",
                                     node=node, node_call=1, key_size=40, previous_key_sizes=[]))
        events.append(CAGraphEvent(seq=len(events), t=float(ca_id), ca_id=ca_id, compile_id=f"!{ca_id}", step=ca_id + 1, node_count=3, op_histogram={},
                                   autograd_nodes=[], aot_ids=[], hooks=[], num_sizes=0, capture_s=0.1,
                                   code_file=f"graphs/ca_{ca_id}.py", nodes_file=f"graphs/ca_{ca_id}.json"))
        events.append(StepEvent(seq=len(events), t=float(ca_id), step=ca_id + 1, backward_s=0.01))
    (root / "ca").mkdir(parents=True)
    meta = RunMeta(run_id="r", created_at="2026-01-01T00:00:00Z", cagtool_argv=[], target={"kind": "script", "name": "train.py"},
                   target_argv=[], cwd=str(root), modes=["ca"], versions={}, machine={}, status="finished", exit_code=0)
    manifest = ModeManifest(mode="ca", argv=["train.py"], target={}, cwd=str(root), versions={}, backend="eager", dynamic=False,
                            started_at="2026-01-01T00:00:00Z", status="finished")
    (root / "run.json").write_text(json.dumps(to_dict(meta)))
    (root / "ca" / "manifest.json").write_text(json.dumps(to_dict(manifest)))
    (root / "ca" / "events.jsonl").write_text("".join(json.dumps(event_to_dict(e), default=json_default) + "\n" for e in events))
    return root


def test_runs_and_recompiles_explain_load_only_what_they_print(tmp_path):
    # What each command's start-up leaves out: checked on a real
    # record, so the command's body ran. `runs` lists manifests: no analysis module; --explain
    # prints paragraphs: no rich table (the table view imports it), no step statistics.
    run = _recompiling_run(tmp_path / "runs" / "r")
    loaded = loaded_after(f"from cagtool.cli import main; main(['runs', {str(tmp_path / 'runs')!r}])")
    assert "cagtool.record.loader" in loaded  # it did read the run
    # Its lines pass safe_text (record text shown as text: a module of one regex); plain lines,
    # no rich console or table (a third of the command's CPU, benchmarks/README.md).
    assert {m for m in loaded if m.startswith("cagtool.report")} == {"cagtool.report", "cagtool.report.text", "cagtool.report.text.safe_text"}
    assert not {"rich.console", "rich.table"} & loaded
    # The writer's liveness needs no socket (typer >= 0.29 loads one with pydantic's Path coercion).
    assert "socket" not in loaded or "pydantic" in loaded
    assert not [m for m in loaded if m.split(".")[0] in ("torch", "pandas", "numpy", *TYPER_COERCION)]
    loaded = loaded_after(f"from cagtool.cli import main; main(['recompiles', {str(run)!r}, '--explain'])")
    assert "cagtool.report.recompiles.explain" in loaded  # it did explain
    assert not {"rich.table", "statistics", "cagtool.report.compare"} & loaded
    assert not [m for m in loaded if m.split(".")[0] in ("torch", "pandas", "numpy", *TYPER_COERCION)]


def test_runs_reads_manifests_only(tmp_path):
    # `runs` reads manifests only and lists the run with its modes' ends.
    _recompiling_run(tmp_path / "runs" / "r")
    probe = (
        "import io, json, sys\n"
        "from cagtool.cli import main\n"
        "out, sys.stdout = sys.stdout, io.StringIO()\n"
        "try:\n"
        f"    main(['runs', {str(tmp_path / 'runs')!r}])\n"
        "except SystemExit:\n"
        "    pass\n"
        "listing, sys.stdout = sys.stdout.getvalue(), out\n"
        "print(json.dumps({'listing': listing}))\n"
    )
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=str(ROOT), timeout=60, env=UNBOUNDED_ENV)
    assert proc.returncode == 0, proc.stderr
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    assert found["listing"].startswith("run ") and "ca:finished" in found["listing"]
    assert "Traceback" not in found["listing"]


def test_runs_lines_are_safe_and_in_columns(tmp_path):
    # A target named with an escape sequence and wide characters: shown as text, and every
    # column starts where its header does (widths are terminal cells, not characters).
    from cagtool.cli import main

    root = tmp_path / "runs"
    for name, target in (("a", "\x1b[31mred\x1b[0m.py"), ("b", "\u8a13\u7df4.py")):
        run = _recompiling_run(root / name)
        meta = json.loads((run / "run.json").read_text())
        meta["target"]["name"] = target
        (run / "run.json").write_text(json.dumps(meta))
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as exited:
        main(["runs", str(root)])
    assert exited.value.code == 0
    lines = out.getvalue().splitlines()
    assert len(lines) == 3 and "\x1b" not in out.getvalue(), lines
    assert "  red.py  " in lines[1] and "\u8a13\u7df4.py" in lines[2], lines
    from rich.cells import cell_len

    header = lines[0]
    for line in lines[1:]:
        modes_at = cell_len(line[: line.index("ca:finished")])
        assert modes_at == header.index("modes"), (line, header)


def test_runs_builds_no_event_decoder(tmp_path):
    # Building the events' decoders reads every event class's annotations; `runs` decodes no
    # event, so it never builds them (a command that reads events does).
    run = _recompiling_run(tmp_path / "runs" / "r")
    probe = (
        "import io, json, sys\n"
        "from cagtool.cli import main\n"
        "out, sys.stdout = sys.stdout, io.StringIO()\n"
        "built = []\n"
        "for args in ({runs!r}, {explain!r}):\n"
        "    try:\n"
        "        main(args)\n"
        "    except SystemExit:\n"
        "        pass\n"
        "    from cagtool.record import schema\n"
        "    built.append(schema._decoders.cache_info().currsize)\n"
        "sys.stdout = out\n"
        "print(json.dumps(built))\n"
    ).format(runs=["runs", str(tmp_path / "runs")], explain=["recompiles", str(run), "--explain"])
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=str(ROOT), timeout=60, env=UNBOUNDED_ENV)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == [0, 1]


def test_report_commands_start_numpy_with_one_blas_thread(tmp_path):
    # The read-only report commands set OPENBLAS_NUM_THREADS=1 (unless the user set it) before
    # numpy loads; `run`, whose children are the user's job, leaves the environment alone.
    probe = (
        "import os, sys\n"
        "from cagtool import cli\n"
        "cli.main = lambda args: sys.__stdout__.write(repr(os.environ.get('OPENBLAS_NUM_THREADS')) + '\\n')\n"
        "sys.argv = ['cagtool'] + sys.argv[1:]\n"
        "cli.console_main()\n"
    )
    env = {k: v for k, v in UNBOUNDED_ENV.items() if k != "OPENBLAS_NUM_THREADS"}

    def seen(*args: str, **extra: str) -> str:
        proc = subprocess.run([sys.executable, "-c", probe, *args], capture_output=True, text=True, cwd=str(ROOT), timeout=60, env={**env, **extra})
        assert proc.returncode == 0, proc.stderr
        return proc.stdout.strip()

    assert seen("summary", str(tmp_path)) == "'1'"
    assert seen("runs", str(tmp_path)) == "'1'"
    assert seen("summary", str(tmp_path), OPENBLAS_NUM_THREADS="4") == "'4'"
    assert seen("run", "train.py") == "None"


def test_root_help_lists_every_command_with_its_first_help_line():
    from cagtool import cli

    group = cli.typer.main.get_command(cli.app)
    ctx = group.context_class(group, info_name="cagtool", terminal_width=100, max_content_width=100)
    listed = group.get_help(ctx)
    for name in cli._COMMAND_MODULES:
        first_line = group.get_command(ctx, name).get_short_help_str(limit=10)
        assert f"  {name} " in listed and first_line.rstrip(".")[:5] in listed, name


@pytest.mark.slow
def test_run_without_gate_flags_loads_no_gate_code(tmp_path):
    """`cagtool run` parses its gate flags before the first mode starts (a bad threshold is a usage
    error before anything runs); with none given, the gate code (~0.08 s of imports) is not loaded
    at all. The probe sees it loaded when a threshold is given, and `--gate` alone still gates.
    (Run from a temporary directory: no pyproject.toml with [tool.cagtool.gate] above it.)"""
    script = tmp_path / "tiny.py"
    script.write_text("print('tiny')\n")
    env = {**UNBOUNDED_ENV, "CI": "true"}

    def parent_modules(*flags: str, expect: int = 0) -> tuple[set[str], str]:
        out = tmp_path / f"r{len(list(tmp_path.iterdir()))}"
        args = ["run", "--modes", "eager", "--no-report", "-o", str(out), *flags, str(script)]
        probe = (
            "import json, sys\nfrom cagtool.cli import main\n"
            f"try:\n    main({args!r})\nexcept SystemExit as exc:\n    code = exc.code\n"
            "sys.__stdout__.write('\\n' + json.dumps([code, sorted(sys.modules)]))\n"
        )
        proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=str(tmp_path), timeout=300, env=env)
        code, modules = json.loads(proc.stdout.strip().splitlines()[-1])
        assert code == expect, proc.stderr
        return set(modules), proc.stderr

    plain, _ = parent_modules()
    assert "cagtool.report.gate" not in plain and "cagtool.report.gate.config" not in plain
    # The gate runs, and fails: the script trains nothing, so no count of it measures anything.
    gated, stderr = parent_modules("--max-graph-breaks", "5", expect=1)
    assert "cagtool.report.gate.run" in gated
    assert "ERROR: mode-finished (eager): status finished, 0 steps: nothing of the job's training ran in it" in " ".join(stderr.split())
    # --gate alone: the options are built when the run ends, and the gate runs (here: no
    # thresholds anywhere, the usage error `cagtool gate` gives too).
    _, stderr = parent_modules("--gate", expect=2)
    assert "no gate thresholds" in stderr
