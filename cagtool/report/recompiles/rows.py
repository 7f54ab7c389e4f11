"""What `recompiles` works on: one row per recompile, a mode's table of them, and how rows name
their source lines and nodes. Plain data; built by `recompiles.recompile_table`.

Three sources of recompiles are kept apart, with the ids torch prints:
- `ca_cache_miss`: compiled autograd missed its cache and captured graph `!N`;
- `dynamo_frame`: Dynamo recompiled a forward frame (`F/C`) because a guard failed;
- `dynamo_ca_graph`: Dynamo recompiled the code of a CA graph (`!N/F/C`) because a guard failed.
The first CA capture of a mode (the lowest `!N`, normally `!0`, a miss on GraphRoot) is the
initial compile: it is kept as a row with `initial=True` and never counted as a recompile.
"""

from __future__ import annotations

import bisect
import os
from dataclasses import dataclass, field

from cagtool.record.schema import CAGraphEvent, ChangedSize, SourceRef

SOURCE_CA = "ca_cache_miss"
SOURCE_DYNAMO_FRAME = "dynamo_frame"
SOURCE_DYNAMO_CA_GRAPH = "dynamo_ca_graph"
KIND_GUARD = "guard_failure"
GRAPH_ROOT = "torch::autograd::GraphRoot"


@dataclass(frozen=True)
class RecompileRow:
    """One recompile (or the initial CA capture). `seqs` are the events it was read from."""

    mode: str
    source: str  # SOURCE_CA | SOURCE_DYNAMO_FRAME | SOURCE_DYNAMO_CA_GRAPH
    compile_id: str  # the id of what was (re)compiled: "!3", "0/2", "!0/1/1"
    step: int | None
    kind: str  # new_node | changed_shapes | unknown | guard_failure
    seqs: tuple[int, ...]
    initial: bool = False
    ca_id: int | None = None
    node: str | None = None
    node_call: int | None = None
    key_size: int | None = None
    previous_key_sizes: tuple[int, ...] = ()
    changed_sizes: tuple[ChangedSize, ...] = ()
    total_changed: int | None = None
    messages: tuple[str, ...] = ()  # torch's reasons, verbatim (CA message or Dynamo guard failures)
    user_source: SourceRef | None = None
    produced: str | None = None  # the graph this recompile produced: "!N" or the Dynamo compile id

    @property
    def seq(self) -> int:
        return self.seqs[0] if self.seqs else -1

    @property
    def failing_guard(self) -> str | None:
        """The first guard-failure line of a Dynamo recompile (the newest cache entry's), verbatim."""
        if self.kind != KIND_GUARD or not self.messages:
            return None
        return self.messages[0].splitlines()[0].strip() if self.messages[0].strip() else None


@dataclass(frozen=True)
class StepSummary:
    """What `recompiles` needs from the step events: how many, and the last step number."""

    count: int
    last: int | None


@dataclass(frozen=True)
class LimitHit:
    """Dynamo gave up compiling a frame: it runs without compiling (eager) from then on."""

    mode: str
    compile_id: str
    step: int | None
    seq: int
    limit_type: str  # recompile_limit | accumulated_recompile_limit
    limit_value: int | None
    function: str = ""
    file: str = ""
    line: int | None = None


@dataclass
class RecompileTable:
    """The processed view of one mode: rows in record order, plus what the explanation needs."""

    mode: str
    rows: list[RecompileRow]  # initial capture(s) and recompiles, in event order
    steps: int  # steps recorded (top-level backwards)
    last_step: int | None
    limit_hits: list[LimitHit] = field(default_factory=list)
    graphs: dict[int, CAGraphEvent] = field(default_factory=dict)  # ca_id -> graph
    cwd: str = ""
    skipped_lines: int = 0
    unknown_kinds: dict[str, int] = field(default_factory=dict)
    status: str = ""
    # Sorted graph ids, built on first use (explanations of 1,000s of graphs).
    _graph_ids: list[int] | None = field(default=None, repr=False, compare=False)

    def previous_graph(self, ca_id: int | None) -> CAGraphEvent | None:
        """The graph captured just before `!ca_id`."""
        if ca_id is None:
            return None
        ids = self._ids()
        index = bisect.bisect_left(ids, ca_id)
        return self.graphs[ids[index - 1]] if index > 0 else None

    def _ids(self) -> list[int]:
        if self._graph_ids is None or len(self._graph_ids) != len(self.graphs):
            self._graph_ids = sorted(self.graphs)
        return self._graph_ids

    @property
    def recompiles(self) -> list[RecompileRow]:
        return [r for r in self.rows if not r.initial]

    @property
    def initial(self) -> list[RecompileRow]:
        return [r for r in self.rows if r.initial]

    def count(self, source: str | None = None) -> int:
        return sum(1 for r in self.rows if not r.initial and (source is None or r.source == source))


def display_path(path: str, cwd: str) -> str:
    """A path relative to the run's working directory when it is inside it (stable across machines)."""
    if not path or not cwd or not os.path.isabs(path):
        return path
    try:
        rel = os.path.relpath(path, cwd)
    except ValueError:
        return path
    return path if rel.startswith("..") else rel


def short_file(path: str, cwd: str) -> str:
    shown = display_path(path, cwd)
    return shown if shown else "?"


def format_source(ref: SourceRef | None, cwd: str, with_code: bool = True) -> str:
    if ref is None:
        return ""
    where = f"{short_file(ref.file, cwd)}:{ref.line}"
    if with_code and ref.code:
        return f"{where}  {ref.code.strip()}"
    return where


def node_label(name: str | None, node_call: int | None) -> str:
    if not name:
        return ""
    short = name.replace("torch::autograd::", "")
    return f"{short} (NodeCall {node_call})" if node_call is not None else short
