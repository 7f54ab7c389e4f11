"""Gate settings: `[tool.cagtool.gate]` of the user's pyproject.toml merged with command-line
flags (flags win, key by key; for the keyed thresholds, kind by kind).

    [tool.cagtool.gate]
    mode = "ca"
    max-ca-graphs = 1
    max-recompiles = { ca = 0, dynamo = 2 }     # or 2, or "ca:0", or ["ca:0", "dynamo:2"]
    max-graph-breaks = 0
    min-speedup = 1.0                           # ca/aot; or { "ca/eager" = 1.2 }
    max-memory-ratio = 1.2                      # ca peak / aot peak; or { baseline = 1.1 }
    baseline = "ci/cagtool-baseline.json"       # relative to this pyproject.toml
    max-regression = ["10%", "p90:15%"]         # median and tail; or "10%", or { median = "10%", p90 = "15%" }, or "0.002s"
    max-compile-regression = "25%"
    fail-on-improvement = true

The config is the nearest pyproject.toml, upward from the working directory, that has a
`[tool.cagtool.gate]` table. Unknown keys are a usage error: a misspelt threshold in CI must
not pass silently.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from cagtool.errors import UsageError
from cagtool.record.schema import IMPORTED_MODE, MODES
from cagtool.report.gate.checks import (
    RECOMPILE_KINDS,
    STEP_TIME_FIELDS,
    CountLimit,
    MemoryRatioThreshold,
    SpeedupThreshold,
    TimeThreshold,
    parse_count,
    parse_memory_ratio,
    parse_speedup,
    parse_time_threshold,
)

PYPROJECT = "pyproject.toml"
CONFIG_TABLE = "[tool.cagtool.gate]"


@dataclass(frozen=True)
class GateSettings:
    """Every threshold a gate can hold, typed; None (or empty) means not given here."""

    mode: str | None = None
    max_ca_graphs: CountLimit | None = None
    max_recompiles: dict[str, CountLimit] = field(default_factory=dict)  # by kind: total, ca, dynamo
    max_graph_breaks: CountLimit | None = None
    min_speedup: dict[str, SpeedupThreshold] = field(default_factory=dict)  # by pair "ca/aot"
    max_memory_ratio: dict[str, MemoryRatioThreshold] = field(default_factory=dict)  # by pair "ca/aot" or "baseline"
    baseline: Path | None = None
    max_regression: dict[str, TimeThreshold] = field(default_factory=dict)  # by field: median, mean, p10, p90
    max_compile_regression: TimeThreshold | None = None
    fail_on_improvement: bool | None = None
    # A timing check that cannot resolve its threshold with the evidence it has fails.
    require_power: bool | None = None
    # Gradients per parameter: modes must agree within this multiple of the dtype- and size-dependent
    # tolerance (report/compare/grad_parity.py); 1 is that tolerance as it is.
    max_grad_diff: float | None = None
    # Where each given setting came from ("flag" or the config path), for the report; a keyed
    # setting's keys also each under "setting:key" (a flag's ca:2 beside the config's dynamo:0).
    sources: dict[str, str] = field(default_factory=dict)

    def source_of(self, name: str, key: str | None = None) -> str:
        """What set the limit in force: the flag, or the config it was read from."""
        return self.sources.get(f"{name}:{key}") or self.sources.get(name, "flag")

    def has_thresholds(self) -> bool:
        return any(
            (self.max_ca_graphs, self.max_recompiles, self.max_graph_breaks, self.min_speedup, self.max_memory_ratio,
             self.baseline, self.max_regression, self.max_compile_regression, self.max_grad_diff is not None)
        )


_KEYS = (
    "mode", "max-ca-graphs", "max-recompiles", "max-graph-breaks", "min-speedup", "max-memory-ratio", "baseline",
    "max-regression", "max-compile-regression", "fail-on-improvement", "require-power", "max-grad-diff",
)


def _as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        return list(value)
    return [value]


def settings_from_values(values: dict[str, Any], source: str, base_dir: Path | None = None) -> GateSettings:
    """Parse raw values (flag strings, or TOML values) into settings. Keys use dashes or
    underscores; None values are ignored. `base_dir` anchors a relative baseline path."""
    normalized: dict[str, Any] = {}
    for key, value in values.items():
        name = key.replace("_", "-")
        if name not in _KEYS:
            raise UsageError(f"{source}: unknown gate setting {key!r} (known: {', '.join(_KEYS)})")
        if value is None or value == [] or value == ():
            continue
        normalized[name] = value

    settings: dict[str, Any] = {}
    where = source if source == "flag" else f"{source} {CONFIG_TABLE}"

    def flag(name: str) -> str:
        return f"--{name}" if source == "flag" else f"{where} {name}"

    if "mode" in normalized:
        mode = str(normalized["mode"]).strip()
        if mode not in (*MODES, IMPORTED_MODE):
            raise UsageError(f"{flag('mode')}: expected one of {', '.join((*MODES, IMPORTED_MODE))}, got {mode!r}")
        settings["mode"] = mode
    for key in ("max-ca-graphs", "max-graph-breaks"):
        if key in normalized:
            values_list = _as_list(normalized[key])
            if len(values_list) != 1:
                raise UsageError(f"{flag(key)}: give one count")
            settings[key.replace("-", "_")] = parse_count(values_list[0], flag(key))
    if "max-recompiles" in normalized:
        raw = normalized["max-recompiles"]
        items = [f"{k}:{v}" for k, v in raw.items()] if isinstance(raw, dict) else _as_list(raw)
        limits = [parse_count(item, flag("max-recompiles"), tuple(RECOMPILE_KINDS)) for item in items]
        settings["max_recompiles"] = _one_each(items, limits, [limit.kind for limit in limits], flag("max-recompiles"))
    if "min-speedup" in normalized:
        raw = normalized["min-speedup"]
        items = [f"{k}:{v}" for k, v in raw.items()] if isinstance(raw, dict) else _as_list(raw)
        thresholds = [parse_speedup(item, flag("min-speedup")) for item in items]
        settings["min_speedup"] = _one_each(items, thresholds, [f"{t.numerator}/{t.denominator}" for t in thresholds], flag("min-speedup"))
    if "max-memory-ratio" in normalized:
        raw = normalized["max-memory-ratio"]
        items = [f"{k}:{v}" for k, v in raw.items()] if isinstance(raw, dict) else _as_list(raw)
        ratios = [parse_memory_ratio(item, flag("max-memory-ratio")) for item in items]
        settings["max_memory_ratio"] = _one_each(items, ratios, [r.key for r in ratios], flag("max-memory-ratio"))
    if "baseline" in normalized:
        path = Path(str(normalized["baseline"])).expanduser()
        if base_dir is not None and not path.is_absolute():
            path = base_dir / path
        settings["baseline"] = path
    if "max-regression" in normalized:
        raw = normalized["max-regression"]
        items = [f"{k}:{v}" for k, v in raw.items()] if isinstance(raw, dict) else _as_list(raw)
        thresholds = [parse_time_threshold(item, flag("max-regression"), STEP_TIME_FIELDS) for item in items]
        settings["max_regression"] = _one_each(items, thresholds, [t.field for t in thresholds], flag("max-regression"))
    if "max-compile-regression" in normalized:
        settings["max_compile_regression"] = parse_time_threshold(
            normalized["max-compile-regression"], flag("max-compile-regression")
        )
    if "max-grad-diff" in normalized:
        settings["max_grad_diff"] = parse_grad_diff(normalized["max-grad-diff"], flag("max-grad-diff"))
    for key in ("fail-on-improvement", "require-power"):
        if key in normalized:
            value = normalized[key]
            if not isinstance(value, bool):
                raise UsageError(f"{flag(key)}: expected true or false, got {value!r}")
            settings[key.replace("-", "_")] = value
    sources = {name: source for name in settings}
    sources.update({f"{name}:{key}": source for name, value in settings.items() if isinstance(value, dict) for key in value})
    return GateSettings(**settings, sources=sources)


def _one_each(items: list[Any], parsed: list[Any], keys: list[str], flag: str) -> dict[str, Any]:
    """{key: threshold}, refusing two thresholds for one key (`--max-recompiles ca:0 --max-recompiles
    ca:3`): a CI owner who wrote both would otherwise be held to one of them, silently."""
    seen: dict[str, Any] = {}
    for item, key in zip(items, keys):
        if key in seen:
            raise UsageError(f"{flag}: {key} given twice ({seen[key]}, {item}): give one threshold for it")
        seen[key] = item
    return dict(zip(keys, parsed))


def parse_grad_diff(value: Any, flag: str) -> float:
    """`1`, `2x` or `auto` (= 1): a positive multiple of the gradient-parity tolerance."""
    if isinstance(value, bool):
        raise UsageError(f"{flag}: expected a multiple of the tolerance such as 1 or 2x, got {value!r}")
    text = str(value).strip().lower()
    if text == "auto":
        return 1.0
    try:
        scale = float(text[:-1] if text.endswith("x") else text)
    except ValueError:
        raise UsageError(f"{flag}: expected a multiple of the tolerance such as 1, 2x or auto, got {value!r}") from None
    if not (scale > 0 and scale < float("inf")):
        raise UsageError(f"{flag}: the multiple must be positive and finite, got {value!r}")
    return scale


def merge(config: GateSettings, flags: GateSettings) -> GateSettings:
    """Flags win: a flag replaces the config's value; keyed thresholds merge by key."""
    merged: dict[str, Any] = {}
    sources = dict(config.sources)
    for f in fields(GateSettings):
        if f.name == "sources":
            continue
        low, high = getattr(config, f.name), getattr(flags, f.name)
        if isinstance(low, dict):
            merged[f.name] = {**low, **high}
            sources.update({f"{f.name}:{key}": "flag" for key in high})
            if high:
                # The setting as a whole; each check names its own key's source (source_of).
                sources[f.name] = "flag" if not set(low) - set(high) else f"{config.sources.get(f.name)} and flag"
        else:
            merged[f.name] = high if high is not None else low
            if high is not None:
                sources[f.name] = "flag"
    return GateSettings(**merged, sources=sources)


