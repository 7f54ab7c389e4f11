"""Every recompile of a run: table.py (rows from the record), explain.py (root causes and fixes), render.py (text and JSON)."""
