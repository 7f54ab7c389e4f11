"""Fixes proven on the user's job: `recompiles --explain --verify` re-runs it with each fix
(fixes.py: what can be applied without editing the script; verification.py: the re-runs, the
measures and the verdicts)."""
