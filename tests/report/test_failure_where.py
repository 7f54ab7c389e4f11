"""Where a failed mode's exception was raised, when the script's lines are not where: Dynamo
compiling a compiled-autograd graph names that graph's generated code (`<eval_with_key>.N`) as the
"user code" it traced. `summary` says so, with the CA graph it was compiling."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from conftest import ROOT, cagtool_in_process

from cagtool.report.known_failures import in_ca_graph_compile

# torch 2.13's exception on tests/scripts/sparse_backward.py under compiled autograd, as the record keeps it (cut).
MESSAGE = ('tuple index out of range\n\nfrom user code:\n   File "<eval_with_key>.0", line 5, in forward\n    getitem = inputs[0]\n'
           '              ^^^^^^^^^\n\nSet TORCHDYNAMO_VERBOSE=1 for the internal stack trace')
TRACEBACK = ('Traceback (most recent call last):\n  File "/job/gcn.py", line 20, in <module>\n    loss.backward()\n'
             '  File "/venv/lib/python3.11/site-packages/torch/_dynamo/compiled_autograd.py", line 1242, in runtime_wrapper\n'
             '    out = compiled_fn(\n  File "/venv/lib/python3.11/site-packages/torch/_dynamo/eval_frame.py", line 1166, in compile_wrapper\n')


def test_an_error_in_a_ca_graphs_generated_code_is_told_apart_from_the_scripts():
    assert in_ca_graph_compile(SimpleNamespace(type="IndexError", message=MESSAGE, traceback=TRACEBACK))
    # The script's own error in its backward hook, outside compiled autograd's runtime: not that.
    assert not in_ca_graph_compile(SimpleNamespace(type="IndexError", message="tuple index out of range",
                                                   traceback='  File "/job/gcn.py", line 9, in hook\n'))
    assert not in_ca_graph_compile(SimpleNamespace(type="IndexError", message=MESSAGE, traceback='  File "/job/gcn.py", line 20\n'))
    assert not in_ca_graph_compile(None)


@pytest.mark.slow  # one torch process
def test_summary_says_a_ca_mode_failed_in_torchs_compile_of_its_graph(record_run):
    run = record_run(str(ROOT / "tests" / "scripts" / "sparse_backward.py"), modes="ca", backend="aot_eager")
    assert run.returncode != 0
    out = cagtool_in_process("summary", run.path).stdout
    lines = out.splitlines()
    at = next(i for i, line in enumerate(lines) if line.strip().startswith("exception: IndexError"))
    assert lines[at + 1].strip().startswith("raised: while Dynamo compiled compiled-autograd graph !0 (the backward compiled autograd "
                                            "captured"), lines[at:at + 2]
    assert "not at a line of your script" in lines[at + 1]


@pytest.mark.slow  # two torch processes
def test_a_job_failing_under_torch_compile_is_torch_compiles_failure_not_compiled_autograds(record_run):
    """tests/scripts/fails_under_compile.py raises at its compiled function's first call (fullgraph=True
    and a graph break); with torch.compile off it trains. Eager ran and aot, compiled autograd forced
    off, failed: the headline says the failure is torch.compile's, and what to do starts with it."""
    run = record_run(str(ROOT / "tests" / "scripts" / "fails_under_compile.py"), modes="eager,aot")
    assert run.returncode != 0
    headline, advice = cagtool_in_process("summary", run.path).stdout.splitlines()[:2]
    assert ("eager ran and aot failed: the job fails under torch.compile with compiled autograd off, so the failure is "
            "torch.compile's, not compiled autograd's") in headline, headline
    assert advice.startswith("what to do: the failure first: it is torch.compile's on this code, with or without compiled "
                             "autograd"), advice


@pytest.mark.slow  # its eager and aot modes beside the ca mode the test above reads
def test_a_job_failing_only_under_compiled_autograd_is_said_so(record_run):
    """sparse_backward.py runs in eager and aot and fails in ca (torch's compile of the CA graph): the
    headline says it fails only with compiled autograd on, never that the failure is torch.compile's."""
    run = record_run(str(ROOT / "tests" / "scripts" / "sparse_backward.py"), modes="ca", backend="aot_eager")
    headline, advice = cagtool_in_process("summary", run.path).stdout.splitlines()[:2]
    assert "eager and aot ran and ca failed: the job fails only with compiled autograd on" in headline, headline
    assert "torch.compile's" not in headline
    # What to do starts with the failure: the sparse tensor the forward broke the graph on is what
    # Dynamo's compile of the backward fails on (the GCN with its matrix dense runs under compiled
    # autograd), and how to keep compiled autograd off that backward.
    assert advice.startswith("what to do: the failure first: the backward compiled autograd captured takes the job's sparse "
                             "tensors"), advice
    assert "hold the matrix dense where it fits in memory (`.to_dense()`" in advice, advice
    assert "torch._dynamo.compiled_autograd._disable() around it" in advice, advice
    summary = " ".join(cagtool_in_process("summary", run.path).stdout.split())
    assert "what it means: The backward compiled autograd captured takes the job's sparse tensors" in summary


