"""cagtool's own tensor work on the job's thread kept out of the script's torch-function and
dispatch modes.

cagtool reads tensors while the job runs: a CPU loss's value as its backward ends (`item()`), the
gradient digests in an optimizer's pre-hook (norms, dot products), the losses and final norms at
the end. Those moments fall inside whatever mode the script has entered around its step: a
`TorchDispatchMode` (a FLOP counter, a memory tracker, torch's own test_torch_dispatch_mode) or a
`TorchFunctionMode` (`with torch.device(...)`, test_torch_function_mode) would otherwise see
cagtool's ops among the job's, count them and, for `torch.device`, place cagtool's new tensors on
its device. The modes are taken off the stack for cagtool's work and put back after it
(docs/torch-internals.md, "The script's modes"); a tensor subclass's own handlers still run, as
they must for its values to be read.
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator, TypeVar

T = TypeVar("T")

_stack_lengths: tuple[Any, ...] = ()  # torch's two mode-stack length functions, once torch is imported


def outside_user_modes(work: Callable[..., T], *args: Any) -> T:
    """work(*args), with the script's modes off their stacks while it runs. With no mode entered,
    the common case on the step path, it costs two length reads (C calls, ~0.1 us each) and the
    call. torch.export's pre-dispatch modes (its tracing runs no training step) are not read here;
    they come off with the others when a mode is entered."""
    global _stack_lengths
    if not _stack_lengths:
        import torch

        _stack_lengths = (torch._C._len_torch_function_stack, torch._C._len_torch_dispatch_stack)
    functions, dispatch = _stack_lengths
    if functions() or dispatch():
        with _modes_off():
            return work(*args)
    return work(*args)


@contextlib.contextmanager
def _modes_off() -> Iterator[None]:
    import torch
    from torch.utils._python_dispatch import _disable_current_modes

    functions = [torch._C._pop_torch_function_stack() for _ in range(torch._C._len_torch_function_stack())]
    try:
        with _disable_current_modes():
            yield
    finally:
        for mode in reversed(functions):
            torch._C._push_on_torch_function_stack(mode)
