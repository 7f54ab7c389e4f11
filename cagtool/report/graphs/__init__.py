"""Structural graph diffs: normalize.py, align.py (patience diff), diff.py, runs.py (which graphs of which runs), render.py."""
