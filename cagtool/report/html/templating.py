"""The jinja2 environment the report's templates render in, and the one way a value reaches the
page as something other than escaped text.

Everything that comes from a record (script names, argv, reasons, graph code, exception text) is
data, never markup: a template prints it with `{{ }}`, which passes it through `safe_text` (an
ANSI-coloured exception reads as in the terminal report) and then autoescapes it. Only markup
cagtool made itself arrives as `Markup`: pygments' HTML of a code file (every token escaped by
pygments), the page's own CSS and JavaScript, and the chart specs through `script_json`.
"""

from __future__ import annotations

import functools
import json
import math
from pathlib import Path
from typing import Any

from cagtool.report.text.safe_text import safe_text

TEMPLATES = Path(__file__).with_name("templates")


def as_text(value: Any) -> Any:
    """What a `{{ }}` prints before jinja2 escapes it: markup cagtool made stays as it is; None
    prints nothing; anything else as `safe_text` shows it."""
    if hasattr(value, "__html__"):
        return value
    if value is None:
        return ""
    return safe_text(str(value))


# How the templates compile; part of the compiled templates' cache key (the cache keys on the
# template sources only, and these change the code compiled from them).
_OPTIONS: dict[str, Any] = {"autoescape": True, "trim_blocks": True, "lstrip_blocks": True, "keep_trailing_newline": True}


@functools.lru_cache(maxsize=None)
def environment() -> Any:
    """The report's environment: templates compiled once a process, and kept compiled across
    processes in jinja2's bytecode cache (`compiled_cache`)."""
    return new_environment(compiled_cache())


def new_environment(cache: Any = None) -> Any:
    """Autoescaping on for every template, whatever its name."""
    import jinja2

    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        finalize=as_text,
        undefined=jinja2.StrictUndefined,  # a misspelt field is an error, not an empty cell
        bytecode_cache=cache,
        **_OPTIONS,
    )


def compiled_cache() -> Any:
    """jinja2's own cache of compiled templates, in cagtool's cache directory: compiling the
    report's templates costs about 60 ms of CPU, 5-15 % of a `cagtool report`, and a template
    changes only with cagtool. A cache that cannot be read or written costs only that time again:
    its errors are a cache miss, never a failed report."""
    import hashlib

    import jinja2

    from cagtool.report.html.vega_bundle import cache_dir

    class Cache(jinja2.FileSystemBytecodeCache):
        def load_bytecode(self, bucket: Any) -> None:
            try:
                super().load_bytecode(bucket)
            except Exception:  # a damaged file (the writes are atomic, but disks are not)
                bucket.reset()

        def dump_bytecode(self, bucket: Any) -> None:
            try:
                super().dump_bytecode(bucket)
            except OSError:
                pass

    key = hashlib.sha256(f"{jinja2.__version__} {sorted(_OPTIONS.items())}".encode()).hexdigest()[:16]
    directory = cache_dir() / f"templates-{key}"
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    return Cache(str(directory))


def template(name: str) -> Any:
    return environment().get_template(name)


@functools.lru_cache(maxsize=None)
def asset(name: str) -> str:
    """A file beside the templates, read once (the page's CSS and JavaScript)."""
    return (TEMPLATES / name).read_text(encoding="utf-8")


def script_json(data: Any) -> str:
    """JSON safe to place inside a `<script>` element: no `</script>`, `<!--` or `<script` in it
    can end the element or switch the parser's state (the HTML spec's script-data states), and
    U+2028/U+2029 are escaped for older JavaScript parsers. `<` becomes `\\u003c` inside strings,
    which JSON reads back as the same character."""
    text = json.dumps(_finite(data), ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    return (
        text.replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("&", "\\u0026")
        .replace("\u2028", "\\u2028")
        .replace("\u2029", "\\u2029")
    )


def _finite(value: Any) -> Any:
    """JSON has no NaN or infinity: they become null (a gap in a line, a missing tooltip value)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value
