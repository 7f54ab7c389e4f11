"""Gradient digests at capture time (capture/steps/grad_digest.py), in-process on real torch: the
numbers are the gradients', the names are module paths whatever wraps the model, and the
schedule digests the steps it should, without reading the device in the step."""

from __future__ import annotations

import math

import pytest
import torch

from cagtool.capture.steps.grad_digest import CHECKSUM_PERIOD, GradDigests
from cagtool.record.schema import REASON_EVERY, REASON_FIRST, REASON_RECOMPILE, REASON_SAME_AT_END


@pytest.fixture
def digests():
    d = GradDigests(every=3)
    d.names.install()
    yield d
    d.names.uninstall()


def test_digest_values_are_the_gradients_norm_max_and_weighted_sum(digests):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(40, 60), torch.nn.Linear(60, 1))
    model(torch.randn(5, 40)).sum().backward()
    digests.digest(0, [REASON_FIRST], list(model.parameters()))
    [event] = digests.events()
    assert event["names"] == ["0.weight", "0.bias", "1.weight", "1.bias"]
    for i, p in enumerate(model.parameters()):
        g = p.grad.reshape(-1).double()
        weights = 1 + (torch.arange(g.numel(), dtype=torch.float64) % CHECKSUM_PERIOD) / CHECKSUM_PERIOD
        assert event["norm"][i] == pytest.approx(float(g.norm()), rel=1e-5)
        assert event["max_abs"][i] == pytest.approx(float(g.abs().max()), rel=1e-6)
        assert event["checksum"][i] == pytest.approx(float((g * weights).sum()), rel=1e-4, abs=1e-6)
        assert event["numels"][i] == p.numel() and event["dtypes"][i] == "float32"


def test_a_sparse_gradient_is_digested_as_its_dense_form(digests):
    """nn.Embedding(sparse=True): its gradient (uncoalesced COO, rows repeated) gets the digests its
    dense form would get, read from the stored values only; before, it was left out as "no
    gradient" while the parity line said "all N parameters"."""
    torch.manual_seed(0)
    sparse = torch.nn.Embedding(3000, 5, sparse=True)
    dense = torch.nn.Embedding(3000, 5)
    dense.weight.data.copy_(sparse.weight.data)
    idx = torch.tensor([7, 2999, 7, 1500, 0, 7])
    for emb in (sparse, dense):
        emb(idx).pow(2).sum().backward()
    assert sparse.weight.grad.layout == torch.sparse_coo and not sparse.weight.grad.is_coalesced()
    digests.digest(0, [REASON_FIRST], [sparse.weight, dense.weight])
    [event] = digests.events()
    for field in ("norm", "max_abs", "checksum"):
        assert event[field][0] is not None
        assert event[field][0] == pytest.approx(event[field][1], rel=1e-5), field
    assert event["numels"] == [15000, 15000]


def test_checksum_sees_a_permutation_the_norms_do_not(digests):
    a = torch.nn.Parameter(torch.zeros(2048))
    b = torch.nn.Parameter(torch.zeros(2048))
    a.grad = torch.randn(2048)
    b.grad = a.grad.flip(0)
    digests.digest(0, [REASON_FIRST], [a, b])
    [event] = digests.events()
    assert event["norm"][0] == pytest.approx(event["norm"][1])
    assert abs(event["checksum"][0] - event["checksum"][1]) > 1e-3 * abs(event["checksum"][0]) + 1e-3


def test_names_drop_the_compile_wrapper_and_keep_ddp_like_prefixes(digests):
    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.q_proj = torch.nn.Linear(4, 4, bias=False)

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = torch.nn.ModuleList([Block(), Block()])

    net = Net()
    compiled = torch.compile(net, backend="eager")  # OptimizedModule holds net as _orig_mod
    assert compiled is not net
    for p in net.parameters():
        p.grad = torch.ones_like(p)
    digests.digest(0, [REASON_FIRST], list(net.parameters()))
    assert digests.events()[0]["names"] == ["layers.0.q_proj.weight", "layers.1.q_proj.weight"]


