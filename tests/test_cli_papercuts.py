"""Small things a new user trips on: one flag name for one thing across commands, help text that
lists what the command does and names runs as they are named, a notebook-friendly summary, and
prose that wraps off a terminal."""

from __future__ import annotations

import re

from conftest import cli_in_process

from rich.console import Console

from cagtool.report.compare.render import NOTE_WIDTH, Grid, TableRenderer


def test_gate_takes_the_config_flag_run_takes(tmp_path):
    for flag in ("--config", "--gate-config"):
        code, out, err = cli_in_process("gate", str(tmp_path), flag, str(tmp_path / "missing.toml"), "--max-ca-graphs", "1")
        assert code == 2 and f"config file not found: {tmp_path / 'missing.toml'}" in err, (flag, err)


def test_help_lists_every_patch_and_hides_a_flag_with_one_value():
    recompiles = cli_in_process("recompiles", "--help", env={"COLUMNS": "200"})[1]
    for name in ("hook-before-loop", "hook-dynamo-disable", "zero-grad-to-none", "scalar-to-tensor"):
        assert name in recompiles, name
    run = cli_in_process("run", "--help", env={"COLUMNS": "200"})[1]
    assert not re.search(r"^\s+--format\b", run, re.M)  # text is its one value: --json FILE is the JSON
    code, _out, err = cli_in_process("run", "--format", "json", "x.py")
    assert code == 2 and "use --json FILE" in err
    baseline = cli_in_process("baseline", "save", "--help", env={"COLUMNS": "200"})[1]
    assert ".cagtool/runs/train-20260101-120000" in baseline  # <script>-<time>, as `run` names runs


def test_a_long_note_wraps_in_its_column_off_a_terminal():
    import io

    grid = Grid("Speedups", ["", "speedup", "90% CI", "verdict", "note"])
    grid.rows.append(["ca/aot", "1.00x", "0.9 - 1.1x", "inconclusive", "per block: 1.01x, 0.99x; " + "word " * 100])
    out = io.StringIO()
    Console(file=out, width=10_000, no_color=True).print(TableRenderer(Console(file=io.StringIO()))._table(grid))
    lines = out.getvalue().splitlines()
    assert max(len(line) for line in lines) < 200 and len(lines) > 6
    assert all(len(cell.strip()) <= NOTE_WIDTH for line in lines if "│" in line for cell in line.split("│")[-2:-1])
