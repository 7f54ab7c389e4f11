"""CI gates: checks.py (threshold grammar and checks), config.py ([tool.cagtool.gate]), baseline.py, run.py (run_gate), output.py (JUnit, GitHub).

The names below are what the commands (gate, baseline, run --gate) use."""

from cagtool.report.gate.baseline import (
    DEFAULT_BASELINE_FILE,
    Baseline,
    baseline_from_run,
    baseline_to_dict,
    load_baseline,
    save_baseline,
)
from cagtool.report.gate.config import GateSettings, merge, settings_from_values
from cagtool.report.gate.output import emit_gate_result
from cagtool.report.gate.run import GateOptions, GateResult, run_gate

__all__ = [
    "DEFAULT_BASELINE_FILE",
    "Baseline",
    "GateOptions",
    "GateResult",
    "GateSettings",
    "baseline_from_run",
    "baseline_to_dict",
    "emit_gate_result",
    "load_baseline",
    "merge",
    "run_gate",
    "save_baseline",
    "settings_from_values",
]
