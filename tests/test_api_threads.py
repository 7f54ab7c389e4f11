"""`cagtool.capture()` is its thread's: with the block open in one thread, another thread's
backward runs as plain torch (no compiled autograd, not recorded), whether the block is idle or
its own backward is running at that moment. Real torch, real threads; the threads are ordered by
events and by the scope's gate count, never by the clock (the timeouts only end a test that would
otherwise hang)."""

from __future__ import annotations

import threading

import torch
from torch._dynamo.utils import counters

import cagtool
from cagtool.record.schema import BackwardEvent, CAGraphEvent, DynamoCompileEvent, FindingEvent, StepEvent

HANG = 120.0  # seconds: only a broken gate ever waits this long


def _model(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))


def _plain_grads(model: torch.nn.Module, x: torch.Tensor) -> list[torch.Tensor]:
    """The gradients plain torch gives, on a copy (no cagtool, no compiled autograd)."""
    import copy

    twin = copy.deepcopy(model)
    twin(x).pow(2).mean().backward()
    return [p.grad.clone() for p in twin.parameters()]


def _captures() -> int:
    return int(counters["compiled_autograd"]["captures"])


def _worker(tmp_path, body, errors: list, box: dict) -> threading.Thread:
    def run() -> None:
        try:
            with cagtool.capture(backend="eager", output=tmp_path / "run", reset=True) as cap:
                box["cap"] = cap
                body(cap)
        except BaseException as exc:  # noqa: BLE001 - reported by the test in the main thread
            errors.append(exc)
            box.setdefault("entered", threading.Event()).set()

    thread = threading.Thread(target=run, name="capturing")
    thread.start()
    return thread


def test_a_backward_in_another_thread_while_the_block_is_idle_is_plain_torch_and_not_recorded(tmp_path):
    entered, main_done = threading.Event(), threading.Event()
    errors: list = []
    box: dict = {"entered": entered}
    worker_model = _model(0)
    opt = torch.optim.SGD(worker_model.parameters(), lr=0.01)

    def body(cap) -> None:
        entered.set()
        assert main_done.wait(HANG)
        for _ in range(3):
            opt.zero_grad()
            worker_model(torch.randn(4, 8)).pow(2).mean().backward()
            opt.step()

    thread = _worker(tmp_path, body, errors, box)
    assert entered.wait(HANG)
    try:
        assert not errors, errors
        main_model = _model(1)
        x = torch.randn(5, 8)
        expected = _plain_grads(main_model, x)
        before = _captures()
        main_model(x).pow(2).mean().backward()  # raised NotImplementedError or was compiled and recorded before
        assert _captures() == before  # no compiled autograd in this thread
        for p, g in zip(main_model.parameters(), expected):
            assert torch.equal(p.grad, g)
        # A compile in this thread is not the block's either
        compiled = torch.compile(lambda t: torch.sin(t) + 1, backend="eager")
        assert torch.equal(compiled(x), torch.sin(x) + 1)
    finally:
        main_done.set()
        thread.join(HANG)
    assert not errors, errors
    record = cagtool.load(box["cap"].path).mode("ca")
    # Only the capturing thread's three backwards and steps, all compiled autograd's
    assert len(record.of(BackwardEvent)) == 3
    assert [s.backward_calls for s in record.of(StepEvent)] == [1, 1, 1]
    assert {b.thread for b in record.of(BackwardEvent)} == {"capturing"}
    assert len(record.of(CAGraphEvent)) == 1
    assert all(b.ca_captures == (1 if i == 0 else 0) for i, b in enumerate(record.of(BackwardEvent)))
    assert [c.is_ca_graph for c in record.of(DynamoCompileEvent)] == [True]  # the block's CA graph only


