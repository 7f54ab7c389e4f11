"""Torch's own words beside cagtool's: the suggestion torch's profile-guided optimisation (PGO) makes
after a shape recompile, kept verbatim (capture/observe/torch_logs.py). These pin the exact text of
torch 2.13's `render_code_state` (torch/_dynamo/pgo.py) that `recompiles --explain` and
`--verify` show; if torch rewords it, they fail here first."""

from __future__ import annotations

import torch

from types import SimpleNamespace

from cagtool.capture.observe.torch_logs import (
    PGO_SUGGESTION_START,
    StructuredLogHandler,
    pgo_dynamic_sources,
    pgo_suggestion,
    pgo_suggestion_of,
)

TORCH_213_SUGGESTION = (
    "PGO detected a recompilation due to dynamic shapes. To reduce shape recompilations by compiling dynamically "
    "to start, set environment variable TORCH_COMPILE_DYNAMIC_SOURCES=\"L['x']\""
)


def test_torch_suggests_the_dynamic_sources_of_a_shape_recompile_in_these_words():
    @torch.compile(backend="eager")
    def double(x):
        return x * 2

    assert pgo_suggestion() is None  # nothing compiled yet (the autouse fixture reset Dynamo)
    double(torch.ones(4))
    assert pgo_suggestion() is None  # compiled once, static: nothing to suggest
    double(torch.ones(6))  # a size guard fails; automatic dynamic marks L['x'] dynamic
    assert pgo_suggestion() == TORCH_213_SUGGESTION
    # Asking only reads torch's state: the next size still hits the dynamic graph, no recompile.
    before = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    double(torch.ones(9))
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == before


def test_the_suggestion_is_read_from_a_logged_code_state():
    """The same text as torch logs it in a TORCH_TRACE log (artifact put_local_code_state, when a
    job id gives PGO somewhere to write): the code state, then the suggestion."""
    logged = (
        "hash(800855ec)/x/external_utils.py:67:inner:\n  L['args'][0]: tensor size=[?, 16] stride=[S(1), 1]\n\n\n"
        + TORCH_213_SUGGESTION.replace("L['x']", "L['args'][0]")
    )
    assert pgo_suggestion_of(logged) == TORCH_213_SUGGESTION.replace("L['x']", "L['args'][0]")
    assert pgo_suggestion_of("hash(1)/x.py:1:f:\n  L['x']: tensor size=[4] stride=[1]") is None
    assert TORCH_213_SUGGESTION.startswith(PGO_SUGGESTION_START)
    assert pgo_dynamic_sources(TORCH_213_SUGGESTION) == "L['x']"  # what the torch-pgo fix sets
    # As `cagtool import` hands it over from a TORCH_TRACE log.
    handler = StructuredLogHandler(None, SimpleNamespace(current_step=None, step_of_compile=lambda compile_id: None))  # type: ignore[arg-type]
    handler.handle_structured({"artifact": {"name": "put_local_code_state", "encoding": "string"}}, logged)
    assert handler.errors == 0 and handler.pgo_suggestion == TORCH_213_SUGGESTION.replace("L['x']", "L['args'][0]")
