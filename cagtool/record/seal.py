"""What `cagtool run` recorded about the job it ran, sealed so that `recompiles --verify`, which runs
the job again, runs only a job this user's cagtool recorded, on files that have not changed since.

A run directory is data: it may come from shared storage, another host or another user, and
anyone who can write it can edit run.json to name another script, arguments or working directory.
A hash of the script kept in run.json alone would be edited along with them, so the record of the
job (target, its argv, cwd, the run options a re-run repeats, and the SHA-256 of every file of the
job that is named: the script, the module's file, an argument that is a Python file, as torchrun's
`train.py`) is sealed with an HMAC-SHA256 under a key that only this user has
(`$XDG_STATE_HOME/cagtool/record.key`, else `~/.local/state/cagtool/record.key`, made on first use,
mode 0600). `--verify` recomputes both: a record without a seal, with one this key did not make
(another user's or host's, or edited), or whose files changed since, is refused with one line
(exit 3), before anything runs.

What cagtool writes beside a record and shows later as its own measurement (`verification.json`,
"verified by re-running this job") is sealed under the same key (`with_document_seal`): a run
handed over with a forged one (a PR's artifact saying VERIFIED with a diff of the forger's choosing)
is not shown as a verification (`document_sealed`).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import stat
from pathlib import Path
from typing import Any

from cagtool.errors import UnreadableInput

SEAL_VERSION = 1
# The run options a re-run repeats (verify/verification.py, rerun_argv): each one decides what runs.
SEALED_OPTIONS = ("backend", "dynamic", "steps", "max_time", "warm_cache")
KEY_FILE_ENV = "CAGTOOL_RECORD_KEY"  # another key file (tests: "another user's key")


def key_path() -> Path:
    override = os.environ.get(KEY_FILE_ENV)
    if override:
        return Path(override)
    state = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(state) / "cagtool" / "record.key"


def _key(create: bool) -> bytes | None:
    path = key_path()
    try:
        with open(path, "rb") as handle:
            key = handle.read()
        return key if len(key) >= 32 else None
    except FileNotFoundError:
        if not create:
            return None
    except OSError:
        return None
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    except FileExistsError:  # made meanwhile by another run
        return _key(create=False)
    except OSError:
        return None  # no home to keep a key in: the record is unsealed and cannot be verified
    key = os.urandom(32)
    with os.fdopen(fd, "wb") as handle:
        handle.write(key)
    return key


def _sha256(path: str) -> str | None:
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    except OSError:
        return None
    return digest.hexdigest()


def sealed_bytes(seal: Any, path: str) -> bytes:
    """The bytes of a file the seal holds, read once now, refused (UnreadableInput, exit 3) unless
    their SHA-256 is the sealed one: what `--verify` builds a patched copy from is what was checked,
    not what the path holds a moment after check_job read it. A path that is no regular file (a
    FIFO swapped in) is refused without waiting on it."""
    path = os.path.abspath(path)
    files = seal.get("files") if isinstance(seal, dict) else None
    digest = files.get(path) if isinstance(files, dict) else None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise UnreadableInput(f"{path} cannot be read ({exc.strerror or exc}): --verify runs only the script the run recorded; record it again") from None
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            raise UnreadableInput(f"{path} is no longer a regular file: --verify runs only the script the run recorded; record it again")
        data = handle.read()
    if not isinstance(digest, str) or not hmac.compare_digest(hashlib.sha256(data).hexdigest(), digest):
        raise UnreadableInput(f"{path} changed since the run was recorded: --verify runs only the script the run recorded; record it again")
    return data


def job_files(target: dict[str, str], argv: list[str], cwd: str, module_origin: str | None) -> dict[str, str | None]:
    """The files of the job by the path they were found at (absolute), each with its SHA-256."""
    names: list[str] = []
    if target.get("kind") == "script":
        names.append(os.path.join(cwd, target.get("name", "")))
    elif module_origin:
        names.append(module_origin)
    for arg in argv[1:]:
        if arg.endswith(".py") and os.path.isfile(os.path.join(cwd, arg)):
            names.append(os.path.join(cwd, arg))
    return {os.path.abspath(name): _sha256(name) for name in dict.fromkeys(names)}


def sealed_module_file(files: dict[str, Any], module: str) -> tuple[str, str] | None:
    """(path, SHA-256) of the file a `-m module` job ran, among the sealed `files`: the first one
    (job_files puts it first) whose path ends as the module's file does (`pkg/mod.py`, or
    `pkg/__main__.py` for a package)."""
    relative = module.replace(".", os.sep)
    endings = (os.sep + relative + ".py", os.sep + relative + os.sep + "__main__.py")
    for path, digest in files.items():
        if isinstance(digest, str) and path.endswith(endings):
            return path, digest
    return None


def _payload(target: dict[str, str], argv: list[str], cwd: str, options: dict[str, Any], files: dict[str, str | None]) -> bytes:
    body = {
        "version": SEAL_VERSION, "target": {"kind": target.get("kind"), "name": target.get("name")}, "argv": list(argv), "cwd": cwd,
        "options": {name: options.get(name) for name in SEALED_OPTIONS}, "files": files,
    }
    return json.dumps(body, sort_keys=True, default=str).encode("utf-8")


def seal_job(target: dict[str, str], argv: list[str], cwd: str, options: dict[str, Any], module_origin: str | None = None) -> dict[str, Any] | None:
    """The seal `cagtool run` writes into run.json (`job_seal`); None without a key."""
    key = _key(create=True)
    if key is None:
        return None
    files = job_files(target, argv, cwd, module_origin)
    mac = hmac.new(key, _payload(target, argv, cwd, options, files), hashlib.sha256).hexdigest()
    return {"version": SEAL_VERSION, "files": files, "hmac": mac}


def _document_bytes(document: dict[str, Any]) -> bytes:
    return json.dumps(document, sort_keys=True, separators=(",", ":"), default=str).encode("utf-8")


def with_document_seal(document: dict[str, Any]) -> dict[str, Any]:
    """`document` with its `seal` (HMAC-SHA256 under this user's key, over its canonical JSON);
    as it is where there is no key to make one (no home: it will not be shown)."""
    key = _key(create=True)
    if key is None:
        return document
    return {**document, "seal": {"version": SEAL_VERSION, "hmac": hmac.new(key, _document_bytes(document), hashlib.sha256).hexdigest()}}


def document_sealed(document: dict[str, Any]) -> bool:
    """Whether `document` (as read back from its JSON) carries a seal this user's key made over the
    rest of it: written by this user's cagtool and unchanged since."""
    seal = document.get("seal")
    key = _key(create=False)
    if not isinstance(seal, dict) or not isinstance(seal.get("hmac"), str) or key is None:
        return False
    rest = {name: value for name, value in document.items() if name != "seal"}
    return hmac.compare_digest(hmac.new(key, _document_bytes(rest), hashlib.sha256).hexdigest(), seal["hmac"])


def check_job(run_path: Path, seal: Any, target: dict[str, str], argv: list[str], cwd: str, options: dict[str, Any]) -> None:
    """Refuse (UnreadableInput, exit 3) to run the job `run_path` records unless this user's cagtool
    recorded it as it reads now and its files are unchanged (`seal`: run.json's `job_seal`)."""
    where = f"{run_path}/run.json"
    if not isinstance(seal, dict) or not isinstance(seal.get("files"), dict) or not isinstance(seal.get("hmac"), str):
        raise UnreadableInput(f"{where} has no seal of the job it ran (not recorded by `cagtool run` of this version): --verify runs only a job cagtool recorded; record it again")
    key = _key(create=False)
    files = seal["files"]
    expected = hmac.new(key, _payload(target, argv, cwd, options, files), hashlib.sha256).hexdigest() if key else ""
    if not key or not hmac.compare_digest(expected, seal["hmac"]):
        raise UnreadableInput(f"{where} was not recorded by your cagtool as it reads now (edited, or another user's or host's record): --verify runs only a job you recorded; record it again")
    for path, digest in files.items():
        now = _sha256(path)
        if digest is None or now != digest:
            said = "is gone" if now is None else "changed since the run was recorded"
            raise UnreadableInput(f"{path} {said}: --verify runs only the script the run recorded; record it again")
