"""What Inductor keeps per machine, past any one job, and how each mode's fresh cache meets it:
its precompiled C++ headers, and its CPU ISA checks.

Precompiled headers: torch keeps them in <tmp>/torchinductor_<user>/precompiled_headers, on purpose
outside TORCHINDUCTOR_CACHE_DIR (torch/_inductor/codecache.py `_HEADER_DIR`; docs/torch-internals.md,
"Inductor's precompiled headers"): a plain job builds them at its first Inductor compile on a
machine, and every later job reuses them. cagtool leaves torch's switch
(TORCHINDUCTOR_CPP_CACHE_PRECOMPILE_HEADERS) as the job has it, so a mode's compile time is the
plain job's: without the headers the same compiles took ~45 % longer (the README's transformer).
The mode that built them paid a one-time cost (~4 s there) that the modes after it did not; the
directory's header files are listed before and after each mode to say which one.

ISA checks: before its first CPU kernel, Inductor dry-compiles a small C++ file for each vector ISA
it may use (torch/_inductor/cpu_vec_isa.py `VecISA.check_build`: 10 g++ runs and a dlopen probe each
on this machine, ~7 s) into TORCHINDUCTOR_CACHE_DIR, under a key of the code, the compiler's version,
the ISA's flags and torch's version, and skips each compile whose .so is there. The plain job finds
them in its own cache after its first run; a mode given an empty cache would pay them again inside
its compile time. So each mode's fresh cache starts with the checks the job's cache holds
(`isa_checks`, `seed_isa_checks`): the kernels and graphs stay the mode's own, compiled cold, and
where the job's cache holds none, every mode pays the checks alike, as the plain job's first run does.
"""
from __future__ import annotations

import contextlib
import getpass
import os
import re
import shutil
import tempfile

HEADER_SUFFIXES = (".gch", ".pch")  # what gcc / clang write for each precompiled header (cpp_builder.py)
MAX_ENTRIES = 10_000  # a directory of more is not listed further


def headers_dir() -> str:
    """torch's `_HEADER_DIR`, as torch computes it."""
    return os.path.join(default_cache_dir(), "precompiled_headers")


def default_cache_dir() -> str:
    """Inductor's cache where TORCHINDUCTOR_CACHE_DIR is not set, as torch computes it
    (runtime/cache_dir_utils.py `default_cache_dir`)."""
    try:
        user = getpass.getuser()
    except (KeyError, ModuleNotFoundError, OSError):
        getuid = getattr(os, "getuid", None)
        user = f"uid_{getuid()}" if callable(getuid) else "unknown_user"
    return os.path.join(tempfile.gettempdir(), "torchinductor_" + re.sub(r'[\\/:*?"<>|]', "_", user))


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


ISA_CHECK_MARK = b"_chk_kernel"  # each ISA check's C++ defines one (`__avx_chk_kernel`, `__amx_chk_kernel`, ...)
ISA_CHECK_MAX_BYTES = 4096  # a check's source is a few hundred bytes; a kernel's is larger


def job_cache_dir(env: dict[str, str]) -> str:
    """The Inductor cache the job itself would use (runtime/cache_dir_utils.py `cache_dir`)."""
    return os.path.abspath(env.get("TORCHINDUCTOR_CACHE_DIR") or default_cache_dir())


def isa_checks(cache: str) -> list[tuple[str, str]]:
    """The ISA checks `cache` holds, each a (source, library) pair of paths relative to it: a
    `<2 chars>/<key>.cpp` that defines a `..._chk_kernel`, with its `<key>.so` beside it. A link, a
    larger file or an unreadable one is not a check; at most MAX_ENTRIES files are looked at."""
    found: list[tuple[str, str]] = []
    seen = 0
    try:
        with os.scandir(cache) as subdirs:
            for subdir in subdirs:
                if len(subdir.name) != 2 or not subdir.is_dir(follow_symlinks=False):
                    continue
                with os.scandir(subdir.path) as entries:
                    for entry in entries:
                        seen += 1
                        if seen > MAX_ENTRIES:
                            return found
                        stem, dot, ext = entry.name.partition(".")
                        if ext != "cpp" or not entry.is_file(follow_symlinks=False):
                            continue
                        library = os.path.join(subdir.path, stem + ".so")
                        if entry.stat(follow_symlinks=False).st_size > ISA_CHECK_MAX_BYTES or os.path.islink(library) or not os.path.isfile(library):
                            continue
                        with open(entry.path, "rb") as source:
                            if ISA_CHECK_MARK not in source.read(ISA_CHECK_MAX_BYTES):
                                continue
                        found.append((os.path.join(subdir.name, entry.name), os.path.join(subdir.name, stem + ".so")))
    except OSError:
        pass
    return found


def seed_isa_checks(source: str, checks: list[tuple[str, str]], dest: str) -> int:
    """Copies `checks` (isa_checks of `source`) into the fresh cache `dest`, each where torch looks
    for it; the number copied. A check that cannot be copied is left for the mode to compile, as
    torch does with a missing one."""
    copied = 0
    for pair in checks:
        try:
            for relative in pair:
                os.makedirs(os.path.join(dest, os.path.dirname(relative)), exist_ok=True)
                shutil.copy2(os.path.join(source, relative), os.path.join(dest, relative), follow_symlinks=False)
            copied += 1
        except OSError:
            for relative in pair:
                with contextlib.suppress(OSError):
                    os.unlink(os.path.join(dest, relative))
    return copied
