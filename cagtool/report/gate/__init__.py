"""CI gates: checks.py (threshold grammar and checks), config.py ([tool.cagtool.gate]), baseline.py, run.py (run_gate), output.py (JUnit, GitHub)."""
