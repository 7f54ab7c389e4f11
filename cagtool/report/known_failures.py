"""What a process's exception means and what to do, for failures whose cause is known and outside
the script's own code: read from the exception torch raised (type, message, traceback), pure text.
Each explanation was checked by running the alternative it recommends (docs/torch-internals.md,
"DeepSpeed"). Also a library's graph break whose cause and removal are known (`library_break_fix`),
read from the break's place and the call there as the record keeps them."""

from __future__ import annotations

import re
from typing import Any

# DeepSpeed ZeRO-3 under compiled autograd: the first backward's CA graph calls ZeRO-3's
# post-accumulate-grad hook (reduce_partition_and_remove_grads), and Dynamo, tracing the hook,
# fails on a parameter ZeRO-3 has partitioned (torch 2.13, DeepSpeed 0.19: "AssertionError: 1 != 2").
_ZERO3_HOOK = "deepspeed/runtime/zero/stage3.py"
ZERO3_UNDER_CA = (
    "DeepSpeed ZeRO-3 partitions each parameter and reduces its gradient in a backward hook; under "
    "compiled autograd that hook runs inside the captured graph, where Dynamo cannot trace the "
    "partitioned parameter. Use ZeRO stage 1 or 2 with compiled autograd, or ZeRO-3 without it "
    "(engine.compile(compiled_autograd_enabled=False)); both train"
)


# torch._dynamo.mark_dynamic on a forward input under compiled autograd: the CA graph's saved copy
# of the tensor (L['inputs'][N]) specializes the marked dimension (torch 2.13: docs/torch-internals.md,
# "`mark_dynamic` under compiled autograd").
_CA_INPUT_CONSTRAINT = "L['inputs']["
MARK_DYNAMIC_UNDER_CA = (
    "torch._dynamo.mark_dynamic makes any specialization of the marked dimension an error, and the "
    "compiled-autograd graph's copy of the saved tensor (L['inputs'][N]) specializes it; use "
    "torch._dynamo.maybe_mark_dynamic(tensor, dim), which only hints, and the job runs"
)


# Dynamo compiling a compiled-autograd graph: the CA runtime wrapper called the compiled graph, and
# the error Dynamo raised names the graph's generated code (`<eval_with_key>.N`, its `forward`) as
# the "user code" it was tracing (torch 2.13: an IndexError at `inputs[0]` on a backward that saved
# a sparse tensor, pytorch/examples' GCN).
_CA_RUNTIME = "torch/_dynamo/compiled_autograd.py"
_CA_GRAPH_CODE = 'File "<eval_with_key>'


def in_ca_graph_compile(exception: Any) -> bool:
    """The exception was raised while Dynamo compiled a compiled-autograd graph: in torch's
    handling of the backward it captured, not at a line of the script."""
    if exception is None:
        return False
    message, traceback = getattr(exception, "message", "") or "", getattr(exception, "traceback", "") or ""
    return _CA_RUNTIME in traceback and _CA_GRAPH_CODE in message


# The backward of an op on a sparse tensor (torch.spmm's saves the sparse matrix) under compiled
# autograd: Dynamo, compiling the captured graph, fails on the sparse input (torch 2.13: IndexError in
# its automatic dynamic shapes' read of the tensor's strides, which a sparse tensor has none of), as
# the forward's frame broke the graph on it. The same job with the matrix dense runs under compiled
# autograd (pytorch/examples' GCN; docs/torch-internals.md, "An exception raised while Dynamo
# compiles a compiled-autograd graph").
SPARSE_BREAK = "Attempted to wrap sparse Tensor"
SPARSE_IN_CA_GRAPH = (
    "the backward compiled autograd captured takes the job's sparse tensors (torch.compile does not support them: the "
    "forward broke the graph on them, \"Attempted to wrap sparse Tensor\"), and Dynamo's compile of that backward fails on "
    "them; hold the matrix dense where it fits in memory (`.to_dense()`: pytorch/examples' GCN so runs under compiled "
    "autograd), or keep compiled autograd off that backward (torch._dynamo.compiled_autograd._disable() around it)"
)


def sparse_in_ca_graph(in_ca_graph: bool, break_reasons: Any) -> bool:
    """A failure raised while Dynamo compiled a compiled-autograd graph (`in_ca_graph_compile`), in
    a mode whose forward broke the graph on a sparse tensor: the sparse tensor is what that compile
    fails on."""
    return in_ca_graph and any(SPARSE_BREAK in (reason or "") for reason in break_reasons)


