"""Modes side by side and runs before/after: analysis.py (pure), render.py (table, Markdown), export.py (JSON, CSV)."""
