"""A size guard of a compiled-autograd graph's code (`tensor 'sizes[0]' size mismatch at index 1`)
names compiled autograd's own input, no tensor of the script: nothing in the script can mark it,
and starting compiled autograd dynamic leaves that recompile (torch 2.13, `--verify` on the shape
loop and on a length varying per batch: Dynamo recompiles 1 -> 1); naming the graph's input in
TORCH_COMPILE_DYNAMIC_SOURCES removes it (1 -> 0: test_verify_fixes.py's shape loop)."""

from __future__ import annotations

from cagtool.report.recompiles.explain import _guard_fixes, _guard_why
from cagtool.torch_text import GUARD_SIZE


def test_a_ca_graph_input_is_named_in_torchs_spelling_never_marked_by_hand():
    facts = {"kind": GUARD_SIZE, "guard": "tensor 'sizes[1]' size mismatch at index 1. expected 5, actual 8"}
    fixes = " ".join(_guard_fixes(facts, True, ""))
    assert "TORCH_COMPILE_DYNAMIC_SOURCES (`L['sizes'][1]`" in fixes and "torch-pgo-ca-dynamic" in fixes, fixes
    assert "maybe_mark_dynamic" not in fixes and "does not reach Dynamo's compile of its graph" in fixes
    why = " ".join(_guard_why(facts, "", True))
    assert "`sizes[1]` is an input of the compiled-autograd graph" in why and "a length, not the batch size" not in why, why
    # A smaller batch through it still offers dropping the batch first.
    batch = {"kind": GUARD_SIZE, "guard": "tensor 'inputs[0]' size mismatch at index 0. expected 32, actual 6"}
    first, *rest = _guard_fixes(batch, True, "")
    assert first.startswith("If it is a DataLoader's last batch") and "`L['inputs'][0]`" in " ".join(rest)


def test_the_same_guard_in_a_forward_frame_is_the_scripts_tensor():
    """`inputs` can be a script's own argument: outside a compiled-autograd graph's code it is marked."""
    facts = {"kind": GUARD_SIZE, "guard": "tensor 'inputs[1]' size mismatch at index 1. expected 5, actual 8"}
    assert "maybe_mark_dynamic" in " ".join(_guard_fixes(facts, False, "out = model(inputs)"))
    assert "a length, not the batch size" in " ".join(_guard_why(facts, "", False))


def test_a_ca_graph_split_by_graph_breaks_recompiles_each_piece_in_one_step():
    """A non-reentrant checkpoint under compiled autograd: its unpack hook breaks the CA graph's code
    at every saved tensor (27 breaks in a 2-block job), and one change of batch size recompiled 10
    pieces at step 3 (`sizes[1]`, `___stack0`, `call_hook`, in a real record of such a job).
    --explain said "A single recompile on the first change is expected and usually cheap"."""
    from cagtool.report.recompiles.explain import _graph_pieces

    at_3 = [(f"!1/{n}/1", 3, f"tensor '{name}' size mismatch at index 0. expected 5, actual 8")
            for n, name in enumerate(["sizes[1]", "___stack0", "call_hook", "___stack0"], start=11)]
    assert _graph_pieces(at_3) == 4
    # One recompile a step, or several of the graph's own inputs: no pieces.
    assert _graph_pieces([("!1/2/1", 2, "tensor 'sizes[0]' size mismatch at index 1. expected 72, actual 64")]) == 0
    assert _graph_pieces([(f"!1/{n}/1", 3, "tensor 'sizes[0]' size mismatch at index 1. expected 5, actual 8") for n in (2, 3)]) == 0