def explain(exception: Any) -> str:
    """The explanation of a manifest's exception (record.schema's ExceptionInfo), "" if none is known."""
    if exception is None:
        return ""
    text = f"{getattr(exception, 'message', '') or ''}\n{getattr(exception, 'traceback', '') or ''}"
    if _ZERO3_HOOK in text and ("call_hook" in text or "compiled_autograd" in text):
        return ZERO3_UNDER_CA
    if "ConstraintViolationError" in text and _CA_INPUT_CONSTRAINT in text:
        return MARK_DYNAMIC_UNDER_CA
    return ""


# transformers' PreTrainedModel.loss_function warns, on every call, that the model's loss_type is
# unset where the model's class names no loss (GPT2LMHeadModel: loss_type None, its name holds no
# "ForCausalLM"); Dynamo breaks the graph on the logger call in every compile of the forward. Set,
# the warning's branch is never taken: a tiny GPT-2 under HF Trainer, graph breaks 4 -> 0
# (transformers 5.25, torch 2.13; docs/torch-internals.md, "Graph breaks in libraries").
_TRANSFORMERS_MODELING = "transformers/modeling_utils.py"
LOSS_TYPE_UNSET = (
    "transformers warns in every compiled forward that the model's loss_type is unset (a model class whose name names "
    "no loss, such as GPT2LMHeadModel), and Dynamo breaks the graph on that warning: set it before training, "
    '`model.loss_type = "ForCausalLM"` (the loss it falls back to), and the break goes'
)


# torch's hint for an RNN module a compiled function calls (GB0014, "Set torch._dynamo.config.allow_rnn
# =True"): followed, an LSTM's training fails to compile on CPU (torch 2.13, 2.14, 2.15: TypeError at
# torch.ops.aten.mkldnn_rnn_layer under Inductor, an AssertionError on the tensors it saves under
# aot_eager; pytorch/examples' mnist_rnn). Without it Dynamo gives up on the whole function that holds
# the call, even when the module is passed to a torch.compiler.disable'd function; under compiled
# autograd the backward is compiled whole, the RNN's included (the same job ran so).
_RNN_HINT = "allow_rnn=True"
RNN_HINT_ON_CPU = (
    "on CPU it fails an RNN's training compile (checked on an LSTM, torch 2.13-2.15: torch.ops.aten.mkldnn_rnn_layer); "
    "there, call the RNN outside the compiled function and compile the modules around it (Dynamo gives up on any function "
    "that holds the RNN, even one passing it to a torch.compiler.disable'd function); compiled autograd compiles the "
    "backward whole, the RNN's included"
)


def hint_caveat(hint: str) -> str | None:
    """What cagtool found of following torch's hint for a graph break, where it misleads; None otherwise."""
    return RNN_HINT_ON_CPU if _RNN_HINT in hint else None


# transformers' LayerDrop (wav2vec2, HuBERT, Whisper, BART and others: `dropout_probability =
# torch.rand([])` a line above, then `skip_the_layer = dropout_probability < self.config.layerdrop`
# and `if not skip_the_layer ...:`, or `if dropout_probability < self.layerdrop: continue`): a
# branch on a tensor draw whose draw is on another line than the branch torch reports (transformers
# 5.25; a tiny Wav2Vec2ForCTC at its config's layerdrop 0.1 skipped a layer at step 6 of 8).
_LAYER_DROP_IN_CODE = re.compile(r"\bskip_the_layer\b|\blayerdrop\b")
LAYER_DROP_CONFIG_FIX = (
    "transformers' LayerDrop draws which encoder or decoder layers run at every training step (the model config's "
    "`layerdrop`, or `encoder_layerdrop` / `decoder_layerdrop`): set it to 0.0 before the model is made "
    "(`from_pretrained(..., layerdrop=0.0)`) and every layer runs at every step, one backward graph")


def library_layer_drop(file: str, code: str) -> bool:
    """Whether a data-dependent branch torch reported at `file`'s line `code` is transformers' LayerDrop."""
    return "transformers/models/" in file.replace("\\", "/") and bool(_LAYER_DROP_IN_CODE.search(code or ""))


def library_break_fix(file: str, code: str, rest: str) -> str | None:
    """What removes a graph break at a library's line whose cause is known (`code` the line, `rest`
    the call's continuation, as GraphBreakEvent keeps them); None for any other break."""
    said = f"{code} {rest}"
    if file.replace("\\", "/").endswith(_TRANSFORMERS_MODELING) and "warning_once(" in code and "`loss_type=" in said:
        return LOSS_TYPE_UNSET
    return None
