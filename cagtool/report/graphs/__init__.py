"""Structural graph diffs: normalize.py, align.py (patience diff), diff.py, runs.py (which graphs of which runs), render.py.

The names below are what `cagtool diff-graphs` uses."""

from cagtool.report.graphs.diff import GraphDiff, cyclic_gc_paused, diff_graphs
from cagtool.report.graphs.render import JsonRenderer, SideBySideRenderer, StatRenderer, UnifiedRenderer
from cagtool.report.graphs.runs import GraphComparison, compare, compare_replaced, graph_ids

__all__ = [
    "GraphComparison",
    "GraphDiff",
    "JsonRenderer",
    "SideBySideRenderer",
    "StatRenderer",
    "UnifiedRenderer",
    "compare",
    "compare_replaced",
    "cyclic_gc_paused",
    "diff_graphs",
    "graph_ids",
]
