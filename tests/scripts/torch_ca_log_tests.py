"""The shapes of three of torch's own compiled-autograd tests (test/inductor/test_compiled_autograd.py
in pytorch/pytorch: test_verbose_logs_graph, test_verbose_logs_aot_id, test_higher_order_gradients),
written for torch 2.13's `_enable` and the aot_eager backend, as a script: it prints one JSON line
with what torch's tests assert on (the verbose log's lines, torch's counters, the gradients), so a
test can compare a plain run with one under `cagtool.capture()` or `cagtool run`.

    python torch_ca_log_tests.py [--capture]     # --capture: the whole script inside cagtool.capture()
"""

import contextlib
import io
import itertools
import json
import logging
import os
import sys
from unittest import mock

import torch
from torch._dynamo import compiled_autograd
from torch._dynamo.backends.debugging import aot_eager
from torch._dynamo.utils import counters


def logs_to_string(module, log_option):
    """torch.testing._internal.logging_utils.logs_to_string, which needs expecttest: the artifact
    turned on through TORCH_LOGS in a fresh log state (the prior one restored after), its logger's
    records into a string."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    internal = torch._logging._internal

    @contextlib.contextmanager
    def ctx():
        prior = internal._get_log_state()
        internal._set_log_state(internal.LogState())
        try:
            with mock.patch.dict(os.environ, {"TORCH_LOGS": log_option}):
                internal._init_logs()
                logger = torch._logging.getArtifactLogger(module, log_option)
                logger.addHandler(handler)
                try:
                    yield
                finally:
                    logger.removeHandler(handler)
        finally:
            internal._set_log_state(prior)
            internal._init_logs()

    return stream, ctx


def make_compiler_fn(backend="aot_eager", fullgraph=True, dynamic=True):
    def compiler_fn(gm):
        def inner(gm_, example_inputs_):
            counters["compiled_autograd"]["compiles"] += 1
            return aot_eager(gm_, example_inputs_)

        return torch.compile(gm, backend=inner if backend == "aot_eager" else backend, fullgraph=fullgraph, dynamic=dynamic)

    return compiler_fn


def fresh():
    torch._logging.set_logs(compiled_autograd_verbose=False)
    torch._dynamo.config.compiled_autograd = False
    compiled_autograd.reset()


def outputs_and_counts(fn):
    """torch's check_output_and_recompiles: eager, then under compiled autograd."""
    with torch.autograd.set_multithreading_enabled(False):
        torch._dynamo.reset()
        counters["compiled_autograd"].clear()
        torch.manual_seed(123)
        expected = list(fn())
        torch.manual_seed(123)
        with compiled_autograd._enable(make_compiler_fn()):
            actual = list(fn())
    return {
        "equal": all(torch.equal(a, b) for a, b in zip(expected, actual)),
        "captures": counters["compiled_autograd"]["captures"],
        "compiles": counters["compiled_autograd"]["compiles"],
    }


def mlp_grads(compile_forward):
    def fn():
        model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 4), torch.nn.ReLU())
        x = torch.randn([2, 4])
        forward = torch.compile(lambda m, x: m(x), backend="aot_eager") if compile_forward else (lambda m, x: m(x))
        forward(model, x).sum().backward()
        yield model[0].weight.grad
        yield model[0].bias.grad
        yield model[2].weight.grad
        yield model[2].bias.grad

    return fn


def verbose_log(compile_forward):
    fresh()
    logs, ctx = logs_to_string(compiled_autograd.__name__, "compiled_autograd_verbose")
    with ctx():
        result = outputs_and_counts(mlp_grads(compile_forward))
    result["log"] = [line for line in logs.getvalue().split("\n") if line.strip()]
    fresh()
    return result


def higher_order_gradients():
    fresh()

    def f(x):
        return x**3

    def fn(fwd_compiler, ca_compiler):
        torch.manual_seed(123)
        x = torch.tensor(2.0, requires_grad=True)
        got = [None, None, None, None]
        try:
            with compiled_autograd._enable(ca_compiler):
                got[0] = torch.compile(f, backend=fwd_compiler)(x)
                got[1] = torch.autograd.grad(got[0], x, create_graph=True)[0]
                got[2] = torch.autograd.grad(got[1], x, create_graph=True)[0]
                got[3] = torch.autograd.grad(got[2], x, create_graph=True)[0]
        except RuntimeError as exc:
            if "does not currently support higher order gradients" not in str(exc):
                raise
        return [None if v is None else float(v) for v in got]

    def eager():
        return torch.compile(backend="eager")

    def aot():
        return torch.compile(backend="aot_eager")

    out = {"eager_eager": fn("eager", eager()), "captures_eager": counters["compiled_autograd"]["captures"]}
    counters.clear()
    out["cached"] = fn("eager", eager())
    out["captures_cached"] = counters["compiled_autograd"]["captures"]
    torch._dynamo.reset()
    out["aot_aot"] = fn("aot_eager", aot())
    out["aot_eager"] = fn("aot_eager", eager())
    out["eager_aot"] = fn("eager", aot())
    out["captures_end"] = counters["compiled_autograd"]["captures"]
    fresh()
    return out


def main():
    results = {}
    with mock.patch("torch._functorch.aot_autograd.AOT_COUNTER", new_callable=itertools.count):
        results["verbose_logs_graph"] = verbose_log(compile_forward=False)
    with mock.patch("torch._functorch.aot_autograd.AOT_COUNTER", new_callable=itertools.count), \
            mock.patch("torch._dynamo.config.inline_inbuilt_nn_modules", True):
        results["verbose_logs_aot_id"] = verbose_log(compile_forward=True)
    results["higher_order_gradients"] = higher_order_gradients()
    sys.stdout.write(json.dumps(results) + "\n")


if __name__ == "__main__":
    if "--capture" in sys.argv:
        import cagtool

        with cagtool.capture(backend="eager", runs_root=sys.argv[-1] if sys.argv[-1] != "--capture" else ".cagtool/runs"):
            main()
    else:
        main()