def _load_toml(path: Path) -> dict[str, Any]:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10
        try:
            import tomli as tomllib
        except ImportError:
            raise UsageError(f"reading {path} needs Python 3.11 or the tomli package (pip install tomli)") from None
    try:
        with path.open("rb") as handle:
            return tomllib.load(handle)
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{path} is not valid TOML: {exc}") from None


def _gate_table(data: dict[str, Any]) -> dict[str, Any] | None:
    table = data.get("tool", {}).get("cagtool", {}).get("gate")
    return table if isinstance(table, dict) else None


def find_config(start: Path | None = None) -> Path | None:
    """The nearest pyproject.toml at or above `start` (default: cwd) with a gate table."""
    here = (start or Path.cwd()).resolve()
    for directory in (here, *here.parents):
        candidate = directory / PYPROJECT
        if candidate.is_file() and _gate_table(_load_toml(candidate)) is not None:
            return candidate
    return None


def load_config(path: Path | None) -> GateSettings:
    """Settings from a pyproject.toml's gate table (empty settings for None)."""
    if path is None:
        return GateSettings()
    path = Path(path)
    if not path.is_file():
        raise UsageError(f"config file not found: {path}")
    table = _gate_table(_load_toml(path))
    if table is None:
        raise UsageError(f"{path} has no {CONFIG_TABLE} table")
    return settings_from_values(table, str(path), base_dir=path.parent.resolve())


def resolve_settings(flags: GateSettings, config_path: Path | None = None, use_config: bool = True) -> tuple[GateSettings, Path | None]:
    """Flags merged over the config (an explicit path, or the one found upward from cwd)."""
    if not use_config:
        return flags, None
    path = Path(config_path) if config_path is not None else find_config()
    config = load_config(path)
    return merge(config, flags), path

