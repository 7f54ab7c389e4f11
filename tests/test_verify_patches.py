"""Code fixes as patches (cagtool/verify/patches.py): the diff against the script's own lines, made
only where the edit is local, and the patched copy run in the script's place with the script's
own sys.argv, sys.path[0] and __file__ (capture/run/target.py). Pure: no torch job runs here."""

from __future__ import annotations

from dataclasses import replace

import os
import sys
import textwrap
from pathlib import Path

import hashlib

import msgspec

import pytest

from cagtool.capture.run.target import (
    PATCH_TARGET_ENV,
    PATCHED_SOURCE_ENV,
    SOURCE_DIGEST_ENV,
    SourceChanged,
    Target,
    checked_digest,
    patched_source_for,
    run_target,
    source_digest,
)
from cagtool.report.recompiles.explain import CAUSE_DYNAMO_FRAME, CAUSE_GRAD_DEFINED, CAUSE_HOOK, Cause
from cagtool.verify.patches import patch_for
from cagtool.verify.verification import HARMFUL, NO_EFFECT, VERIFIED, Side, judge

MIDRUN = textwrap.dedent("""\
    import torch

    def main():
        model = torch.nn.Linear(2, 1)
        for step in range(5):
            if step == 2:
                model.weight.register_hook(lambda grad: grad.clamp(-1.0, 1.0))
            model(torch.ones(1, 2)).sum().backward()

    main()
    """)


def _hook_cause() -> Cause:
    return Cause(CAUSE_HOOK, [], number=1)


