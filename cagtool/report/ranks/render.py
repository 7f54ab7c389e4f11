"""The per-rank table and the ranks' findings, as summary and compare print them."""

from __future__ import annotations

from rich.console import Console
from rich.text import Text
from rich.padding import Padding
from rich.table import Table

from cagtool.report.ranks.analysis import RankAnalysis, agreement


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:.2f} ms"


def _mib(n: int | None) -> str:
    return "-" if n is None else f"{n / 2**20:.0f} MiB"


def _status(status: str, exit_code: int | None) -> str:
    return status if exit_code in (0, None) else f"{status}, exit {exit_code}"


RANK_HEADER = ("rank", "status", "steps", "CA graphs", "cache misses", "graph breaks", "step time", "peak RSS")


def _total_breaks(analysis: RankAnalysis) -> str:
    """The ranks' graph breaks summed, "~" where a rank's are the log's (RankRow.graph_breaks_exact)."""
    return ("" if all(r.graph_breaks_exact for r in analysis.rows) else "~") + str(analysis.totals.graph_breaks)


def rank_cells(analysis: RankAnalysis) -> list[tuple[str, ...]]:
    """The rows under RANK_HEADER (the terminal table and the HTML report's): one per rank, one per
    missing rank, and the totals."""
    rows = [
        (
            str(r.rank), _status(r.status, r.exit_code), str(r.steps), str(r.ca_graphs), str(r.cache_misses),
            r.breaks_text, _ms(r.step_time_median_s), _mib(r.peak_rss_bytes),
        )
        for r in analysis.rows
    ]
    rows += [(str(rank), "no record", "-", "-", "-", "-", "-", "-") for rank in analysis.missing]
    t = analysis.totals
    rows.append(
        (
            "total", f"{t.ranks} rank{'s' if t.ranks != 1 else ''}", str(t.steps), str(t.ca_graphs), str(t.cache_misses),
            _total_breaks(analysis), _ms(t.step_time_median_s), _mib(t.peak_rss_bytes),
        )
    )
    return rows


def rank_table(analysis: RankAnalysis) -> Table:
    # The CUDA column only when a rank used CUDA: CPU jobs keep the table narrow.
    cuda = any(r.peak_device_memory_bytes is not None for r in analysis.rows)
    table = Table(show_edge=False, pad_edge=False, box=None, header_style="bold")
    columns = ["rank", "status", "steps", "CA graphs", "cache misses", "graph breaks", "step time", "peak RSS"]
    for column in columns + (["peak CUDA"] if cuda else []):
        table.add_column(column, no_wrap=True, justify="left" if column == "status" else "right")
    for r in analysis.rows:
        cells = [
            str(r.rank), _status(r.status, r.exit_code), str(r.steps), str(r.ca_graphs), str(r.cache_misses),
            r.breaks_text, _ms(r.step_time_median_s), _mib(r.peak_rss_bytes),
        ]
        table.add_row(*cells, *([_mib(r.peak_device_memory_bytes)] if cuda else []))
    for rank in analysis.missing:
        table.add_row(str(rank), "no record", *["-"] * (len(columns) - 2 + cuda))
    t = analysis.totals
    cells = [
        "total", f"{t.ranks} rank{'s' if t.ranks != 1 else ''}", str(t.steps), str(t.ca_graphs), str(t.cache_misses),
        _total_breaks(analysis), _ms(t.step_time_median_s), _mib(t.peak_rss_bytes),
    ]
    table.add_row(*cells, *([_mib(t.peak_device_memory_bytes)] if cuda else []))
    return table


def render_ranks(console: Console, analysis: RankAnalysis, indent: int = 2) -> None:
    """The ranks of one mode: a table (with a totals row), then one line per finding."""
    pad = " " * indent
    size = f" of world size {analysis.world_size}" if analysis.world_size is not None else ""
    ranked = bool(analysis.rows or analysis.missing or analysis.world_size is not None)
    if analysis.workers:
        n = len(analysis.rows)
        console.print(f"{pad}training processes the script started without a rank: {n} (numbered 0-{n - 1} by start, as ranks "
                      "below; each trains on its own, meeting the others at no collective, so they are not held to each "
                      "other's graphs, steps or norms)", markup=False)
    elif ranked:
        console.print(f"{pad}ranks: {len(analysis.rows)}{size} recorded", markup=False)
    if analysis.rows or analysis.missing:
        console.print(Padding(rank_table(analysis), (0, 0, 0, indent + 2), expand=False))
        console.print(f"{pad}  (total: counts and peak memory summed, step time the slowest rank's median)", markup=False)
        if any(not r.graph_breaks_exact for r in analysis.rows):
            console.print(f"{pad}  (~: graph breaks from the log, one per compile and site: the rank ended before torch's counters "
                          "were saved)", markup=False)
    if analysis.other_processes and ranked:
        console.print(f"{pad}  other processes followed (no rank): {', '.join(analysis.other_processes)}", markup=False)
    elif analysis.other_processes:
        # No distributed job: the processes it started are its DataLoader workers or subprocesses, not ranks.
        console.print(f"{pad}processes the script started, followed (no rank: DataLoader workers, subprocesses): "
                      f"{', '.join(analysis.other_processes)}", markup=False)
    explained: set[str] = set()
    for finding in analysis.findings:
        console.print(Text.assemble(pad, ("rank finding:", "yellow"), f" {finding.message}"), overflow="fold")
        meaning = finding.data.get("explanation")
        if meaning and meaning not in explained:  # the ranks failed alike: said once
            explained.add(meaning)
            console.print(f"{pad}  what it means: {meaning}", markup=False, overflow="fold")
        if "diff_command" in finding.data:
            console.print(f"{pad}  the two graphs: {finding.data['diff_command']}", markup=False, overflow="fold")
    if len(analysis.rows) > 1 and not analysis.diverge and not analysis.workers:
        console.print(f"{pad}{agreement(analysis)}", markup=False)
