"""The Vega, Vega-Lite and vega-embed JavaScript, inlined into every report.

vl-convert ships the libraries and bundles them into one script (about 0.9 MB) that sets
`window.vegaEmbed`; bundling takes about 1.4 s, so the result is kept in a per-user cache keyed
by the library versions, and later reports read it back in milliseconds.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from cagtool.record.atomic import write_atomic

CACHE_ENV = "CAGTOOL_CACHE_DIR"

# The Vega-Lite version the charts' specs are written for (`charts.py`), and vl-convert's name for
# it, which the bundle is built for: the version altair 6.3 writes (altair is not a dependency;
# tests/report/html/test_html_pieces.py checks the two against it).
VEGALITE_SCHEMA = "https://vega.github.io/schema/vega-lite/v6.4.1.json"
VEGALITE_VERSION = "v6_4"


def vegalite_version() -> str:
    """The Vega-Lite version of the specs, as vl-convert names it ("v6_4")."""
    return VEGALITE_VERSION


def cache_dir() -> Path:
    """cagtool's per-user cache: $CAGTOOL_CACHE_DIR, else $XDG_CACHE_HOME/cagtool or ~/.cache/cagtool."""
    explicit = os.environ.get(CACHE_ENV)
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "cagtool"


def javascript_bundle() -> str:
    """The bundle, from the cache when a copy for these versions is there."""
    import vl_convert

    vl_version = vegalite_version()
    key = f"{vl_convert.__version__ if hasattr(vl_convert, '__version__') else ''}-{vl_convert.get_vega_version()}-{vl_version}-{vl_convert.get_vega_embed_version()}"
    name = f"vega-bundle-{hashlib.sha256(key.encode()).hexdigest()[:16]}.js"
    path = cache_dir() / name
    try:
        return path.read_text(encoding="utf-8")
    except OSError:
        pass
    bundle = vl_convert.javascript_bundle(vl_version=vl_version)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, bundle)  # two reports written at once never read half a file
    except OSError:
        pass  # a read-only or full home only costs the next report the bundling time again
    return bundle
