"""The one writer of cagtool's files: replaced whole or not at all, confined to the run directory
they belong to, and a lock for read-modify-write updates.

Confined writes: a run directory can come from shared storage, another host or another user, and
anything in it may be a symbolic link planted there (`RUN/verify -> /home/you`,
`RUN/verification.json -> ~/.bashrc`). A write under a run (`root`) walks from `root` one
directory at a time by file descriptor (`openat` with O_NOFOLLOW), creating what is missing, and
refuses (UnreadableInput, exit 3) a link or a non-directory on the way or at the name written, so
no write lands outside `root` even if the tree changes while it runs. `root` itself is what the
user named and may be a link. A write that fails for the machine's reasons (a full or read-only
disk) is one line naming the path (CannotWrite, exit 2), never a bare OSError.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from cagtool.errors import CannotWrite, UnreadableInput

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


def _refused(path: Path, why: str) -> UnreadableInput:
    return UnreadableInput(f"{path} {why}: cagtool writes only inside the run directory, never through a link; refusing")


def cannot_write(path: Path | str, exc: OSError) -> CannotWrite:
    """The one line for a write the machine refused (ENOSPC, EROFS, EACCES...), naming the path."""
    return CannotWrite(f"cannot write {path}: {exc.strerror or exc}")


def _parts_under(root: Path, path: Path) -> tuple[str, ...]:
    try:
        parts = path.relative_to(root).parts
    except ValueError:
        raise _refused(path, f"is not under {root}") from None
    if ".." in parts or not parts:
        raise _refused(path, f"is not a file under {root}")
    return parts


def _open_dir(root: Path, parts: tuple[str, ...], create: bool) -> int:
    """A descriptor of `root/parts...`, each part a real directory (made when `create`)."""
    try:
        fd = os.open(root, os.O_RDONLY | _DIRECTORY | _CLOEXEC)
    except OSError as exc:
        raise cannot_write(root, exc) from None
    here = root
    try:
        for part in parts:
            here = here / part
            for _attempt in range(2):
                try:
                    child = os.open(part, os.O_RDONLY | _DIRECTORY | _NOFOLLOW | _CLOEXEC, dir_fd=fd)
                    break
                except FileNotFoundError:
                    if not create:
                        raise
                    try:
                        os.mkdir(part, dir_fd=fd)
                    except FileExistsError:
                        pass  # made meanwhile by another writer: opened (and checked) on the next try
                    except OSError as exc:
                        raise cannot_write(here, exc) from None
                except OSError as exc:
                    if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
                        kind = "is a symbolic link" if _is_link(fd, part) else "is not a directory"
                        raise _refused(here, kind) from None
                    raise cannot_write(here, exc) from None
            else:
                raise _refused(here, "is not a directory")
            os.close(fd)
            fd = child
        return fd
    except BaseException:
        os.close(fd)
        raise


def _is_link(dir_fd: int, name: str) -> bool:
    try:
        return stat.S_ISLNK(os.lstat(name, dir_fd=dir_fd).st_mode)
    except OSError:
        return False


def confined_dir(root: Path | str, path: Path | str) -> Path:
    """Make (or find) the directory `path` under `root`, refusing a link anywhere below `root`."""
    root, path = Path(root), Path(path)
    os.close(_open_dir(root, _parts_under(root, path), create=True))
    return path


def make_new_dir(root: Path | str, path: Path | str) -> Path:
    """Create `path` under `root`, which must not exist (FileExistsError): a directory this process
    alone made, e.g. one verification's re-runs while another verification of the run goes on."""
    root, path = Path(root), Path(path)
    parts = _parts_under(root, path)
    fd = _open_dir(root, parts[:-1], create=True)
    try:
        os.mkdir(parts[-1], dir_fd=fd)
    except FileExistsError:
        raise
    except OSError as exc:
        raise cannot_write(path, exc) from None
    finally:
        os.close(fd)
    return path


def check_confined(root: Path | str, path: Path | str) -> None:
    """Refuse now what a later `write_atomic(path, root=root)` would refuse (a link on the way or at
    `path`), before work whose result would have nowhere to go (a verification's re-runs)."""
    root, path = Path(root), Path(path)
    parts = _parts_under(root, path)
    fd = _open_dir(root, parts[:-1], create=True)
    try:
        if _is_link(fd, parts[-1]):
            raise _refused(path, "is a symbolic link")
    finally:
        os.close(fd)


def open_new(root: Path | str, path: Path | str) -> BinaryIO:
    """A new file `path` under `root`, opened for writing; an existing file or link there is refused."""
    root, path = Path(root), Path(path)
    parts = _parts_under(root, path)
    fd = _open_dir(root, parts[:-1], create=True)
    try:
        handle = os.open(parts[-1], os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC, 0o666, dir_fd=fd)
    except FileExistsError:
        raise _refused(path, "already exists") from None
    except OSError as exc:
        raise cannot_write(path, exc) from None
    finally:
        os.close(fd)
    return os.fdopen(handle, "wb")