@pytest.mark.slow  # reads the recording of the test above
def test_a_ca_failure_beside_aot_alone_is_compiled_autograds_too(record_run, tmp_path):
    """Recorded with `--modes aot,ca` (no eager): torch.compile alone ran the job and compiled
    autograd failed, which is as much its failure as with eager beside them; it read as no one's."""
    import json
    import shutil

    from conftest import private_copy

    run = private_copy(record_run(str(ROOT / "tests" / "scripts" / "sparse_backward.py"), modes="ca", backend="aot_eager").path,
                       tmp_path / "run")
    meta = json.loads((run / "run.json").read_text())
    meta["modes"] = [m for m in meta["modes"] if m != "eager"]
    (run / "run.json").write_text(json.dumps(meta))
    shutil.rmtree(run / "eager")
    headline, advice = cagtool_in_process("summary", run).stdout.splitlines()[:2]
    assert "aot ran and ca failed: the job fails only with compiled autograd on" in headline and "eager and aot" not in headline, headline
    assert advice.startswith("what to do: the failure first: the backward compiled autograd captured takes the job's sparse"), advice


def test_what_to_do_where_compiled_autograd_fails_on_one_ops_backward():
    """An LSTM tagger over pack_padded_sequence: torch.compile alone ran it, and compiled autograd's
    capture failed at PackPaddedSequenceBackward0 (its backward reads the batch sizes' data, which a
    fake tensor has none of). The same job on the padded batch, the padding's targets ignored, ran
    under compiled autograd, and so did the packed one with its backward under _disable()."""
    from cagtool.report.compare.headline import ca_fails_fix

    packed = ca_fails_fix("PackPaddedSequenceBackward0")
    assert packed.startswith("the failure first: compiled autograd cannot run the backward of PackPaddedSequenceBackward0, "
                             "which torch.compile alone runs"), packed
    assert "run the RNN on the padded batch, the loss ignoring the padding (ignore_index, or a mask), instead of " \
           "pack_padded_sequence; or keep compiled autograd off that backward (torch._dynamo.compiled_autograd._disable()" in packed, packed
    own = ca_fails_fix("SomeOpBackward0", outside=True)  # no compiler frame: the job's own code raised it
    assert own.startswith("the failure first: the ca mode's exception was raised in the job's own code") and "PyTorch" not in own, own
    unnamed = ca_fails_fix(None)  # torch's error names no node, and no sparse tensor is said to be in it
    assert unnamed.startswith("the failure first: compiled autograd fails on this job's backward, which torch.compile alone "
                              "runs") and "torch._dynamo.compiled_autograd._disable() around it" in unnamed, unnamed
    other = ca_fails_fix("SomeOpBackward0")
    assert ": another op for the same work, or keep compiled autograd off that backward" in other and "RNN" not in other, other


@pytest.mark.slow  # two torch processes
def test_a_mode_that_ran_out_of_memory_is_not_called_torch_compiles_failure(record_run):
    """tests/scripts/out_of_memory_under_compile.py: its compiled graph asks torch's allocator for 4 TiB,
    so aot fails with "can't allocate memory" where eager trains. That is as much the machine's as the
    mode's (the compiled job may need more, or the machine had less): the headline says the mode ran
    out of memory and leaves whose failure open, and what to do does not start with torch.compile's."""
    run = record_run(str(ROOT / "tests" / "scripts" / "out_of_memory_under_compile.py"), modes="eager,aot")
    assert run.returncode != 0
    lines = cagtool_in_process("summary", run.path).stdout.splitlines()
    assert "can't allocate memory" in lines[0], lines[0]
    assert ("eager ran and aot ran out of memory: whose failure that is, one run does not say (the compiled job may need more "
            "memory than eager, or the machine had less when it ran)") in lines[0], lines[0]
    assert "torch.compile's" not in lines[0] and not lines[1].startswith("what to do: the failure first"), lines[:2]


@pytest.mark.slow  # two torch processes
def test_a_job_failing_where_it_uses_the_compiled_module_is_told_so_not_to_read_dynamos_stack(record_run):
    """tests/scripts/compiled_state_dict_reloaded.py trains, then loads the compiled module's
    state_dict (`_orig_mod.` keys) into a plain model (word_language_model's end with its model
    compiled fails alike, in torch.load). It fails under python, and in every mode: the eager mode
    keeps torch.compile's wrapper as python does. What to do says where the job uses what
    torch.compile returned, not that TORCHDYNAMO_VERBOSE=1 shows Dynamo's stack (Dynamo is not on it)."""
    run = record_run(str(ROOT / "tests" / "scripts" / "compiled_state_dict_reloaded.py"), modes="eager,aot")
    assert run.returncode != 0
    headline, advice = cagtool_in_process("summary", run.path).stdout.splitlines()[:2]
    assert "Error(s) in loading state_dict" in headline and "every mode failed alike where the job uses what torch.compile returned" in headline, headline
    assert "the failure is the script's use of torch.compile, not compiled autograd's" in headline, headline
    assert advice.startswith("what to do: the failure first: the job fails where it uses what torch.compile returned, outside "
                             "the compiler"), advice
    assert "TORCHDYNAMO_VERBOSE" not in advice


def test_a_job_that_fails_in_every_mode_alike_is_told_its_own_failure(record_run):
    """tests/scripts/crash_mid_training.py raises at its step 3 whatever runs it: eager fails as aot
    does, so the failure is the job's own, not torch.compile's (which "eager ran and aot failed"
    would say) nor compiled autograd's; its three steps were still recorded."""
    run = record_run(str(ROOT / "tests" / "scripts" / "crash_mid_training.py"), modes="eager,aot")
    assert run.returncode == 1
    headline, advice = cagtool_in_process("summary", run.path).stdout.splitlines()[:2]
    assert "RuntimeError: boom at step 3" in headline and "every mode failed alike, eager too: the job's own failure" in headline, headline
    assert "use of torch.compile" not in headline and "eager ran and aot failed" not in headline, headline
    assert advice.startswith("what to do: the failure first: it is the job's own, with or without compiling"), advice