def test_parameters_of_deep_copied_modules_are_named_by_their_paths(digests):
    """nn.TransformerEncoder deep-copies the layer it is given (`copy.deepcopy`, whose copies set
    their attributes without registering them: no registration hook runs for the copies' modules
    and parameters): every parameter is still named by its module path, not `<unnamed tensor N>`
    (pytorch/examples' word_language_model, its Transformer: 24 of 29 were unnamed)."""
    layer = torch.nn.TransformerEncoderLayer(8, 2, 16)
    model = torch.nn.ModuleDict({"encoder": torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False),
                                 "head": torch.nn.Linear(8, 3)})
    del layer  # the one copied: no module holds it
    model["head"](model["encoder"](torch.randn(5, 2, 8))).sum().backward()
    expected = dict(model.named_parameters())
    digests.digest(0, [REASON_FIRST], list(expected.values()))
    assert digests.events()[0]["names"] == list(expected)
    assert "encoder.layers.1.self_attn.in_proj_weight" in expected
    # the model's parameters, where an optimizer's tensors have no name (the final norms of a
    # sharded optimizer's job): the copies' too
    assert {id(p) for p in digests.names.module_params()} == {id(p) for p in expected.values()}


def test_a_parameter_at_the_id_of_one_searched_before_is_searched_again(digests):
    """The search of the modules' own tables is kept, and searched again only for a parameter it
    does not hold. A parameter made where a collected one was has that one's id: found in the kept
    index by id, it was taken as unknown (`<unnamed tensor N>`) until the identity is checked.
    Here the kept index holds, under the new parameter's id, an entry of another tensor, as it
    would after such a reuse."""
    import weakref

    layer = torch.nn.TransformerEncoderLayer(8, 2, 16)
    model = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
    del layer
    gone = torch.nn.Parameter(torch.zeros(1))
    param = model.layers[1].linear2.weight
    assert digests.names.name_of(model.layers[0].linear1.weight) == "layers.0.linear1.weight"  # the index is kept
    digests.names._placed[id(param)] = (weakref.ref(gone), [])
    assert digests.names.name_of(param) == "layers.1.linear2.weight"


def test_a_parameter_registered_at_a_collected_ones_id_takes_its_own_place_in_the_order(digests):
    """The registration order (which orders parameters that share a path) is the order of the
    entries kept by id: a parameter registered where a collected one's entry was takes the place
    of its own registration, not the gone one's."""
    import weakref

    names = digests.names
    gone = torch.nn.Parameter(torch.zeros(1))
    first = torch.nn.Linear(2, 2)
    late = torch.nn.Parameter(torch.zeros(1))
    names._param_owners = {id(late): (weakref.ref(gone), []), **names._param_owners}  # what a collected one left, first
    holder = torch.nn.Module()
    holder.register_parameter("w", late)
    order = names.registration_order()
    assert order[id(late)] > order[id(first.weight)]
    assert names.name_of(late) == "w"


def test_schedule_first_step_every_k_and_compiles_with_one_look_per_due_step(digests):
    model = torch.nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    looks = []
    for step in range(8):
        model(torch.randn(2, 3)).sum().backward()
        digests.countdown -= 1  # what the optimizer pre-hook does
        if digests.countdown <= 0:
            looks.append(step)
            digests.before_step(step, recompiled=(step == 4), optimizer=opt)
        if step == 3:
            digests.arm()  # a compile noted during step 4's forward would arm it
        opt.step()
        opt.zero_grad()
    assert digests.steps == [0, 3, 4, 6]
    assert looks == [0, 1, 3, 4, 5, 6, 7]  # a due step's next look disarms: one look a step at most
    reasons = {e["step"]: e["reasons"] for e in digests.events()}
    assert reasons[0] == [REASON_FIRST, REASON_EVERY] and reasons[4] == [REASON_RECOMPILE]
    assert all(math.isfinite(v) for e in digests.events() for v in e["norm"])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_a_digest_on_cuda_never_waits_for_the_device(digests):
    """The digests stay on the device until `events` (the end of the run): torch's sync debug mode
    raises on any synchronising call made while digesting."""
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Linear(64, 1)).cuda()
    model(torch.randn(8, 64, device="cuda")).sum().backward()
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        digests.digest(0, [REASON_FIRST], list(model.parameters()))
        digests.digest(1, [REASON_EVERY], list(model.parameters()))
    finally:
        torch.cuda.set_sync_debug_mode("default")
    events = digests.events()
    assert [e["step"] for e in events] == [0, 1] and all(v is not None for v in events[0]["norm"])


