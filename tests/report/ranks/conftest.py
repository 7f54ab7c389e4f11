"""The `multi_rank_run` fixture: hand-made multi-rank runs on disk (see rank_records.py)."""

from __future__ import annotations

import pytest
from rank_records import write_multi_rank_run


@pytest.fixture
def multi_rank_run(tmp_path):
    def make(ranks: dict[int, Rank], world_size: int | None = None, main_findings: list[tuple[str, str]] | None = None, name: str = "run") -> Path:
        return write_multi_rank_run(tmp_path / name, ranks, world_size, main_findings)

    return make
