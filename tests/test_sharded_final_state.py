"""The end-of-run norms come from the model's parameters, by name, when the optimizer steps tensors
no module holds (a sharded optimizer's flat partition, as DeepSpeed ZeRO 1/2 hands its client
optimizer); a rank's shard of a parameter (FSDP's FlatParameter, ZeRO-3's partitioned parameter)
is said to be one. Real torch modules and optimizers, in this process."""

from __future__ import annotations

import math
from typing import Iterator

import pytest
import torch

from cagtool.capture.steps.grad_digest import GradDigests, ParamNames
from cagtool.capture.steps.sharded import OF_MODEL, OF_OPTIMIZER, OF_SHARDS, final_params, readable
from cagtool.record.schema import OPTIMIZER_TENSOR_PREFIX


@pytest.fixture
def names() -> Iterator[ParamNames]:
    found = ParamNames()
    found.install()
    yield found
    found.uninstall()


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))


def test_a_plain_optimizer_is_read_as_it_is(names):
    model = _model()
    params = list(model.parameters())
    assert final_params(params, names) == (params, OF_OPTIMIZER)
    assert final_params(params, None) == (params, OF_OPTIMIZER)


def test_a_flat_partition_no_module_holds_is_replaced_by_the_models_parameters(names):
    model = _model()
    # ZeRO 1/2's shape: the client optimizer steps one flat fp32 slice of all parameters
    flat = torch.nn.Parameter(torch.cat([p.detach().flatten() for p in model.parameters()])[:20].clone())
    params, of = final_params([flat], names)
    assert of == OF_MODEL
    assert [id(p) for p in params] == [id(p) for p in sorted(model.parameters(), key=lambda p: names.name_of(p))]
    assert sorted(names.name_of(p) for p in params) == ["0.bias", "0.weight", "2.bias", "2.weight"]
    whole = math.sqrt(sum(float(p.detach().double().pow(2).sum()) for p in model.parameters()))
    assert math.isclose(math.sqrt(sum(float(p.detach().double().pow(2).sum()) for p in params)), whole)


def test_a_partitioned_parameter_is_a_shard(names):
    model = _model()
    model[0].weight.ds_tensor = model[0].weight.detach()[:1]  # ZeRO-3 keeps a rank's shard here
    params = list(model.parameters())
    assert final_params(params, names)[1] == OF_SHARDS
    flat = torch.nn.Parameter(torch.zeros(3))
    assert final_params([flat], names)[1] == OF_SHARDS  # the model's parameters are shards themselves


def test_a_digested_tensor_no_module_holds_is_named_as_the_optimizers():
    digests = GradDigests()
    digests.names.install()
    try:
        model = _model()
        flat = torch.nn.Parameter(torch.zeros(6))
        flat.grad = torch.ones(6)
        model(torch.randn(3, 4)).sum().backward()
        digests.digest(0, ["first"], [flat, *model.parameters()])
    finally:
        digests.names.uninstall()
    [event] = digests.events()
    assert event["names"] == [f"{OPTIMIZER_TENSOR_PREFIX}0>", "0.weight", "0.bias", "2.weight", "2.bias"]


def test_a_tensor_whose_storage_was_freed_is_not_read():
    # FSDP2 frees an unsharded parameter's storage after use, its sizes kept: a read of it is a
    # read through a null pointer (the whole process dies), so readable() must say so first.
    freed = torch.nn.Parameter(torch.randn(4, 4))
    freed.untyped_storage().resize_(0)
    assert not readable(freed)
    assert readable(torch.nn.Parameter(torch.randn(4, 4)))
    assert readable(torch.randn(4, 4)[1:, 2:])  # a view inside its storage
    assert readable(torch.zeros(0))
    assert readable(torch.randn(3, 3).to_sparse())  # no one storage: read through its own ops


def test_a_freed_gradient_is_digested_as_none_and_the_rest_as_usual():
    digests = GradDigests()
    digests.names.install()
    try:
        model = _model()
        model(torch.randn(3, 4)).sum().backward()
        model[0].weight.grad.untyped_storage().resize_(0)
        digests.digest(0, ["first"], list(model.parameters()))
    finally:
        digests.names.uninstall()
    [event] = digests.events()
    assert event["names"] == ["0.weight", "0.bias", "2.weight", "2.bias"]
    assert event["norm"][0] is None and all(n is not None for n in event["norm"][1:])


def test_a_parameter_a_library_put_into_a_module_itself_is_named():
    # FSDP2's fully_shard writes each parameter's DTensor into `module._parameters` directly,
    # past torch's registration hooks: the names come from searching the known modules' tables.
    names = ParamNames()
    names.install()
    try:
        model = _model()
        replaced = torch.nn.Parameter(model[2].weight.detach().clone())
        model[2]._parameters["weight"] = replaced
        assert names.name_of(replaced) == "2.weight"
        assert names.name_of(model[0].bias) == "0.bias"
        assert names.name_of(torch.nn.Parameter(torch.zeros(1))) is None  # held by no module
    finally:
        names.uninstall()


def test_an_optimizers_parameter_at_the_id_of_a_collected_one_is_watched_from_its_own_version():
    """The versions read when an optimizer is made are kept by id: a parameter made where a
    collected one was has that one's id, and is read anew (its own tensor and version), not left
    to the gone one's entry, where the end's count skipped it as not watched."""
    import weakref

    from cagtool.capture.steps.final_state import note_initial_versions

    model = _model()
    gone = torch.nn.Parameter(torch.zeros(1))
    first = next(model.parameters())
    initial = {id(first): (weakref.ref(gone), 7)}  # what a collected parameter at this id left
    note_initial_versions(initial, torch.optim.SGD(model.parameters(), lr=0.1))
    assert initial[id(first)][0]() is first and initial[id(first)][1] == first._version
    assert len(initial) == len(list(model.parameters()))


def test_the_final_norm_of_a_complex_parameter_counts_its_imaginary_part_and_warns_nothing():
    """float64 of a complex tensor drops its imaginary part with a UserWarning in the job's output
    (an FNO's spectral weights): the norm is |z|'s, in one read and chunked, and nothing is warned."""
    import warnings

    from cagtool.capture.steps import final_state

    z = torch.complex(torch.full((3000,), 3.0), torch.full((3000,), 4.0))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert final_state._sum_of_squares(z) == pytest.approx(3000 * 25.0)
        assert final_state._sum_of_squares(z.conj()) == pytest.approx(3000 * 25.0)
        old, final_state._NORM_CHUNK = final_state._NORM_CHUNK, 1000
        try:
            assert final_state._sum_of_squares(z) == pytest.approx(3000 * 25.0)
        finally:
            final_state._NORM_CHUNK = old
