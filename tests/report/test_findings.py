"""Findings as shown: a capture that raises at every step is one line saying how many times, where
and which captures; findings that differ in code, words or line stay apart."""

from cagtool.record.schema import FindingEvent, SourceRef
from cagtool.report.findings import SHOWN_IDS, shown_findings


def _error(i: int, line: int = 33, code: str = "ca_capture_error", words: str = "TypeError: no sin") -> FindingEvent:
    return FindingEvent(seq=i, t=float(i), code=code, message=f"the compiled-autograd capture of !{i} raised {words}", step=i,
                        source=SourceRef("train.py", line))


def test_a_capture_raising_every_step_is_one_line_with_its_count_last_step_and_first_ids():
    findings = [_error(i) for i in range(1000)]
    [shown] = shown_findings(findings)
    assert shown.first is findings[0] and shown.count == 1000 and shown.last_step == 999
    ids = ", ".join(f"!{i}" for i in range(SHOWN_IDS))
    assert shown.repeats == f" - 1000 times in all, the last at step 999 ({ids}, ... (1000 ids))"


def test_findings_that_differ_in_line_code_or_words_stay_apart_in_first_order():
    findings = [_error(0), _error(1, line=40), _error(2, code="ca_capture_failed"), _error(3, words="ValueError: no"), _error(4)]
    shown = shown_findings(findings)
    assert [(s.first.seq, s.count) for s in shown] == [(0, 2), (1, 1), (2, 1), (3, 1)]
    assert shown[0].repeats == " - 2 times in all, the last at step 4 (!0, !4)"
    assert [s.repeats for s in shown[1:]] == ["", "", ""]
