"""The headline: one or two sentences that answer what the user came for, pasteable into a pull
request. "compiled autograd: 0.85x the speed of torch.compile alone (slower beyond the noise, 90%
CI 0.82-0.88x); 1 CA recompile (step 3, changed sizes; fix verified); numerics agree."

Pure functions of a `Comparison` (one run) or a `RunComparison` (A/B), and optionally the run's
kept verification; every renderer (run's summary, `compare`, the HTML report) puts it first.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cagtool.report.compare.analysis import Comparison, RunComparison, Speedup

GOOD, BAD, NEUTRAL = "good", "bad", "neutral"

_MODE_WORDS = {"ca": "compiled autograd", "aot": "torch.compile alone", "eager": "eager"}


@dataclass(frozen=True)
class Headline:
    text: str
    tone: str  # good | bad | neutral: the colour the HTML gives it


def _speed_phrase(s: Speedup) -> tuple[str, str]:
    mode, base = _MODE_WORDS.get(s.mode, s.mode), _MODE_WORDS.get(s.baseline, s.baseline)
    if s.ratio is None:
        return f"{mode} vs {base}: not timed ({s.note or 'no steady steps'})", NEUTRAL
    ci = f"90% CI {s.low:.2f}-{s.high:.2f}x" if s.low is not None and s.high is not None else ""
    if s.verdict == "too few steady steps":
        return f"{mode}: {s.ratio:.2f}x the speed of {base}, from too few steady steps to judge", NEUTRAL
    if s.verdict == "within noise":
        resolves = f", resolves +/-{100 * s.resolution:.0f}%" if s.resolution is not None else ""
        return f"{mode}: {s.ratio:.2f}x the speed of {base}, no difference beyond the noise ({ci}{resolves})", NEUTRAL
    word = "faster" if s.verdict == "faster" else "slower"
    return f"{mode}: {s.ratio:.2f}x the speed of {base} ({word} beyond the noise, {ci})", GOOD if word == "faster" else BAD


def _recompile_phrase(comparison: Comparison, verified: dict[str, Any] | None) -> str:
    column = comparison.modes.get("ca")
    if column is None or column.metrics is None:
        return ""
    m = column.metrics
    n = m.ca_recompiles
    if n == 0 and m.dynamo_recompiles == 0:
        return "no recompiles"
    parts = []
    if n:
        kinds = []
        if m.ca_shape_recompiles:
            kinds.append("changed sizes")
        if m.ca_new_node_misses - m.ca_grad_warmup_misses > 0:
            kinds.append("new autograd nodes")
        parts.append(f"{n} CA recompile{'s' if n != 1 else ''}" + (f" ({', '.join(kinds)})" if kinds else ""))
    if m.dynamo_recompiles:
        parts.append(f"{m.dynamo_recompiles} Dynamo recompile{'s' if m.dynamo_recompiles != 1 else ''}")
    phrase = " and ".join(parts)
    if verified:
        good = [f["fix"] for f in verified.get("fixes", ()) if f.get("verdict") == "verified"]
        if good:
            phrase += f" (fix verified: {', '.join(good)})"
        elif verified.get("fixes"):
            phrase += " (no fix verified)"
    return phrase


def run_headline(comparison: Comparison, verified: dict[str, Any] | None = None) -> Headline:
    """For one run: the ca speed against torch.compile alone (else against eager), its recompiles,
    whether the numerics agree, and any mode that failed."""
    phrases, tones = [], []
    failed = [f.describe() for f in comparison.failures]
    if failed:
        phrases.append(f"mode {failed[0]}" + (f" (+{len(failed) - 1} more)" if len(failed) > 1 else ""))
        tones.append(BAD)
    by_label = {s.label: s for s in comparison.speedups}
    speed = by_label.get("ca/aot") or by_label.get("ca/eager") or by_label.get("aot/eager")
    if speed is not None:
        text, tone = _speed_phrase(speed)
        phrases.append(text)
        tones.append(tone)
    recompiles = _recompile_phrase(comparison, verified)
    if recompiles:
        phrases.append(recompiles)
    numerics = comparison.numerics
    if numerics.reference is not None and len(comparison.modes) > 1:
        if numerics.disagreements:
            phrases.append("numerics DISAGREE")
            tones.append(BAD)
        elif numerics.inputs_differ:
            # The first step's losses differ: other inputs, not a verdict on compiled autograd.
            phrases.append("numerics not comparable: inputs differ (unseeded?)")
        else:
            phrases.append("numerics agree")
    if not phrases:
        return Headline("nothing to compare: record more than one mode, or more steps", NEUTRAL)
    tone = BAD if BAD in tones else GOOD if GOOD in tones else NEUTRAL
    return Headline("; ".join(phrases) + ".", tone)


def change_headline(rc: RunComparison) -> Headline:
    """For A/B: per mode, what B changed: recompiles, step time, compile time."""
    phrases, tones = [], []
    for change in rc.changes:
        if change.before is None or change.after is None or change.before.metrics is None or change.after.metrics is None:
            continue
        a, b = change.before, change.after
        bits = []
        d = b.metrics.recompiles - a.metrics.recompiles
        if d:
            bits.append(f"{abs(d)} {'fewer' if d < 0 else 'more'} recompile{'s' if abs(d) != 1 else ''}")
            tones.append(GOOD if d < 0 else BAD)
        s = change.speedup
        if s is not None and s.ratio is not None:
            if s.verdict in ("faster", "slower"):
                bits.append(f"step time {s.verdict} ({s.ratio:.2f}x the speed, 90% CI {s.low:.2f}-{s.high:.2f}x)")
                tones.append(GOOD if s.verdict == "faster" else BAD)
            elif s.verdict == "within noise":
                bits.append("step time unchanged within noise")
        if a.compile_time_s and b.compile_time_s:
            pct = 100.0 * (b.compile_time_s / a.compile_time_s - 1.0)
            if abs(pct) >= 1:
                bits.append(f"compile {abs(pct):.0f}% {'faster' if pct < 0 else 'slower'}")
        if bits:
            phrases.append(f"B {change.mode}: {', '.join(bits)}")
    if rc.problems:
        phrases.append(rc.problems[0])
        tones.append(BAD)
    if not phrases:
        return Headline("B: no change in recompiles, step time or compile time.", NEUTRAL)
    tone = BAD if BAD in tones else GOOD if GOOD in tones else NEUTRAL
    return Headline("; ".join(phrases) + ".", tone)