def move_new(root: Path | str, source: Path | str, dest: Path | str) -> None:
    """Move the directory `source` to `dest`, a name that must not exist, both under `root`: a link
    or a non-directory at `source`, on the way to either, or anything already at `dest` is refused,
    and the move never follows a link (the parents are held by descriptor), so it stays inside `root`
    even if the tree changes while it runs."""
    root, source, dest = Path(root), Path(source), Path(dest)
    theirs, ours = _parts_under(root, source), _parts_under(root, dest)
    src_fd = _open_dir(root, theirs[:-1], create=False)
    try:
        dst_fd = _open_dir(root, ours[:-1], create=False)
        try:
            try:
                mode = os.lstat(theirs[-1], dir_fd=src_fd).st_mode
            except OSError as exc:
                raise cannot_write(source, exc) from None
            if not stat.S_ISDIR(mode):
                raise _refused(source, "is a symbolic link" if stat.S_ISLNK(mode) else "is not a directory")
            with contextlib.suppress(FileNotFoundError):
                os.lstat(ours[-1], dir_fd=dst_fd)
                raise _refused(dest, "already exists")
            try:
                os.rename(theirs[-1], ours[-1], src_dir_fd=src_fd, dst_dir_fd=dst_fd)
            except OSError as exc:
                if exc.errno in (errno.EEXIST, errno.ENOTEMPTY, errno.ENOTDIR, errno.EISDIR):
                    raise _refused(dest, "already exists") from None  # planted between the check and the move
                raise cannot_write(dest, exc) from None
        finally:
            os.close(dst_fd)
    finally:
        os.close(src_fd)


def move_in(root: Path | str, source: Path | str, dest: Path | str) -> None:
    """Move `source`, a file or folder of this user's own outside any run (a private staging
    folder, whose tree nobody else can change), to `dest` under `root`, a name that must not exist:
    renamed where both are on one filesystem, else copied by descriptor and removed. Either way
    `dest`'s folder is held by descriptor and everything is made anew there (O_EXCL, O_NOFOLLOW),
    so nothing lands outside `root` even if the run's tree changes meanwhile; files keep their
    mode and times (the columns sidecar knows its events file by size and time)."""
    import shutil

    root, source, dest = Path(root), Path(source), Path(dest)
    parts = _parts_under(root, dest)
    fd = _open_dir(root, parts[:-1], create=True)
    try:
        with contextlib.suppress(FileNotFoundError):
            os.lstat(parts[-1], dir_fd=fd)
            raise _refused(dest, "already exists")
        try:
            os.rename(source, parts[-1], dst_dir_fd=fd)
            return
        except OSError as exc:
            if exc.errno != errno.EXDEV:
                if exc.errno in (errno.EEXIST, errno.ENOTEMPTY, errno.ENOTDIR, errno.EISDIR):
                    raise _refused(dest, "already exists") from None  # planted between the check and the move
                raise cannot_write(dest, exc) from None
        try:
            _copy_in(source, fd, parts[-1])
        except FileExistsError:
            raise _refused(dest, "already exists") from None
        except OSError as exc:
            raise cannot_write(dest, exc) from None
        shutil.rmtree(source) if source.is_dir() else source.unlink()
    finally:
        os.close(fd)


def _copy_in(source: Path, dir_fd: int, name: str) -> None:
    """`source` (a file or folder, trusted) copied as `name` into the folder open as `dir_fd`."""
    st = os.lstat(source)
    if stat.S_ISDIR(st.st_mode):
        os.mkdir(name, 0o700, dir_fd=dir_fd)
        child = os.open(name, os.O_RDONLY | _DIRECTORY | _NOFOLLOW | _CLOEXEC, dir_fd=dir_fd)
        try:
            for entry in sorted(os.listdir(source)):
                _copy_in(source / entry, child, entry)
            os.chmod(child, stat.S_IMODE(st.st_mode))
            os.utime(child, ns=(st.st_atime_ns, st.st_mtime_ns))
        finally:
            os.close(child)
    elif stat.S_ISREG(st.st_mode):
        out = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC, 0o600, dir_fd=dir_fd)
        try:
            with open(source, "rb") as src:
                while block := src.read(1 << 20):
                    view = memoryview(block)
                    while view:
                        view = view[os.write(out, view):]
            os.chmod(out, stat.S_IMODE(st.st_mode))
            os.utime(out, ns=(st.st_atime_ns, st.st_mtime_ns))
        finally:
            os.close(out)
    # anything else (a socket a job left) is not part of a record: not copied


def write_atomic(path: Path | str, data: str | bytes, root: Path | str | None = None) -> None:
    """Replace `path` with `data` (str: UTF-8), or leave the old file as it was: a reader sees the
    previous content or this one, never half of one. The temporary file beside it is this
    writer's own (pid and random part: two processes writing the same file never share one) and
    is removed when the write fails (a partial one would only take more of a full disk).

    With `root` (the run directory `path` belongs to) the write is confined to it: the
    directories on the way are made as needed, and a link among them or at `path` is refused."""
    path = Path(path)
    payload = data.encode("utf-8") if isinstance(data, str) else data
    if root is None:
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
        try:
            with open(tmp, "xb") as handle:
                handle.write(payload)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise
        return
    parts = _parts_under(Path(root), path)
    name = parts[-1]
    fd = _open_dir(Path(root), parts[:-1], create=True)
    tmp = f".{name}.{os.getpid()}.{os.urandom(4).hex()}.tmp"
    try:
        if _is_link(fd, name):
            raise _refused(path, "is a symbolic link")
        try:
            handle = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC, 0o666, dir_fd=fd)
            with os.fdopen(handle, "wb") as out:
                out.write(payload)
            os.replace(tmp, name, src_dir_fd=fd, dst_dir_fd=fd)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=fd)
            if exc.errno in (errno.EISDIR, errno.ENOTEMPTY, errno.EEXIST):
                raise _refused(path, "is a directory") from None
            raise cannot_write(path, exc) from None
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=fd)
            raise
    finally:
        os.close(fd)


@contextlib.contextmanager
def locked(path: Path | str) -> Iterator[None]:
    """Hold an exclusive lock on `<path>.lock` (created beside `path`, kept there): two processes
    that read `path`, change it and write it back one after the other, never interleaved. Where
    the platform has no flock, the block runs unlocked."""
    try:
        import fcntl
    except ImportError:  # Windows
        yield
        return
    lock_path = Path(path).with_name(Path(path).name + ".lock")
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "a") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