def test_a_hook_registered_mid_run_moves_before_the_loop(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(MIDRUN)
    patch = patch_for(_hook_cause(), str(script), "train.py", script.read_bytes())
    assert patch is not None and patch.applicable and patch.why_not is None
    assert patch.name == "hook-before-loop" and patch.line == 6 and patch.who == "your code"
    assert patch.diff.splitlines() == [
        "--- a/train.py",
        "+++ b/train.py",
        "@@ -2,9 +2,8 @@",
        " ",
        " def main():",
        "     model = torch.nn.Linear(2, 1)",
        "+    model.weight.register_hook(lambda grad: grad.clamp(-1.0, 1.0))",
        "     for step in range(5):",
        "-        if step == 2:",
        "-            model.weight.register_hook(lambda grad: grad.clamp(-1.0, 1.0))",
        "         model(torch.ones(1, 2)).sum().backward()",
        " ",
        " main()",
    ]
    assert patch.patched is not None and "if step == 2" not in patch.patched
    compile(patch.patched, "train.py", "exec")  # the copy is valid Python
    assert script.read_text() == MIDRUN  # the user's file is never written


def test_a_script_outside_the_runs_directory_is_diffed_at_its_absolute_path(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(MIDRUN)
    patch = patch_for(_hook_cause(), str(script), str(script), script.read_bytes())
    assert patch is not None and patch.applicable
    assert patch.diff.splitlines()[:2] == [f"--- {script}", f"+++ {script}"]  # patch -p0, never a//abs


def test_a_hook_that_needs_the_loops_values_is_not_moved_and_says_why(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(MIDRUN.replace("register_hook(lambda grad: grad.clamp(-1.0, 1.0))", "register_hook(lambda grad: grad * step)"))
    patch = patch_for(_hook_cause(), str(script), "train.py", script.read_bytes())
    assert patch is not None and not patch.applicable and patch.patched is None
    assert patch.why_not == "the hook at line 7 uses `step`, assigned inside the loop: it does not exist before the loop"
    assert [l for l in patch.diff.splitlines() if l.startswith("+ ")] == ["+    model.weight.register_hook(lambda grad: grad * step)"]  # still shown


def test_an_if_with_an_else_or_other_work_is_not_moved(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(MIDRUN.replace("        model(torch.ones", "        else:\n            pass\n        model(torch.ones"))
    patch = patch_for(_hook_cause(), str(script), "train.py", script.read_bytes())
    assert not patch.applicable and patch.why_not.startswith("the `if` at line 6 has an `else`")
    script.write_text(MIDRUN.replace("            model.weight.register_hook", "            print('clip on')\n            model.weight.register_hook"))
    patch = patch_for(_hook_cause(), str(script), "train.py", script.read_bytes())
    assert not patch.applicable and patch.why_not == "the `if` at line 6 does more than register hooks: only a registration can move"


def test_a_hook_in_an_inner_loop_is_not_moved(tmp_path):
    """Before the inner loop is still inside the outer one: the hook would be added every epoch."""
    script = tmp_path / "train.py"
    script.write_text(MIDRUN.replace("    for step in range(5):\n", "    for epoch in range(2):\n      for step in range(5):\n"))
    patch = patch_for(_hook_cause(), str(script), "train.py", script.read_bytes())
    assert not patch.applicable and patch.why_not.startswith("the loop at line 6 runs inside another loop")


def test_no_registration_in_the_script_and_a_module_job_say_why(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("import lib\nlib.train()\n")
    patch = patch_for(_hook_cause(), str(script), "train.py", script.read_bytes())
    assert not patch.applicable and "another file or by a library" in patch.why_not and patch.diff == ""
    patch = patch_for(_hook_cause(), None, None, None)
    assert not patch.applicable and "not a script file" in patch.why_not


def test_a_cause_without_a_local_edit_has_no_patch_to_run():
    patch = patch_for(Cause(CAUSE_DYNAMO_FRAME, [], number=2), "x.py", "x.py", b"")
    assert patch is not None and not patch.applicable and patch.diff == "" and "no failing guard recorded is on a Python value" in patch.why_not


def test_the_patched_copy_runs_as_the_script(tmp_path, monkeypatch):
    """The copy's code runs with the script's own sys.argv, sys.path[0] and __file__, so it imports
    its neighbours and finds its files as the script does; only when the target is the script patched."""
    here = tmp_path / "project"
    here.mkdir()
    (here / "neighbour.py").write_text("VALUE = 'from the script\\'s directory'\n")
    script = here / "train.py"
    script.write_text("raise SystemExit('the original ran')\n")
    copy = tmp_path / "verify" / "copy-train.py"
    copy.parent.mkdir()
    out = tmp_path / "seen.txt"
    copy.write_text(textwrap.dedent(f"""\
        import sys, neighbour
        open({str(out)!r}, "w").write("\\n".join([__file__, sys.path[0], sys.argv[0], neighbour.VALUE, __name__]))
        """))
    target = Target("script", str(script), ["--x"])
    monkeypatch.setenv(PATCHED_SOURCE_ENV, str(copy))
    monkeypatch.setenv(PATCH_TARGET_ENV, str(script))
    assert patched_source_for(target) == str(copy)
    assert patched_source_for(Target("script", str(copy), [])) is None  # another script the job starts runs itself
    saved = (list(sys.argv), list(sys.path), sys.modules.get("__main__"))
    try:
        run_target(target)
    finally:
        sys.argv[:], sys.path[:] = saved[0], saved[1]
        sys.modules["__main__"] = saved[2]
        sys.modules.pop("neighbour", None)
    assert out.read_text().splitlines() == [str(script), os.path.realpath(here), str(script), "from the script's directory", "__main__"]
    monkeypatch.delenv(PATCHED_SOURCE_ENV)
    assert patched_source_for(target) is None


def test_a_copy_or_script_swapped_after_verify_checked_it_is_never_run(tmp_path, monkeypatch):
    """--verify writes the patched copy under the run directory, and checked the script against its
    seal; the re-run reads either later, by path. Swapped meanwhile (another file, or a link to one:
    a run directory or a project folder others can write), it is refused (SourceChanged) and none
    of its code runs; the code --verify checked runs."""
    script = tmp_path / "train.py"
    script.write_text("print('the script')\n")
    mark = tmp_path / "planted-ran"
    planted = tmp_path / "planted.py"
    planted.write_text(f"open({str(mark)!r}, 'w').write('ran')\n")
    copy = tmp_path / "verify" / "hook-before-loop-train.py"
    copy.parent.mkdir()
    patched = f"open({str(tmp_path / 'copy-ran')!r}, 'w').write('ran')\n"
    target = Target("script", str(script), [])
    monkeypatch.setenv(PATCHED_SOURCE_ENV, str(copy))
    monkeypatch.setenv(PATCH_TARGET_ENV, str(script))
    monkeypatch.setenv(SOURCE_DIGEST_ENV, f"{hashlib.sha256(patched.encode()).hexdigest()} {script}")
    saved = (list(sys.argv), list(sys.path), sys.modules.get("__main__"))
    try:
        for swap in ("rewritten", "link"):
            if swap == "rewritten":
                copy.write_text(planted.read_text())
            else:
                copy.unlink()
                copy.symlink_to(planted)
            with pytest.raises(SourceChanged, match="hook-before-loop-train.py changed after `recompiles --verify` checked it"):
                run_target(target)
        copy.unlink()
        copy.write_text(patched)
        run_target(target)
        assert (tmp_path / "copy-ran").exists()
        monkeypatch.delenv(PATCHED_SOURCE_ENV)
        monkeypatch.setenv(SOURCE_DIGEST_ENV, f"{hashlib.sha256(script.read_bytes()).hexdigest()} {script}")
        script.write_text(planted.read_text())  # the script, after its seal was checked
        with pytest.raises(SourceChanged, match="train.py changed after"):
            run_target(target)
    finally:
        sys.argv[:], sys.path[:] = saved[0], saved[1]
        sys.modules["__main__"] = saved[2]
    assert not mark.exists()


def test_a_modules_file_swapped_after_verify_checked_it_is_never_run(tmp_path, monkeypatch):
    """`-m jobs.train`: the re-run is told the file --verify checked (the sealed one) and its
    SHA-256. It runs that file's code as runpy does (__name__, __file__, __spec__, sys.argv[0]);
    the file rewritten, or the module found elsewhere (a `jobs/train/` package planted beside it),
    is refused (SourceChanged) and none of it runs."""
    import importlib

    mark = tmp_path / "planted-ran"
    (tmp_path / "jobs").mkdir()
    (tmp_path / "jobs" / "__init__.py").write_text("")
    module = tmp_path / "jobs" / "train.py"
    checked = ("import sys\n"
               f"open({str(tmp_path / 'checked-ran')!r}, 'w').write(' '.join([__name__, __file__, __spec__.name, sys.argv[0]]))\n")
    module.write_text(checked)
    target = Target("module", "jobs.train", [])
    monkeypatch.chdir(tmp_path)
    saved = (list(sys.argv), list(sys.path), sys.modules.get("__main__"))
    digest = hashlib.sha256(checked.encode()).hexdigest()
    try:
        monkeypatch.setenv(SOURCE_DIGEST_ENV, source_digest("module", "jobs.train", digest, str(module)))
        run_target(target)
        assert (tmp_path / "checked-ran").read_text() == f"__main__ {module} jobs.train {module}"
        assert sys.modules.get("__main__") is saved[2]
        module.write_text(f"open({str(mark)!r}, 'w').write('ran')\n")
        with pytest.raises(SourceChanged, match=r"jobs/train.py changed after `recompiles --verify` checked it: not run"):
            run_target(target)
        module.write_text(checked)
        (tmp_path / "jobs" / "train").mkdir()
        (tmp_path / "jobs" / "train" / "__init__.py").write_text("")
        (tmp_path / "jobs" / "train" / "__main__.py").write_text(f"open({str(mark)!r}, 'w').write('ran')\n")
        importlib.invalidate_caches()
        with pytest.raises(SourceChanged, match=r"-m jobs.train now finds .*jobs/train/__main__.py, not .*jobs/train.py that"):
            run_target(target)
        # Another module's digest, or a script's, is not this module's: it runs unchecked, as under python.
        monkeypatch.setenv(SOURCE_DIGEST_ENV, source_digest("script", str(module), "0" * 64, str(module)))
        assert checked_digest(target) is None
    finally:
        sys.argv[:], sys.path[:] = saved[0], saved[1]
        sys.modules["__main__"] = saved[2]
        for name in ("jobs", "jobs.train", "jobs.train.__main__"):
            sys.modules.pop(name, None)
    assert not mark.exists()


ZERO_GRAD = textwrap.dedent("""\
    for x in batches:
        loss = model(x).sum()
        opt.zero_grad(set_to_none=False)  # keep the buffers
        loss.backward()
    """)


def test_zero_grad_set_to_none_false_becomes_true(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(ZERO_GRAD)
    patch = patch_for(Cause(CAUSE_GRAD_DEFINED, [], number=2), str(script), "train.py", script.read_bytes())
    assert patch.applicable and patch.name == "zero-grad-to-none" and patch.line == 3 and patch.causes == (2,)
    assert [l for l in patch.diff.splitlines() if l[:1] in "+-" and l[:3] not in ("+++", "---")] == [
        "-    opt.zero_grad(set_to_none=False)  # keep the buffers",
        "+    opt.zero_grad(set_to_none=True)  # keep the buffers",
    ]
    script.write_text(ZERO_GRAD.replace("set_to_none=False", ""))
    patch = patch_for(Cause(CAUSE_GRAD_DEFINED, [], number=2), str(script), "train.py", script.read_bytes())
    assert not patch.applicable and patch.why_not.startswith("no zero_grad(set_to_none=False) in the script")


def _side(ca: int, dynamo: int, graphs: int) -> Side:
    return Side("x", "run", "finished", [ca], [dynamo], [graphs], None, None, None, 0, None, 1.0)


def test_a_fix_that_removes_a_capture_the_recompile_count_leaves_out_is_verified():
    """The .grad warm-up capture is not a counted recompile (gate's rule), but a fix that removes it
    saves a capture: CA graphs 3 -> 2 with recompiles unchanged is verified, not no effect."""
    verdict, reasons = judge(_side(1, 2, 3), _side(1, 2, 2), None, True)
    assert (verdict, reasons) == (VERIFIED, ["recompiles unchanged (3)", "CA graphs 3 -> 2", "numerics unchanged"])
    assert judge(_side(1, 2, 3), _side(1, 2, 3), None, True)[0] == NO_EFFECT
    # A CA recompile traded for a Dynamo recompile of the CA graph: one graph fewer, no work saved.
    assert judge(_side(1, 0, 2), _side(0, 1, 1), None, True) == (NO_EFFECT, ["recompiles unchanged (1)", "numerics unchanged"])
    assert judge(_side(1, 2, 3), _side(1, 3, 2), None, True)[0] == HARMFUL  # more recompiles is harmful whatever the graphs
    assert judge(_side(1, 2, 3), _side(0, 2, 2), None, False)[0] == HARMFUL  # numerics changed


def test_a_fix_that_compiles_more_than_the_recompiles_it_removes_is_harmful():
    """WGAN-GP's compiled autograd started dynamic: recompiles 9 -> 4, compile 11.6 s -> 27.3 s.
    From three re-runs a side, beyond the noise and 20% more: harmful, with the figures. From one a
    side, nothing measures the noise (the shape loop's ca-dynamic read 2.25x in one suite run and no
    growth in the run before): not judged below 3x, as a slower step is, and harmful past it;
    within the noise (12 -> 14 s) the recompiles decide, as before."""
    base, fixed = replace(_side(8, 1, 9), compile_time_s=11.6, compile_times_s=[11.6]), replace(_side(3, 1, 4), compile_time_s=27.3, compile_times_s=[27.3])
    verdict, reasons = judge(base, fixed, None, True)
    assert verdict == VERIFIED and reasons[0] == "recompiles 9 -> 4"
    assert reasons[1].startswith("compile time 11.6 s -> 27.3 s (2.35x, 90% CI ") and reasons[1].endswith(
        "1 vs 1 process: one process a side, not judged; --repeat 3 judges it)")
    verdict, reasons = judge(base, replace(fixed, compile_time_s=40.6, compile_times_s=[40.6]), None, True)
    assert verdict == HARMFUL and reasons[1].endswith("1 vs 1 process): it compiles more than the recompiles it removes did")
    three = (replace(base, compile_times_s=[11.6, 11.0, 12.1]), replace(fixed, compile_times_s=[27.3, 26.0, 28.5]))
    verdict, reasons = judge(*three, None, True)
    assert verdict == HARMFUL and reasons[1].endswith("3 vs 3 processes): it compiles more than the recompiles it removes did")
    assert judge(base, replace(fixed, compile_time_s=14.0, compile_times_s=[14.0]), None, True)[0] == VERIFIED
    # HF Trainer's torch-pgo: its 4 recompiles stayed, compile 23.4 s -> 31.5 s: nothing to weigh it against.
    same = replace(_side(2, 2, 3), compile_time_s=23.4, compile_times_s=[23.4, 22.9, 24.0])
    verdict, reasons = judge(same, replace(same, compile_time_s=31.5, compile_times_s=[31.5, 30.2, 33.1]), None, True)
    assert verdict == HARMFUL and reasons[0] == "recompiles unchanged (4)"
    assert reasons[1].endswith("3 vs 3 processes): it removes no recompile and compiles longer")


def test_a_compile_the_machines_load_can_have_lengthened_is_not_judged():
    """dynamic-sources on a sequence storm read compile 2.8 s -> 9.2 s (3.26x) from one re-run a
    side in a suite on 2 busy cores, and 1.6 s -> 1.5 s on the idle machine: the fix's re-run
    compiled while the machine was loaded. A growth the load can account for (the fix's re-run
    waited HEAVY_WAIT or more of its runnable time, or so much more than the baseline's that the
    load's range covers it) is said with the waits and not judged; one it cannot is harmful."""
    base = replace(_side(5, 1, 6), compile_time_s=2.8, compile_times_s=[2.8], compile_waits=[0.02])
    fixed = replace(_side(1, 1, 2), compile_time_s=9.2, compile_times_s=[9.2])
    verdict, reasons = judge(base, replace(fixed, compile_waits=[0.03]), None, True)
    assert verdict == HARMFUL and reasons[1].endswith("it compiles more than the recompiles it removes did")
    verdict, reasons = judge(base, replace(fixed, compile_waits=[]), None, True)  # not read: the figures alone
    assert verdict == HARMFUL
    verdict, reasons = judge(base, replace(fixed, compile_waits=[0.45]), None, True)
    assert verdict == VERIFIED, reasons
    assert "the fix's re-run waited for a CPU 45% of its runnable time while compiling: beyond 40%" in reasons[1]
    assert reasons[1].endswith(", not judged; rerun on a quieter machine)")
    verdict, reasons = judge(base, replace(fixed, compile_waits=[0.35]), None, True)
    assert verdict == VERIFIED, reasons
    assert "waited for a CPU 35% of its runnable time while compiling, the baseline's 2%, which alone can make its compile up to" in reasons[1]
    # Three processes a side far apart: beyond what the same waits can account for.
    three = (replace(base, compile_times_s=[2.8, 2.7, 2.9], compile_waits=[0.02, 0.0, 0.01]),
             replace(fixed, compile_times_s=[28.0, 27.0, 29.0], compile_waits=[0.35, 0.3, 0.2]))
    assert judge(*three, None, True)[0] == HARMFUL


def test_a_multi_rank_job_is_measured_as_rank_0_saw_it(tmp_path):
    """A DDP job's launching process trains nothing: the counts before and after are rank 0's,
    the record `recompiles` explains by default, not the launcher's zeros."""
    from report.ranks.rank_records import Cap, Rank, write_multi_rank_run

    from cagtool.verify.verification import _side

    caps = [Cap(0), Cap(2, node="MulBackward0", call=1, ops=("MulBackward0", "AddBackward0"))]
    run = write_multi_rank_run(tmp_path / "ddp", {0: Rank(caps=caps), 1: Rank(caps=caps)})
    side, _record = _side("baseline", run, "ca", 1.0)
    assert side.ca_graphs == [2] and side.ca_recompiles == [1] and side.status == "finished"


def test_a_hook_registered_on_every_iteration_is_named_at_its_line_not_sent_to_another_file(tmp_path):
    """A hook registered unconditionally in the loop (one more per step, never removed): not the
    `if step == k:` shape cagtool moves, and said so at its line, not "another file or a library"."""
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent("""\
        import torch
        model = torch.nn.Linear(2, 1)
        handles = []
        for step in range(5):
            for p in model.parameters():
                handles.append(p.register_post_accumulate_grad_hook(lambda t: None))
            model(torch.ones(1, 2)).sum().backward()
        """))
    patch = patch_for(_hook_cause(), str(script), "train.py", script.read_bytes())
    assert patch is not None and not patch.applicable and patch.line == 6
    assert patch.why_not.startswith("the script registers a hook inside its loop on every iteration (line 6)")
    assert "another file" not in patch.why_not


def test_hooks_registered_once_per_parameter_in_a_function_are_not_said_to_be_registered_every_iteration(tmp_path):
    """pytorch/examples' VAE with a grad-norm hook per weight, registered by a function the training
    loop calls once (`if epoch == 2: track_grad_norms()`): the loop at the registration walks the
    model's parameters, not the training steps. `--verify` said "registers a hook inside its loop on
    every iteration" beside an explanation that said the hooks had stabilised."""
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent("""\
        import torch
        model = torch.nn.Linear(2, 1)
        norms = {}
        def track_grad_norms():
            for name, p in model.named_parameters():
                p.register_hook(lambda g, name=name: norms.__setitem__(name, g.norm().item()) or g)
        for epoch in range(4):
            if epoch == 2:
                track_grad_norms()
            model(torch.ones(1, 2)).sum().backward()
        """))
    patch = patch_for(_hook_cause(), str(script), "train.py", script.read_bytes())
    assert patch is not None and not patch.applicable and patch.line == 6
    assert patch.why_not.startswith("the script registers the hooks once per parameter or module, in the loop at line 5 "
                                    "(in `track_grad_norms`) over the model's tensors, not on every iteration of training")
    assert "on every iteration (line" not in patch.why_not


def test_a_slower_step_from_one_rerun_a_side_is_not_harmful_unless_three_times_slower():
    """Two re-runs of one environment read "harmful" (0.53x, 90% CI 0.30-0.95) and "inconclusive"
    (0.58x) on a busy machine, and plain torch found no slowdown: one process a side measures no
    noise. Harmful needs 3x slower there; with 3 processes a side the interval decides."""
    from cagtool.report.compare.analysis import Speedup
    from cagtool.report.figures.intervals import RatioInterval

    def slower(ratio: float, units: tuple[int, int]) -> Speedup:
        interval = RatioInterval(ratio, ratio / 1.79, ratio * 1.79, units, "cpu", "assumed", 0.35, float("inf"))
        return Speedup("ca", "ca", ratio, ratio / 1.79, ratio * 1.79, steady_steps=(30, 30), interval=interval)

    verdict, reasons = judge(_side(1, 1, 2), _side(0, 1, 1), slower(0.53, (1, 1)), True)
    assert verdict == VERIFIED and "one process a side, not judged; --repeat 3 judges it" in reasons[1], reasons
    assert judge(_side(1, 1, 2), _side(0, 1, 1), slower(0.2, (1, 1)), True)[0] == HARMFUL
    assert judge(_side(1, 1, 2), _side(0, 1, 1), slower(0.53, (3, 3)), True)[0] == HARMFUL


def test_a_fix_speedup_without_a_verdict_shows_no_interval_as_a_bound():
    """A fix's steady-step ratio from too few steady steps (DCGAN's re-runs: 3 and 4, the baseline's
    first a warm-up of 2.5 s) is not judged: its interval, from the assumed noise, would read as a
    bound (0.05x-0.36x) the steps cannot give. A judged one keeps its interval, as does a
    verification.json of an older cagtool (no verdict kept)."""
    from cagtool.report.recompiles.verification import speedup_bounds

    fix = {"speedup": 0.14, "speedup_low": 0.05, "speedup_high": 0.36}
    assert speedup_bounds({**fix, "speedup_verdict": "too few steady steps"}) == "too few steady steps: not judged"
    assert speedup_bounds({**fix, "speedup_verdict": "slower"}) == "90% CI 0.05x-0.36x"
    assert speedup_bounds(fix) == "90% CI 0.05x-0.36x"


def test_a_patch_is_made_of_the_bytes_the_seal_holds_never_of_the_path_read_again(tmp_path):
    """record/seal.py `sealed_bytes`: the script read once, its SHA-256 the sealed one, or refused
    (exit 3): a file swapped in after check_job read it is never what a patched copy is made of;
    a FIFO swapped in is refused at once, never waited on."""
    from cagtool.errors import UnreadableInput
    from cagtool.record.seal import sealed_bytes

    script = tmp_path / "train.py"
    script.write_text(MIDRUN)
    seal = {"files": {str(script): hashlib.sha256(MIDRUN.encode()).hexdigest()}}
    assert sealed_bytes(seal, str(script)) == MIDRUN.encode()
    patch = patch_for(_hook_cause(), str(script), "train.py", sealed_bytes(seal, str(script)))
    assert patch.applicable and "import os" not in patch.patched
    script.write_text("import os\n" + MIDRUN)
    with pytest.raises(UnreadableInput, match="train.py changed since the run was recorded") as refused:
        sealed_bytes(seal, str(script))
    assert refused.value.exit_code == 3
    with pytest.raises(UnreadableInput, match="changed since the run was recorded"):
        sealed_bytes({"files": {}}, str(script))  # a file the seal does not hold
    script.unlink()
    os.mkfifo(script)
    with pytest.raises(UnreadableInput, match="no longer a regular file"):
        sealed_bytes(seal, str(script))


DANN_ARGS = textwrap.dedent("""\
    import argparse
    import torch

    parser = argparse.ArgumentParser()
    parser.add_argument("--compile-backend", default="eager", help="torch.compile's backend")
    parser.add_argument("--steps", type=int, default=8)
    args = parser.parse_args()
    model = torch.compile(torch.nn.Linear(2, 2), backend=args.compile_backend)
    """)


def _class_cause() -> Cause:
    from cagtool.report.recompiles.explain import CAUSE_STRUCTURE, TEMPLATE_NODE, FunctionClass

    return Cause(CAUSE_STRUCTURE, [], number=1, facts={"function_class": FunctionClass(TEMPLATE_NODE, ())})


@pytest.mark.parametrize("source, argv, changed", [
    (DANN_ARGS, ["--steps", "3"], ('-parser.add_argument("--compile-backend", default="eager", help="torch.compile\'s backend")',
                                   '+parser.add_argument("--compile-backend", default="aot_eager", help="torch.compile\'s backend")')),
    ('import torch\nBACKEND = "eager"\nmodel = torch.compile(torch.nn.Linear(2, 2), backend=BACKEND)\n', [],
     ('-BACKEND = "eager"', '+BACKEND = "aot_eager"')),
])
def test_a_backend_read_from_an_option_default_or_a_name_is_edited_where_eager_is_written(tmp_path, source, argv, changed):
    """verify/patches.py `backend_patch`: the script compiles with `backend=args.X` (an argparse option
    whose default is "eager") or `backend=NAME` (assigned "eager" once): the literal edited is where
    "eager" is written, so the copy the re-run runs compiles with aot_eager."""
    script = tmp_path / "train.py"
    script.write_text(source)
    patch = patch_for(_class_cause(), str(script), "train.py", source.encode(), argv)
    assert patch is not None and patch.name == "backend-aot-eager" and patch.applicable, patch.why_not
    assert [line for line in patch.diff.splitlines() if line[:1] in "+-" and line[:3] not in ("---", "+++")] == list(changed)
    assert patch.patched == source.replace('"eager"', '"aot_eager"')


@pytest.mark.parametrize("source, argv, why", [
    (DANN_ARGS, ["--compile-backend", "eager"], "the job sets --compile-backend on its command line: record it again with --compile-backend aot_eager"),
    (DANN_ARGS, ["--compile-back=eager"], "the job sets --compile-backend on its command line"),  # argparse takes a prefix
    (DANN_ARGS.replace('"--compile-backend", ', '"-b", "--compile-backend", '), ["-beager"], "the job sets --compile-backend"),
    (DANN_ARGS.replace('default="eager"', 'default="eager", choices=["eager", "inductor"]'), [],
     "the option --compile-backend (line 5) does not allow aot_eager among its choices"),
    ('import os, torch\nmodel = torch.compile(torch.nn.Linear(2, 2), backend=os.environ["B"])\n', [],
     'no torch.compile call in the script passes backend="eager"'),
])
def test_a_backend_the_job_sets_itself_is_not_edited_in_the_script(tmp_path, source, argv, why):
    """An option the job's command line sets (editing its default would change nothing the re-run
    runs: its verdict would read "no effect"), one whose choices leave out aot_eager (the copy would
    exit at argparse), or a value made at run time: shown, not run, with what to do."""
    script = tmp_path / "train.py"
    script.write_text(source)
    patch = patch_for(_class_cause(), str(script), "train.py", source.encode(), argv)
    assert patch is not None and not patch.applicable and patch.patched is None
    assert why in patch.why_not


NANOGPT_LIKE = textwrap.dedent("""\
    import torch

    model = torch.compile(torch.nn.Linear(4, 1))

    @torch.no_grad()
    def estimate_loss():
        model.eval()
        out = model(torch.ones(2, 4)).mean()
        model.train()
        return out

    for step in range(4):
        if step % 2 == 0:
            print(estimate_loss())
        loss = model(torch.ones(3, 4)).sum()
        loss.backward()
    with torch.inference_mode(), open("/dev/null") as sink:
        print(model(torch.ones(1, 4)), file=sink)
    """)


def _grad_mode_cause(script: Path, line: int, code: str) -> Cause:
    from cagtool.record.schema import SourceRef
    from cagtool.torch_text import GUARD_GRAD_MODE

    return Cause(CAUSE_DYNAMO_FRAME, [], number=1, facts={"kind": GUARD_GRAD_MODE, "grad_mode_after": True,
                                                          "evaluation_call": SourceRef(str(script), line, code)})


def test_an_evaluation_first_is_run_uncompiled_at_every_call_made_with_grad_off(tmp_path):
    """nanoGPT's loop: estimate_loss() under @torch.no_grad() at the first step compiles the model
    with grad off, and training's call recompiles it. eval-uncompiled edits the calls of that module
    made with grad off (the decorated function's, the inference_mode block's), never training's."""
    script = tmp_path / "train.py"
    script.write_text(NANOGPT_LIKE)
    patch = patch_for(_grad_mode_cause(script, 8, "    out = model(torch.ones(2, 4)).mean()"), str(script), "train.py", script.read_bytes())
    assert patch is not None and patch.name == "eval-uncompiled" and patch.applicable and patch.line == 8, patch.why_not
    assert [line for line in patch.diff.splitlines() if line[:1] in "+-" and line[:3] not in ("+++", "---")] == [
        "-    out = model(torch.ones(2, 4)).mean()",
        '+    out = getattr(model, "_orig_mod", model)(torch.ones(2, 4)).mean()',
        "-    print(model(torch.ones(1, 4)), file=sink)",
        '+    print(getattr(model, "_orig_mod", model)(torch.ones(1, 4)), file=sink)',
    ]
    compile(patch.patched, "train.py", "exec")
    assert "    loss = model(torch.ones(3, 4)).sum()\n" in patch.patched  # training's call left compiled
    assert script.read_text() == NANOGPT_LIKE


def test_an_evaluation_call_outside_a_no_grad_block_of_the_script_is_not_edited_and_says_why(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(NANOGPT_LIKE.replace("@torch.no_grad()\n", ""))
    patch = patch_for(_grad_mode_cause(script, 7, "    out = model(torch.ones(2, 4)).mean()"), str(script), "train.py", script.read_bytes())
    assert patch is not None and not patch.applicable and patch.patched is None
    assert patch.why_not.startswith("the evaluation's call at line 7 is in no `with torch.no_grad():` block"), patch.why_not
    other = tmp_path / "evaluate.py"
    patch = patch_for(_grad_mode_cause(other, 3, "model(x)"), str(script), "train.py", script.read_bytes())
    assert not patch.applicable and patch.why_not == "the evaluation calls the compiled code in evaluate.py, not in the script: edit that call there"
    library = _grad_mode_cause(script, 24, "trainer.train()")
    library.facts["evaluation_call"] = msgspec.structs.replace(library.facts["evaluation_call"], via="transformers/trainer.py:4405")
    patch = patch_for(library, str(script), "train.py", script.read_bytes())
    assert not patch.applicable and patch.why_not == ("the evaluation calls the compiled code in a library's code "
                                                      "(transformers/trainer.py:4405, reached from train.py:24): no call of the script's to edit")



def test_a_lightning_modules_validation_step_is_an_evaluation_and_its_log_call_is_not_the_module():
    """Lightning runs validation_step with grad off (the script never calls it): its call of the
    compiled module is edited, training_step's is not; the fix names `self.model`, never `self.log`."""
    from cagtool.report.recompiles.calls import innermost_call, uncompiled_call

    script = Path(__file__).parent / "scripts" / "lightning_sanity_last_batch.py"
    lines = script.read_text().splitlines()
    line, code = next((n, text) for n, text in enumerate(lines, 1) if 'self.log("val_loss"' in text)
    assert uncompiled_call(code) == "self.model._orig_mod(x)" and innermost_call(code) == ("self.model", ["x"])
    patch = patch_for(_grad_mode_cause(script, line, code), str(script), script.name, script.read_bytes())
    assert patch is not None and patch.applicable and patch.edited == (line,), patch.why_not
    assert code.replace("self.model(x)", 'getattr(self.model, "_orig_mod", self.model)(x)') + "\n" in patch.patched
    start = next(n for n, text in enumerate(lines) if "def training_step" in text)
    training = next(text for text in lines[start:] if "self.model(" in text)  # training's call, left compiled
    assert patch.patched.count("getattr(") == 1 and training + "\n" in patch.patched


EVAL_MODE_WITH_GRAD = textwrap.dedent("""\
    import torch

    model = torch.compile(torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Dropout(0.1)))

    def evaluate():
        model.eval()
        if True:
            out = model(torch.ones(2, 4)).mean()
        model.train()
        return out + model(torch.ones(2, 4)).mean()

    def sweep():
        model.train(False)
        return evaluate()

    for step in range(4):
        loss = model(torch.ones(3, 4)).sum()
        loss.backward()
        print(evaluate())
    """)


def _train_eval_cause(script: Path, line: int, code: str, backward_through: bool = False) -> Cause:
    from cagtool.record.schema import SourceRef

    return Cause(CAUSE_DYNAMO_FRAME, [], number=1, facts={"kind": "value", "train_eval": ("body.1", "Dropout", False),
                                                          "backward_through": backward_through,
                                                          "evaluation_call": SourceRef(str(script), line, code)})


def test_an_evaluation_in_eval_mode_with_grad_on_is_run_uncompiled_between_eval_and_train(tmp_path):
    """A module switched to eval() for an evaluation that keeps grad on recompiles on its `training`
    flag: eval-uncompiled edits the calls made after `model.eval()` and before `model.train()` of the
    same block (nested blocks included), never the call after `.train()` nor training's."""
    script = tmp_path / "train.py"
    script.write_text(EVAL_MODE_WITH_GRAD)
    patch = patch_for(_train_eval_cause(script, 8, "        out = model(torch.ones(2, 4)).mean()"), str(script), "train.py", script.read_bytes())
    assert patch is not None and patch.name == "eval-uncompiled" and patch.applicable and patch.edited == (8,), patch.why_not
    assert '        out = getattr(model, "_orig_mod", model)(torch.ones(2, 4)).mean()\n' in patch.patched
    assert "    return out + model(torch.ones(2, 4)).mean()\n" in patch.patched  # after .train(): training mode, compiled
    assert "    loss = model(torch.ones(3, 4)).sum()\n" in patch.patched
    # A module frozen in eval mode for training (a backward ran through the eval-mode graph) is no evaluation.
    frozen = patch_for(_train_eval_cause(script, 8, "x", backward_through=True), str(script), "train.py", script.read_bytes())
    assert frozen is not None and frozen.name != "eval-uncompiled" and not frozen.applicable
    # A call of the module made in training mode is refused with why.
    patch = patch_for(_train_eval_cause(script, 18, "    loss = model(torch.ones(3, 4)).sum()"), str(script), "train.py", script.read_bytes())
    assert not patch.applicable and patch.why_not.startswith("the evaluation's call at line 18 is after no `.eval()` of its block"), patch.why_not


def test_the_evaluations_call_edited_is_the_compiled_models_not_a_call_around_it_or_inside_it(tmp_path):
    """`val = model(input_ids=batch(32), labels=batch(32)).loss` (an HF model fed by a batch maker)
    and `criterion(model(x), y)`: the call edited is the one of the name the script assigned a
    torch.compile result to, never `batch` (a re-run that changed nothing: NO EFFECT) nor the loss."""
    source = textwrap.dedent("""\
        import torch

        net = torch.nn.Linear(4, 1)
        model = torch.compile(net)
        criterion = torch.nn.MSELoss()

        def batch(n):
            return torch.ones(n, 4)

        with torch.no_grad():
            val = model(batch(2)).sum()
            loss = criterion(model(batch(3)), torch.ones(3, 1))
        """)
    script = tmp_path / "train.py"
    script.write_text(source)
    patch = patch_for(_grad_mode_cause(script, 11, "    val = model(batch(2)).sum()"), str(script), "train.py", script.read_bytes())
    assert patch is not None and patch.applicable and patch.edited == (11, 12), patch.why_not
    assert '    val = getattr(model, "_orig_mod", model)(batch(2)).sum()\n' in patch.patched
    assert '    loss = criterion(getattr(model, "_orig_mod", model)(batch(3)), torch.ones(3, 1))\n' in patch.patched


IN_PLACE = textwrap.dedent("""\
    import torch

    compiles = []
    def backend(gm, example_inputs):
        compiles.append(torch.is_grad_enabled())
        return gm.forward

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(4, 1)

        def forward(self, x):
            return torch.relu(self.fc(x)) * 2

    model = Net()
    model.compile(backend=backend)
    for step in range(3):
        model(torch.ones(3, 4)).sum().backward()
        with torch.no_grad():
            print(model(torch.ones(3, 4)).sum().item())
    print("compiles", compiles)
    """)


def test_an_evaluation_of_a_module_compiled_in_place_runs_under_force_eager(tmp_path):
    """pytorch/examples' word language model compiled with `model.compile()` (in place: no
    `_orig_mod`): eval-uncompiled wrapped the evaluation's call in `getattr(model, "_orig_mod",
    model)`, the compiled module itself, so its re-run changed nothing. The call runs under
    set_stance("force_eager") now: the patched script compiles training's graph only, once."""
    import subprocess
    import sys

    script = tmp_path / "train.py"
    script.write_text(IN_PLACE)
    patch = patch_for(_grad_mode_cause(script, 21, "        print(model(torch.ones(3, 4)).sum().item())"), str(script), "train.py",
                      script.read_bytes())
    assert patch is not None and patch.name == "eval-uncompiled" and patch.applicable, patch.why_not
    assert [line for line in patch.diff.splitlines() if line[:1] in "+-" and line[:3] not in ("+++", "---")] == [
        "-        print(model(torch.ones(3, 4)).sum().item())",
        '+        print(torch.compiler.set_stance("force_eager")(model)(torch.ones(3, 4)).sum().item())',
    ]
    assert "force_eager" in patch.title
    patched = tmp_path / "patched.py"
    patched.write_text(patch.patched)
    for path, compiles in ((script, "[True, False]"), (patched, "[True]")):
        out = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=300, check=True)
        assert out.stdout.splitlines()[-1] == f"compiles {compiles}", (path, out.stdout, out.stderr)
