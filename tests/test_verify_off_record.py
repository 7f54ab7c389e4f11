"""`recompiles --verify`'s baseline re-run against the record it repeats: the same job, so a steady
step (or a compile) many times the record's is another machine state, said beside every verdict,
and no timing of it is compared. The figures are injected (a real verify's baseline re-run ran 288 ms a
step against 2.06 ms recorded on a loaded machine, and read every fix ">100x" faster); counts stay."""

from __future__ import annotations

from cagtool.report.compare.analysis import Speedup
from cagtool.report.figures.intervals import RatioInterval
from cagtool.verify.verification import HARMFUL, OFF_RECORD, VERIFIED, RecordCheck, Side, check_against_record, judge, off_record


def _side(step_s: float | None, compile_s: float | None, recompiles: int = 3) -> Side:
    return Side("x", "x", "finished", [recompiles], [0], [1 + recompiles], compile_s, None, step_s, 4 if step_s else 0, None, 0.0,
                compile_times_s=[compile_s])


def test_a_baseline_re_run_far_from_the_record_says_so_and_compares_no_step_time():
    words = off_record("steady step", 0.00206, 0.288, "the machine's load differed from the record's")
    assert words == ("the baseline re-run's steady step 140x slower than the record's (288 ms vs 2.06 ms): the machine's load "
                     "differed from the record's, so steady step times are not compared")
    faster = off_record("steady step", 0.0546, 0.0145, "load")
    assert faster is not None and faster.startswith("the baseline re-run's steady step 3.8x faster than the record's (14.5 ms vs 54.6 ms)")
    # Within the noise of one job's processes on a busy machine, or unknown: compared as before.
    assert off_record("steady step", 0.010, 0.010 * OFF_RECORD * 0.99, "load") is None
    assert off_record("steady step", 0.010, 0.010 / OFF_RECORD * 1.01, "load") is None
    assert off_record("steady step", None, 0.288, "load") is None and off_record("compile", 2.0, 0.0, "load") is None


def test_the_record_check_reads_each_timing_on_its_own():
    check = check_against_record(_side(0.00206, 2.78), _side(0.288, 3.69))
    assert check.step is not None and "140x slower" in check.step
    assert check.compile is None  # 3.69 s against 2.78 s: compile times compared
    slow_compile = check_against_record(_side(0.0145, 17.4), _side(0.0150, 80.0)).compile
    assert slow_compile is not None and slow_compile.startswith("the baseline re-run's compile 4.6x slower than the record's (80.0 s vs 17.4 s)")
    assert check_against_record(_side(None, None), _side(0.288, 3.0)) == RecordCheck()


def test_a_verdict_draws_no_speed_conclusion_from_a_baseline_off_the_record():
    """A fix 7x slower than the baseline (every interval bound below 1) is harmful against a baseline
    measured as the record was; against one off the record it is not judged on speed, and the
    recompiles it removed still verify it."""
    slower = Speedup("fix", "baseline", 0.14, 0.12, 0.16, steady_steps=(20, 20),
                     interval=RatioInterval(0.14, 0.12, 0.16, (3, 3), "wall", "t", 0.1, 4.0))
    assert slower.verdict == "slower"
    base, fixed = _side(0.002, 3.0, recompiles=3), _side(0.014, 3.0, recompiles=1)
    verdict, reasons = judge(base, fixed, slower, True)
    assert verdict == HARMFUL and any(r.startswith("steady step slower (0.14x") for r in reasons)
    check = check_against_record(_side(0.288, 3.0), base)
    verdict, reasons = judge(base, fixed, slower, True, check)
    assert verdict == VERIFIED, reasons
    assert reasons == ["recompiles 3 -> 1", check.step, "numerics unchanged"]
    assert not any("0.14x" in r for r in reasons)


def test_a_compile_time_off_the_record_is_not_judged():
    """A compile 9x the baseline's is harmful; where the baseline re-run's own compile was far longer
    than the record's, it is said instead and not judged; far shorter (warm caches) is no reason."""
    base, fixed = _side(0.01, 2.0, recompiles=3), _side(0.01, 18.0, recompiles=1)
    base.compile_times_s, fixed.compile_times_s = [2.0, 2.1, 1.9], [18.0, 18.5, 17.5]
    verdict, reasons = judge(base, fixed, None, None)
    assert verdict == HARMFUL and any(r.startswith("compile time 2.0 s -> 18.0 s") for r in reasons)
    check = check_against_record(_side(0.01, 0.2), base)  # the baseline re-run compiled 10x longer: the load
    assert check.step is None and check.compile is not None and "10x slower" in check.compile
    verdict, reasons = judge(base, fixed, None, None, check)
    assert verdict == VERIFIED and reasons == ["recompiles 3 -> 1", check.compile]
    # Much shorter than the record's is the caches the record's compile filled (the baseline re-run
    # reads them, a fix that changes the graphs does not): the fix's longer compile is still judged.
    warm = check_against_record(_side(0.01, 20.0), base)
    assert warm == RecordCheck()
    verdict, reasons = judge(base, fixed, None, None, warm)
    assert verdict == HARMFUL and any(r.startswith("compile time 2.0 s -> 18.0 s") for r in reasons)
