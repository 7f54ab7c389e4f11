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
its compile time. So each mode's fresh cache starts with the checks the job's cache held when the
run began (`isa_checks`, `seed_isa_checks`): the kernels and graphs stay the mode's own, compiled
cold, and where the job's cache held none, every mode of the run pays the checks alike, and those a
mode compiled are left in the job's cache as the plain job's first run leaves them (`keep_isa_checks`).
"""

from __future__ import annotations

import contextlib
import getpass
import os
import re
import stat
import tempfile
from collections.abc import Mapping
from typing import NamedTuple

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
ISA_LIBRARY_MAX_BYTES = 1 << 20  # its library ~20 KB


class IsaCheck(NamedTuple):
    """One ISA check as torch left it in a cache: its paths relative to the cache, their bytes."""

    source: str  # <2 chars>/<key>.cpp
    code: bytes
    library: str  # <2 chars>/<key>.so
    data: bytes
    mode: int  # the library's permission bits


def job_cache_dir(env: Mapping[str, str]) -> str:
    """The Inductor cache the job itself would use (runtime/cache_dir_utils.py `cache_dir`)."""
    return os.path.abspath(env.get("TORCHINDUCTOR_CACHE_DIR") or default_cache_dir())


def isa_checks(cache: str) -> list[IsaCheck]:
    """The ISA checks `cache` holds: a `<2 chars>/<key>.cpp` of at most
    ISA_CHECK_MAX_BYTES that defines a `..._chk_kernel`, with its `<key>.so` beside it, both regular
    files (a link is not followed). At most MAX_ENTRIES files are looked at."""
    found: list[IsaCheck] = []
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
                        stem, _, ext = entry.name.partition(".")
                        if ext != "cpp" or not entry.is_file(follow_symlinks=False):
                            continue
                        source = _read_regular(entry.path, ISA_CHECK_MAX_BYTES)
                        if source is None or ISA_CHECK_MARK not in source[0]:
                            continue
                        library = _read_regular(os.path.join(subdir.path, stem + ".so"), ISA_LIBRARY_MAX_BYTES)
                        if library is not None:
                            found.append(IsaCheck(os.path.join(subdir.name, entry.name), source[0], os.path.join(subdir.name, stem + ".so"), *library))
    except OSError:
        pass
    return found


def _read_regular(path: str, limit: int) -> tuple[bytes, int] | None:
    """The bytes of the regular file `path` and its permission bits, read not through a link and
    never blocking on a FIFO; None where it is not one, is larger than `limit` or cannot be read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > limit:
            return None
        with os.fdopen(os.dup(fd), "rb") as handle:
            data = handle.read(limit + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    return (data, stat.S_IMODE(info.st_mode)) if len(data) <= limit else None


def seed_isa_checks(checks: list[IsaCheck], dest: str) -> int:
    """Writes `checks` (isa_checks of the job's cache) into the fresh cache `dest`, each where torch
    looks for it; the number written. A check that cannot be written is left for the mode to
    compile, as torch does with a missing one."""
    written = 0
    for check in checks:
        try:
            os.makedirs(os.path.join(dest, os.path.dirname(check.source)), exist_ok=True)
            with open(os.path.join(dest, check.source), "xb") as handle:
                handle.write(check.code)
            with open(os.open(os.path.join(dest, check.library), os.O_WRONLY | os.O_CREAT | os.O_EXCL, check.mode), "wb") as handle:
                handle.write(check.data)
            written += 1
        except OSError:
            for relative in (check.source, check.library):
                with contextlib.suppress(OSError):
                    os.unlink(os.path.join(dest, relative))
    return written


def keep_isa_checks(mode_cache: str, job_cache: str) -> int:
    """Writes the ISA checks a mode compiled in its fresh cache that the job's own cache lacks into
    the job's cache, as the plain job's first run there would have left them (and as the modes leave
    torch's precompiled headers): so the next run's modes, and the plain job, find them. Only a
    library whose ELF section table is whole (a compile cut short leaves a truncated one, which
    torch would take as built and then find unloadable: the ISA off for every later job); each file
    is written under a temporary name and linked into place, never over one there. The number kept."""
    have = {check.source for check in isa_checks(job_cache)}
    kept = 0
    for check in isa_checks(mode_cache):
        if check.source in have or not _whole_elf(check.data):
            continue
        try:
            os.makedirs(os.path.join(job_cache, os.path.dirname(check.source)), exist_ok=True)
            with contextlib.suppress(FileExistsError):  # torch writes the source before it compiles
                _place(os.path.join(job_cache, check.source), check.code, 0o644)
            _place(os.path.join(job_cache, check.library), check.data, check.mode)
            kept += 1
        except OSError:
            continue  # the job's cache is not writable, or the library is there: left as it is
    return kept


def _whole_elf(data: bytes) -> bool:
    """A 64-bit little-endian ELF file whose section header table, which the linker writes last,
    ends within it."""
    if len(data) < 64 or data[:6] != b"\x7fELF\x02\x01":
        return False
    section_table = int.from_bytes(data[0x28:0x30], "little")
    entry_size, entries = int.from_bytes(data[0x3A:0x3C], "little"), int.from_bytes(data[0x3C:0x3E], "little")
    return 0 < section_table and section_table + entry_size * entries <= len(data)


def _place(path: str, data: bytes, mode: int) -> None:
    """`data` at `path`, whole or not at all: written under a temporary name beside it, then linked
    to `path` (FileExistsError where a file is there already: left as it is)."""
    temporary = f"{path}.cagtool-{os.getpid()}.tmp"
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.link(temporary, path)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
