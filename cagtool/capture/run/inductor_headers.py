"""Inductor's precompiled C++ headers, and which mode built them.

torch keeps them past any one job, in <tmp>/torchinductor_<user>/precompiled_headers, on purpose
outside TORCHINDUCTOR_CACHE_DIR (torch/_inductor/codecache.py `_HEADER_DIR`; docs/torch-internals.md,
"Inductor's precompiled headers"): a plain job builds them at its first Inductor compile on a
machine, and every later job reuses them. cagtool leaves torch's switch
(TORCHINDUCTOR_CPP_CACHE_PRECOMPILE_HEADERS) as the job has it, so a mode's compile time is the
plain job's: without the headers the same compiles took ~45 % longer (the README's transformer).
The mode that built them paid a one-time cost (~4 s there) that the modes after it did not; the
directory's header files are listed before and after each mode to say which one.
"""

from __future__ import annotations

import getpass
import os
import re
import tempfile

HEADER_SUFFIXES = (".gch", ".pch")  # what gcc / clang write for each precompiled header (cpp_builder.py)
MAX_ENTRIES = 10_000  # a directory of more is not listed further


def headers_dir() -> str:
    """torch's `_HEADER_DIR`, as torch computes it (runtime/cache_dir_utils.py default_cache_dir)."""
    try:
        user = getpass.getuser()
    except (KeyError, ModuleNotFoundError, OSError):
        getuid = getattr(os, "getuid", None)
        user = f"uid_{getuid()}" if callable(getuid) else "unknown_user"
    return os.path.join(tempfile.gettempdir(), "torchinductor_" + re.sub(r'[\\/:*?"<>|]', "_", user), "precompiled_headers")


def header_files(folder: str | None = None) -> frozenset[str]:
    """The names of the precompiled headers in `folder` (torch's directory by default); empty where
    there is none or it cannot be read. A link is not followed."""
    found: set[str] = set()
    try:
        with os.scandir(folder or headers_dir()) as entries:
            for entry in entries:
                if len(found) >= MAX_ENTRIES:
                    break
                if entry.name.endswith(HEADER_SUFFIXES) and entry.is_file(follow_symlinks=False):
                    found.add(entry.name)
    except OSError:
        pass
    return frozenset(found)