def test_a_parameter_a_compiled_optimizer_step_reads_keeps_its_module_path(digests):
    """Dynamo's graph of a compiled `opt.step()` registers the parameters it reads under its own
    names (`self___param_groups_0__params___0`); the digest names them by the model's path."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Tanh(), torch.nn.Linear(3, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    torch._dynamo.reset()
    step = torch.compile(opt.step, backend="aot_eager")
    model(torch.randn(2, 4)).sum().backward()
    step()
    digests.digest(0, [REASON_FIRST], list(model.parameters()))
    [event] = digests.events()
    assert event["names"] == ["0.weight", "0.bias", "2.weight", "2.bias"]


def test_parameters_sharing_a_path_are_ordered_as_registered_whatever_the_digest_order(digests):
    """A GAN's two top-level models both hold `0.weight`: the report tells them apart by their order
    in the record ("0.weight (2)"). Digested in stepping order in one mode (eager: the pre-hooks,
    the discriminator's optimizer first) and in another order in a mode whose optimizers step
    inside compiled code (digested at the run's end), the record lists them alike: as registered."""
    torch.manual_seed(0)
    generator = torch.nn.Sequential(torch.nn.Linear(2, 4))
    discriminator = torch.nn.Sequential(torch.nn.Linear(4, 4))
    discriminator(generator(torch.randn(3, 2))).sum().backward()
    g, d = list(generator.parameters()), list(discriminator.parameters())
    digests.digest(0, [REASON_FIRST], d + g)
    digests.digest(1, [REASON_FIRST], g + d)
    first, second = digests.events()
    assert first["names"] == second["names"] == ["0.weight", "0.bias", "0.weight", "0.bias"]
    assert first["norm"] == second["norm"] == pytest.approx([float(p.grad.norm()) for p in g + d], rel=1e-5)


def test_backward_only_steps_are_digested_where_their_backward_returns_and_keep_their_names(tmp_path):
    """No optimizer (a hand-written SGD, as pytorch/examples' word_language_model): step 0 and the
    step of a CA recompile are digested where their backward returns, named by module path; the
    names stay after the script rebinds its model before the end, where the last step is digested.
    A step made by autograd.grad fills no .grad and is not digested."""
    import gc

    import cagtool
    from cagtool.record.schema import REASON_LAST, GradDigestEvent

    torch.manual_seed(0)
    with cagtool.capture(backend="eager", output=tmp_path / "run", reset=True) as cap:
        # built in the block: the names come from torch's registration hooks, installed on entry
        model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
        for rows in (4, 4, 4, 6, 6):  # step 3's new batch size: a CA recompile
            model.zero_grad()
            model(torch.randn(rows, 4)).sum().backward()
            with torch.no_grad():
                for p in model.parameters():
                    p.add_(p.grad, alpha=-0.1)
        first_grads = [p.grad.clone() for p in model.parameters()]
        torch.autograd.grad(model(torch.randn(5, 4)).sum(), list(model.parameters()))  # step 5, a new size: due, not digested
        last_norms = [float(p.grad.norm()) for p in model.parameters()]
        model = torch.nn.Sequential(torch.nn.Linear(4, 8))  # the trained model is gone before the end
        gc.collect()
    events = {e.step: e for e in cagtool.load(cap.path).mode("ca").of(GradDigestEvent)}
    assert sorted(events) == [0, 3, 5], events.keys()
    assert events[0].reasons == [REASON_FIRST, REASON_RECOMPILE] and events[3].reasons == [REASON_RECOMPILE]
    assert events[5].reasons == [REASON_LAST]
    for event in events.values():
        assert event.names == ["0.weight", "0.bias", "2.weight", "2.bias"]
    assert events[5].norm == pytest.approx(last_norms, rel=1e-6)
    assert [float(g.norm()) for g in first_grads] == pytest.approx(last_norms, rel=1e-6)


def test_a_tensor_no_module_holds_is_named_as_an_optimizers_only_when_one_stepped_it(digests):
    """A digested tensor with no module path is an optimizer's own where an optimizer stepped it,
    else a graph's leaf: never "<optimizer tensor N>" in a job without an optimizer."""
    from cagtool.record.schema import OPTIMIZER_TENSOR_PREFIX, UNNAMED_TENSOR_PREFIX

    stepped, leaf = torch.nn.Parameter(torch.ones(3)), torch.ones(3, requires_grad=True)
    (stepped * leaf).sum().backward()
    digests.digest(0, [REASON_FIRST], [stepped])
    digests.digest(1, [REASON_FIRST], [leaf], optimizer=False)
    names = [e["names"] for e in digests.events()]
    assert names == [[f"{OPTIMIZER_TENSOR_PREFIX}0>"], [f"{UNNAMED_TENSOR_PREFIX}0>"]]


def test_a_complex_gradient_is_digested_from_its_real_and_imaginary_parts(digests):
    """A 1-D Fourier neural operator's spectral weights are complex parameters: their gradients were
    left out as "no gradient" while the parity line said "all 13 parameters" (3 of them not read). Digested
    as their real and imaginary parts, the norm is the complex gradient's; a conjugate view reads
    as the tensor it resolves to."""
    torch.manual_seed(0)
    w = torch.nn.Parameter(torch.randn(4, 3, dtype=torch.cfloat))
    v = torch.nn.Parameter(torch.randn(4, 3, dtype=torch.cfloat))
    w.grad = torch.randn(4, 3, dtype=torch.cfloat)
    v.grad = w.grad.clone().conj()  # a lazy conjugate: view_as_real refuses it unresolved
    digests.digest(0, [REASON_FIRST], [w, v])
    [event] = digests.events()
    assert event["norm"][0] == pytest.approx(float(torch.linalg.vector_norm(w.grad)), rel=1e-6)
    assert event["norm"][1] == pytest.approx(event["norm"][0], rel=1e-6)
    assert event["max_abs"][0] == pytest.approx(float(torch.view_as_real(w.grad).abs().max()), rel=1e-6)
    assert event["checksum"][0] != pytest.approx(event["checksum"][1])  # the imaginary parts' signs differ
    assert event["dtypes"] == ["complex64", "complex64"] and event["numels"] == [12, 12]


def test_a_last_step_digested_during_the_run_says_whether_its_gradients_were_the_same_at_the_end(digests):
    """The last step digested in its optimizer's pre-hook (a recompile in it) is digested again at
    the run's end: where nothing touched the gradients after the step it stands for both moments
    (REASON_SAME_AT_END); a zero_grad after the step, or another backward, makes them differ."""
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model(torch.randn(3, 4)).sum().backward()
    digests.digest(5, [REASON_RECOMPILE], list(model.parameters()))
    opt.step()  # SGD reads the gradients, never changes them
    digests.check_at_end(5)
    [kept] = digests.events()
    assert kept["reasons"] == [REASON_RECOMPILE, REASON_SAME_AT_END]

    other = GradDigests()
    model(torch.randn(3, 4)).sum().backward()
    other.digest(5, [REASON_RECOMPILE], list(model.parameters()))
    opt.step()
    opt.zero_grad()  # set_to_none: nothing held at the end
    other.check_at_end(5)
    [event] = other.events()
    assert event["reasons"] == [REASON_RECOMPILE]
    model(torch.randn(3, 4)).sum().backward()
    third = GradDigests()
    third.digest(5, [REASON_RECOMPILE], list(model.parameters()))
    model(torch.randn(3, 4)).sum().backward()  # accumulated into after the digest
    third.check_at_end(5)
    assert third.events()[0]["reasons"] == [REASON_RECOMPILE]
