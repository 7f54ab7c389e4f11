"""A gate check's Source names what set the limit in force: a flag that replaces a pyproject.toml
limit is the flag, and a flag beside the config's other keys leaves those keys the config's. On a
real record (cagtool run --modes ca --backend eager sample_scripts/op_loop.py: 3 CA recompiles)."""

from __future__ import annotations

import pytest

from cagtool.record.loader import load_run
from cagtool.report.figures.metrics import mode_metrics

from gate_cli import gate_json

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def op_loop(record_run):
    run = record_run("op_loop.py")
    assert run.returncode == 0, run.stderr
    return run.path


def _sources(data: dict) -> dict[str, str]:
    return {c["check"]: c["source"] for c in data["checks"] if c["check"].startswith("max-")}


def test_a_flag_over_a_config_limit_is_the_checks_source(op_loop, work):
    recompiles = mode_metrics(load_run(op_loop).mode("ca")).recompiles
    config = work / "pyproject.toml"
    config.write_text("[tool.cagtool.gate]\nmax-recompiles = 0\nmax-ca-graphs = 100\n")
    assert _sources(gate_json(op_loop, cwd=work, code=1)) == {"max-recompiles": str(config.resolve()), "max-ca-graphs": str(config.resolve())}
    flagged = gate_json(op_loop, "--max-recompiles", str(recompiles), cwd=work, code=0)
    assert _sources(flagged) == {"max-recompiles": "flag", "max-ca-graphs": str(config.resolve())}


def test_a_flag_beside_other_config_keys_leaves_them_the_configs(op_loop, work):
    config = work / "pyproject.toml"
    config.write_text('[tool.cagtool.gate]\nmax-recompiles = { dynamo = 0, ca = 0 }\n')
    data = gate_json(op_loop, "--max-recompiles", "ca:100", cwd=work, code=0)
    assert _sources(data) == {"max-recompiles:ca": "flag", "max-recompiles:dynamo": str(config.resolve())}