def test_a_backward_in_another_thread_while_the_block_captures_waits_and_runs_plain(tmp_path):
    from torch._dynamo import compiled_autograd as ca

    in_capture, main_may_go, main_returned = threading.Event(), threading.Event(), threading.Event()
    errors: list = []
    box: dict = {"entered": main_may_go}
    worker_model = _model(0)
    opt = torch.optim.SGD(worker_model.parameters(), lr=0.01)
    seen: list[str] = []
    cls = ca.AutogradCompilerInstance

    def body(cap) -> None:
        # Held inside the capturing thread's first capture (torch's compiler installed, its lock
        # held): the window in which another thread's backward raised NotImplementedError.
        observed_end = cls.end_capture

        def end_capture(inst, outputs):
            if not seen:
                seen.append("held")
                in_capture.set()
                scope = getattr(cap._recorder, "scope", None)  # the block's thread gate (capture/recorder.py)
                if scope is None:  # a capture without a gate: the main thread's backward goes on at once
                    main_returned.wait(HANG)
                    seen.append("no gate")
                else:
                    seen.append("other waited" if scope.wait_for_waiters(1, HANG) else "no wait")
            return observed_end(inst, outputs)

        cls.end_capture = end_capture
        try:
            main_may_go.set()
            for _ in range(2):
                opt.zero_grad()
                worker_model(torch.randn(4, 8)).pow(2).mean().backward()
                opt.step()
        finally:
            cls.end_capture = observed_end

    thread = _worker(tmp_path, body, errors, box)
    try:
        assert in_capture.wait(HANG), errors
        main_model = _model(1)
        x = torch.randn(5, 8)
        expected = _plain_grads(main_model, x)
        before = _captures()
        try:
            main_model(x).pow(2).mean().backward()  # NotImplementedError: ... within another compiled autograd call, before
        finally:
            main_returned.set()
        for p, g in zip(main_model.parameters(), expected):
            assert torch.equal(p.grad, g)
    finally:
        thread.join(HANG)
    assert not errors, errors
    assert seen == ["held", "other waited"]
    assert _captures() == before  # counted as the capturing thread's began; none for the main thread's backward
    record = cagtool.load(box["cap"].path).mode("ca")
    assert len(record.of(BackwardEvent)) == 2
    assert [s.backward_calls for s in record.of(StepEvent)] == [1, 1]
    assert len(record.of(CAGraphEvent)) == 1 == record.manifest.torch_counters["compiled_autograd"]["captures"]
    assert "thread_scope_errors" not in record.manifest.options


def test_the_capturing_threads_forwards_are_traced_as_with_compiled_autograd_on_and_torch_is_restored(tmp_path):
    from torch._dynamo import compiled_autograd as ca

    flags: dict[str, bool] = {}
    model = _model(0)
    with cagtool.capture(backend="eager", output=tmp_path / "run", reset=True):
        flags["block"] = ca.compiled_autograd_enabled
        model(torch.randn(4, 8)).sum().backward()
        flags["after a backward"] = ca.compiled_autograd_enabled  # _enable's exit turns it off; the block puts it back
    flags["after the block"] = ca.compiled_autograd_enabled
    assert flags == {"block": True, "after a backward": True, "after the block": False}


def test_dynamo_reset_in_the_block_turns_compiled_autograd_off_as_by_hand_and_says_so(tmp_path):
    """A reset inside `with _enable(...)` by hand leaves compiled autograd off for the backwards
    after it; the block does the same (torch's counts are the hand-made job's) and its record says
    where it happened."""
    from torch._dynamo import compiled_autograd as ca

    def job(flags: list[bool]) -> None:
        model = _model(0)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        for i in range(4):
            if i == 2:
                torch._dynamo.reset()
                flags.append(ca.compiled_autograd_enabled)
            opt.zero_grad()
            model(torch.randn(4, 8)).pow(2).mean().backward()
            opt.step()

    torch._dynamo.reset()
    counters.clear()
    by_hand: list[bool] = []
    with ca._enable(lambda gm: torch.compile(gm, backend="eager")):
        job(by_hand)
    hand_captures = counters["compiled_autograd"]["captures"]
    flags: list[bool] = []
    with cagtool.capture(backend="eager", output=tmp_path / "run", reset=True) as cap:
        counters.clear()
        job(flags)
        captures = counters["compiled_autograd"]["captures"]
    record = cagtool.load(cap.path).mode("ca")
    assert flags == by_hand == [False]
    assert captures == hand_captures == 1
    assert [s.ca_captures for s in record.of(StepEvent)] == [1, 0, 0, 0]
    [finding] = [f for f in record.of(FindingEvent) if f.code == "ca_turned_off_by_reset"]
    assert finding.step == 2 and finding.source is not None and finding.source.file.endswith("test_api_threads.py")


def test_the_scripts_own_enable_in_the_block_keeps_its_compiler_and_is_recorded(tmp_path):
    from torch._dynamo import compiled_autograd as ca

    model = _model(0)
    received: list[str] = []

    def own_compiler(gm):
        received.append(type(gm).__name__)
        return torch.compile(gm, backend="eager")

    with cagtool.capture(backend="eager", output=tmp_path / "run", reset=True) as cap:
        with ca._enable(own_compiler, dynamic=False):
            model(torch.randn(4, 8)).sum().backward()
    assert received == ["CompiledAutograd0"]  # the script's compiler got the graph, not only cagtool's
    record = cagtool.load(cap.path).mode("ca")
    assert len(record.of(CAGraphEvent)) == 1 and len(record.of(StepEvent)) == 1
