"""A verification in words: one block per fix (before -> after, verdict), then the causes no fix
could be applied for. Used by `recompiles --verify` and `summary`."""

from __future__ import annotations

from typing import Any

from cagtool.verify.verification import Verification


def _counts(before: list, after: list) -> str:
    b = before[0] if before and len(set(before)) == 1 else "/".join(map(str, before)) or "?"
    a = after[0] if after and len(set(after)) == 1 else "/".join(map(str, after)) or "?"
    return f"{b} -> {a}"


def _seconds(value: Any) -> str:
    return "-" if value is None else f"{value:.2f} s"


def _mib(value: Any) -> str:
    return "-" if not value else f"{value / 2**20:.0f} MiB"


def verification_lines(v: Verification | dict) -> list[str]:
    data = v.to_dict() if isinstance(v, Verification) else v
    base = data.get("baseline") or {}
    lines = [f"Fixes verified by re-running (mode {data['mode']}, {data['repeat']} runs of the baseline and of each fix):"]
    if not data["fixes"]:
        lines.append("  no fix cagtool can apply without editing the script answers these causes")
    for fix in data["fixes"]:
        causes = ", ".join(f"#{n}" for n in fix["causes"])
        how = " ".join([*(f"{k}={val}" for k, val in fix["env"].items()), *(f"cagtool run {flag}" for flag in fix["run_flags"])])
        lines.append(f"  {fix['fix']} (cause {causes}): {fix['title']} [{how}] - {fix['who']}")
        m = fix.get("measured")
        if m and base:
            lines.append(f"    CA recompiles {_counts(base['ca_recompiles'], m['ca_recompiles'])}, Dynamo recompiles "
                         f"{_counts(base['dynamo_recompiles'], m['dynamo_recompiles'])}, CA graphs {_counts(base['ca_graphs'], m['ca_graphs'])}")
            step = "-"
            if fix.get("speedup") is not None:
                step = f"{fix['speedup']:.2f}x of the baseline's speed (90% CI {fix['speedup_low']:.2f}-{fix['speedup_high']:.2f}x)"
            lines.append(f"    compile {_seconds(base['compile_time_s'])} -> {_seconds(m['compile_time_s'])}; first step "
                         f"{_seconds(base['first_step_s'])} -> {_seconds(m['first_step_s'])}; steady step {step}; peak memory "
                         f"{_mib(base['peak_memory_bytes'])} -> {_mib(m['peak_memory_bytes'])}")
        lines.append(f"    verdict: {fix['verdict'].upper()} ({'; '.join(fix['reasons'])}); re-runs: {m['run'] if m else '-'}")
    for item in data.get("not_applied", ()):
        lines.append(f"  cause #{item['cause']} ({item['code']}): {item['why']} - {item['who']}")
    took = data.get("wall_s")
    estimated = data.get("estimated_s")
    if took is not None:
        lines.append(f"  took {took:.0f} s" + (f" (estimated {estimated:.0f} s)" if estimated is not None else "") + f"; kept in {data['run']}/verification.json")
    return lines
