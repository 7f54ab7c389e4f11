"""What `cagtool.capture()`'s thread scope relies on in torch 2.13 (docs/torch-internals.md, "One
thread's compiled autograd"): plain torch, no cagtool. Threads are ordered by events; the timeouts
only end a test that would otherwise hang."""

from __future__ import annotations

import threading

import pytest
import torch
from torch._dynamo import compiled_autograd as ca

HANG = 120.0


def _compiler(calls: list[str]):
    def compiler(gm):
        calls.append(threading.current_thread().name)
        return torch.compile(gm, backend="eager")

    return compiler


def _backward(n: int = 3) -> None:
    torch.nn.Linear(4, 1)(torch.randn(n, 4)).sum().backward()


def test_enable_in_one_thread_compiles_another_threads_backward():
    # The compiler _enable installs is one C++ global: every thread's backward reads it.
    calls: list[str] = []
    ready, done = threading.Event(), threading.Event()

    def worker() -> None:
        with ca._enable(_compiler(calls), dynamic=False):
            ready.set()
            done.wait(HANG)

    thread = threading.Thread(target=worker, name="enabling")
    thread.start()
    try:
        assert ready.wait(HANG)
        _backward()
    finally:
        done.set()
        thread.join(HANG)
    assert calls == ["MainThread"]


def test_another_threads_backward_during_a_capture_raises():
    # While a capture holds the engine's compiled-autograd lock, a second one (any thread) raises.
    in_capture, go = threading.Event(), threading.Event()
    cls = ca.AutogradCompilerInstance
    original = cls.end_capture

    def end_capture(inst, outputs):
        in_capture.set()
        go.wait(HANG)
        return original(inst, outputs)

    def worker() -> None:
        with ca._enable(_compiler([]), dynamic=False):
            _backward()

    cls.end_capture = end_capture
    thread = threading.Thread(target=worker)
    try:
        thread.start()
        assert in_capture.wait(HANG)
        with pytest.raises(NotImplementedError, match="within another compiled autograd call"):
            _backward(5)
    finally:
        go.set()
        thread.join(HANG)
        cls.end_capture = original


def test_the_compiled_graph_runs_with_the_compiler_taken_off():
    # runtime_wrapper runs the graph under _disable(): meanwhile another thread's backward is plain.
    calls: list[str] = []
    in_graph, go = threading.Event(), threading.Event()
    model = torch.nn.Linear(4, 1)

    @torch._dynamo.disable
    def hook(grad: torch.Tensor) -> None:
        in_graph.set()
        go.wait(HANG)

    model.weight.register_hook(hook)

    def worker() -> None:
        with ca._enable(_compiler(calls), dynamic=False):
            model(torch.randn(3, 4)).sum().backward()

    thread = threading.Thread(target=worker, name="enabling")
    thread.start()
    try:
        assert in_graph.wait(HANG)
        _backward(5)
    finally:
        go.set()
        thread.join(HANG)
    assert calls == ["enabling"]


def test_enable_turns_the_python_flag_off_on_exit_and_multithreading_is_per_thread():
    seen: dict[str, bool] = {}
    with ca._enable(_compiler([]), dynamic=False):
        seen["inside"] = ca.compiled_autograd_enabled
        other: list[bool] = []
        thread = threading.Thread(target=lambda: other.append(torch._C._is_multithreading_enabled()))
        thread.start()
        thread.join(HANG)
        seen["multithreading here"] = torch._C._is_multithreading_enabled()
        seen["multithreading elsewhere"] = other[0]
    seen["after"] = ca.compiled_autograd_enabled
    assert seen == {"inside": True, "multithreading here": False, "multithreading elsewhere": True, "after": False}
