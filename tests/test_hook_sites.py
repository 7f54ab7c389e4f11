"""capture/observe/hook_sites.py: hook objects named without running anything of the script's."""

from __future__ import annotations

import functools

import torch

from cagtool.capture.observe.hook_sites import hook_sites


def scale(grad, factor=1.0):
    return grad * factor


class Clipper:
    def __call__(self, grad):
        return grad

    def __getattr__(self, name):  # a lookup that reached the instance would fail the test
        raise AssertionError(f"looked up {name!r} on the script's object")


class Trainer:
    def log_norm(self, grad):
        return None


def test_wrappers_are_followed_to_the_function_and_one_site_counts_its_hooks():
    inline = lambda g: g  # noqa: E731
    hooks = [functools.partial(scale, factor=0.5), Clipper(), Trainer().log_norm, torch._dynamo.disable(inline), inline, len, object()]
    slots = [("tensor_pre_hook", i) for i in range(len(hooks))] + [("tensor_pre_hook", 4), ("post_hook", 4), ("tensor_pre_hook", 99)]
    sites = {(s.hook_type, s.function): s for s in hook_sites(hooks, slots)}
    assert sites[("tensor_pre_hook", "scale")].line == scale.__code__.co_firstlineno
    assert sites[("tensor_pre_hook", "scale")].code == "def scale(grad, factor=1.0):"
    assert sites[("tensor_pre_hook", "Clipper.__call__")].file == __file__
    assert ("tensor_pre_hook", "Trainer.log_norm") in sites
    lam = sites[("tensor_pre_hook", inline.__qualname__)]
    assert lam.count == 3 and lam.line == inline.__code__.co_firstlineno  # disable(inline) and inline twice
    assert sites[("post_hook", inline.__qualname__)].count == 1
    assert (sites[("tensor_pre_hook", "len")].file, sites[("tensor_pre_hook", "object")].file) == ("", "")
    assert len(sites) == 7  # the slot past the end is skipped
