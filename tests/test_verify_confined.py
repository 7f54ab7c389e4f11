"""`recompiles --explain --verify` on records it must not trust: links planted in the run, a forged
run.json, another user's record, a changed script; and the re-runs' own paths: a relative RUN from
another directory, two verifications of one run at once, a job that reads stdin, a read-only or
full disk. Real `cagtool run` records of a real torch job, the real CLI in its own process."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import ROOT, cagtool_cmd, cagtool_in_process, can_mount_tmpfs, recorded_once

pytestmark = pytest.mark.slow

SHAPE_LOOP = ROOT / "sample_scripts" / "shape_loop.py"


def _record(job: Path, run: Path, script: Path = SHAPE_LOOP, stdin: str | None = None) -> None:
    job.mkdir(parents=True, exist_ok=True)
    shutil.copy(script, job / script.name)
    proc = subprocess.run(cagtool_cmd("run", "--modes", "ca", "--backend", "eager", "--no-report", "-o", str(run), script.name),
                          cwd=str(job), input=stdin, capture_output=True, text=True, env={**os.environ, "CI": "true"}, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> Path:
    """A ca run of the shape loop (one CA recompile: ca-dynamic applies), recorded from its own
    working directory `job/`; each test gets its own copy of the run."""
    base, _ = recorded_once(tmp_path_factory, "verify-confined", lambda base: _record(base / "job", base / "run"))
    return base / "run"


def _verify(run: Path | str, cwd: Path, *extra: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(cagtool_cmd("recompiles", str(run), "--explain", "--verify", "--repeat", "1", "--fix", "ca-dynamic", *extra),
                          cwd=str(cwd), capture_output=True, text=True, env={**os.environ, "CI": "true", **(env or {})}, timeout=600)


def _run_copy(recorded: Path, tmp_path: Path, name: str = "run") -> Path:
    return Path(shutil.copytree(recorded, tmp_path / name, symlinks=True))


def _one_error_line(proc: subprocess.CompletedProcess) -> str:
    errors = [line for line in proc.stderr.splitlines() if line.startswith("cagtool: error:")]
    assert len(errors) == 1 and "Traceback" not in proc.stderr and "internal error" not in proc.stderr, proc.stderr[-3000:]
    return errors[0]


def test_links_planted_in_the_run_are_refused_before_anything_runs(recorded, tmp_path):
    """RUN/verification.json -> a victim file, RUN/verify -> a directory elsewhere: exit 3 naming
    the link, the victim unchanged, nothing written elsewhere, no re-run started."""
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()

    run = _run_copy(recorded, tmp_path, "one")
    (run / "verification.json").symlink_to(victim)
    proc = _verify(run, tmp_path)
    assert proc.returncode == 3 and "verification.json is a symbolic link" in _one_error_line(proc)
    assert "baseline:" not in proc.stderr  # refused before the first re-run
    assert victim.read_text() == "precious\n"

    run = _run_copy(recorded, tmp_path, "two")
    (run / "verify").symlink_to(elsewhere, target_is_directory=True)
    proc = _verify(run, tmp_path)
    assert proc.returncode == 3 and "verify is a symbolic link" in _one_error_line(proc)
    assert list(elsewhere.iterdir()) == [] and victim.read_text() == "precious\n"


def test_the_verify_folder_swapped_for_a_link_while_the_reruns_run_takes_nothing_outside(recorded, tmp_path):
    """`RUN/verify/<stamp>` renamed and a link to a folder elsewhere put in its place as soon as it
    appears (while the baseline re-run starts: a re-run is a `cagtool run -o DIR` whose processes
    write by path): the re-runs record in a private folder and are moved into the run by
    descriptor, so nothing lands in the folder elsewhere; the link is refused (exit 3, one line),
    and what the re-runs made stays in the private folder (under TMPDIR), which the line names."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    run = _run_copy(recorded, tmp_path, "swapped")
    swapper = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import os, sys, time
        verify, elsewhere = {str(run / "verify")!r}, {str(elsewhere)!r}
        deadline, seen = time.monotonic() + 300, None
        while time.monotonic() < deadline:
            stamps = [n for n in os.listdir(verify) if not n.endswith(".real")] if os.path.isdir(verify) else []
            if stamps and seen is None:
                seen = time.monotonic()
            # Once the baseline's output files are there (the re-run is starting), or 2 s after the
            # folder was claimed (they are made elsewhere): past the checks made before any re-run.
            if stamps and (os.path.exists(os.path.join(verify, stamps[0], "baseline.stderr")) or time.monotonic() - seen > 2):
                stamp = os.path.join(verify, stamps[0])
                os.rename(stamp, stamp + ".real")
                os.symlink(elsewhere, stamp)
                print("swapped", flush=True)
                sys.exit(0)
            time.sleep(0.001)
        sys.exit(1)
        """)], stdout=subprocess.PIPE, text=True)
    private = tmp_path / "tmpdir"
    private.mkdir()
    try:
        proc = _verify(run, tmp_path, env={"TMPDIR": str(private)})
    finally:
        out, _ = swapper.communicate(timeout=300)
    assert out.strip() == "swapped"
    assert list(elsewhere.iterdir()) == [], sorted(p.relative_to(elsewhere) for p in elsewhere.rglob("*"))
    line = _one_error_line(proc)
    assert proc.returncode == 3 and "is a symbolic link" in line, proc.stderr[-3000:]
    # What the re-runs made is not lost: kept in the private folder, which the line names.
    [kept] = list(private.iterdir())
    assert f"are kept in {kept} instead" in line and (kept / "baseline" / "run.json").is_file(), line


def test_a_forged_or_foreign_record_never_runs(recorded, tmp_path):
    """run.json edited to name another script (evil.py, which would leave a mark) in another cwd,
    or a record sealed with another user's key: refused with one line, exit 3; evil.py never ran."""
    evil_dir = tmp_path / "evil"
    evil_dir.mkdir()
    mark = tmp_path / "evil-ran"
    (evil_dir / "evil.py").write_text(f"open({str(mark)!r}, 'a').write('ran\\n')\n")
    run = _run_copy(recorded, tmp_path, "forged")
    meta = json.loads((run / "run.json").read_text())
    meta["target"]["name"], meta["target_argv"], meta["cwd"] = "evil.py", ["evil.py"], str(evil_dir)
    (run / "run.json").write_text(json.dumps(meta))
    proc = _verify(run, tmp_path)
    assert proc.returncode == 3 and "was not recorded by your cagtool as it reads now" in _one_error_line(proc)

    # The attacker recomputes the file hash in the seal too: without the key, the HMAC still differs.
    import hashlib
    meta["job_seal"]["files"] = {str(evil_dir / "evil.py"): hashlib.sha256((evil_dir / "evil.py").read_bytes()).hexdigest()}
    (run / "run.json").write_text(json.dumps(meta))
    assert _verify(run, tmp_path).returncode == 3

    unsealed = _run_copy(recorded, tmp_path, "unsealed")
    meta = json.loads((unsealed / "run.json").read_text())
    del meta["job_seal"]
    (unsealed / "run.json").write_text(json.dumps(meta))
    proc = _verify(unsealed, tmp_path)
    assert proc.returncode == 3 and "has no seal" in _one_error_line(proc)

    foreign = _run_copy(recorded, tmp_path, "foreign")  # as another user or host reads it: another key
    proc = _verify(foreign, tmp_path, env={"CAGTOOL_RECORD_KEY": str(tmp_path / "another-users.key")})
    assert proc.returncode == 3 and "another user's or host's record" in _one_error_line(proc)
    assert not mark.exists()
    assert not (run / "verify").exists() and not (unsealed / "verify").exists()


def test_a_forged_pgo_suggestion_or_guard_name_never_reaches_the_terminal_or_a_re_runs_environment(recorded, tmp_path):
    """The events and mode manifests are not sealed: a record edited to carry torch's PGO words
    with a line break, a terminal escape and a NUL, and a Dynamo size guard naming such a tensor,
    offered `torch-pgo` and `dynamic-sources` fixes whose environment held them (a fake `::error`
    line and a title change on the terminal; the NUL stopped the verification with an internal
    error). torch writes neither: no such fix is offered, nothing of them is printed."""
    run = _run_copy(recorded, tmp_path)
    manifest = run / "ca" / "manifest.json"
    data = json.loads(manifest.read_text())
    data["options"]["pgo_suggestion"] = ("PGO detected. set environment variable TORCH_COMPILE_DYNAMIC_SOURCES="
                                         "\"L['x']\x1b]0;PWNED\x07\n::error title=gate::all checks passed\x00\"")
    manifest.write_text(json.dumps(data))
    events = run / "ca" / "events.jsonl"
    lines = []
    for line in events.read_text().splitlines():
        event = json.loads(line)
        if event["kind"] == "dynamo_recompile":  # a forward frame's size guard, on a forged tensor name
            event.update(compile_id="0/1", is_ca_graph=False,
                         reasons=["0/0: tensor 'x\x00\x1b]0;PWNED\x07' size mismatch at index 0. expected 32, actual 48"])
        lines.append(json.dumps(event))
    events.write_text("\n".join(lines) + "\n")
    for fix in ("torch-pgo", "dynamic-sources"):
        proc = subprocess.run(cagtool_cmd("recompiles", str(run), "--explain", "--verify", "--repeat", "1", "--fix", fix),
                              cwd=str(tmp_path), capture_output=True, text=True, env={**os.environ, "CI": "true"}, timeout=600)
        assert proc.returncode == 2 and "no such fix applies" in _one_error_line(proc) and "applicable: ca-dynamic)" in proc.stderr, proc.stderr
        assert not (run / "verify").exists()
    shown = subprocess.run(cagtool_cmd("recompiles", str(run), "--explain"), cwd=str(tmp_path), capture_output=True, text=True,
                           env={**os.environ, "CI": "true"}, timeout=600)
    assert shown.returncode == 0, shown.stderr
    assert not any(c in shown.stdout + shown.stderr for c in "\x00\x07\x1b") and "::error" not in shown.stdout


def test_a_script_changed_after_the_seal_was_checked_never_runs(tmp_path):
    """The script is changed after verify checked it against the seal and before the baseline
    re-run reads it (the progress line is said between the two): the re-run refuses it, nothing of
    it runs, and the verification is exit 3, one line naming the script."""
    from cagtool.errors import UnreadableInput
    from cagtool.verify.fixes import Fix
    from cagtool.verify.verification import verify

    _record(tmp_path / "job", tmp_path / "run")
    script = tmp_path / "job" / SHAPE_LOOP.name
    mark = tmp_path / "changed-ran"

    def change_the_script(line: str) -> None:
        if line.startswith("baseline:"):
            script.write_text(f"open({str(mark)!r}, 'w').write('ran')\n")

    with pytest.raises(UnreadableInput, match=f"{SHAPE_LOOP.name} changed after `recompiles --verify` checked it: not run; record"):
        verify(tmp_path / "run", "ca", [Fix("ca-dynamic", "sizes dynamic", (1,), run_flags=("--dynamic",))], repeat=1,
               progress=change_the_script)
    assert not mark.exists()


def test_a_script_swapped_between_the_seal_check_and_the_patch_is_never_patched_or_run(tmp_path, monkeypatch):
    """A writer of the project folder swaps the script right after `--verify` checked it against
    the seal (inotify says when it was read) and puts it back before each later check: the patched
    copy `hook-before-loop` runs is made of the bytes that were checked, or nothing runs (exit 3).
    Before, the patch read the script again by path and the re-run ran the swapped code."""
    import cagtool.record.seal as seal
    import cagtool.verify.verification as verification

    _record(tmp_path / "job", tmp_path / "run", script=ROOT / "sample_scripts" / "hook_added_midrun.py")
    script = tmp_path / "job" / "hook_added_midrun.py"
    good, mark = script.read_text(), tmp_path / "swapped-ran"
    real, calls = seal.check_job, []

    def swapping(*args, **kwargs):
        script.write_text(good)
        real(*args, **kwargs)
        calls.append(1)
        if len(calls) == 1:
            script.write_text(f"open({str(mark)!r}, 'w').write('ran')\n" + good)

    monkeypatch.setattr(seal, "check_job", swapping)
    monkeypatch.setattr(verification, "check_job", swapping)
    proc = cagtool_in_process("recompiles", str(tmp_path / "run"), "--explain", "--verify", "--repeat", "1", "--fix", "hook-before-loop",
                              env={"CI": "true"})
    assert proc.returncode == 3, proc.stderr[-3000:]
    assert _one_error_line(proc).endswith("hook_added_midrun.py changed since the run was recorded: --verify runs only the script the run "
                                          "recorded; record it again")
    assert not mark.exists() and not (tmp_path / "run" / "verify").exists()


def test_a_modules_file_changed_after_the_seal_was_checked_never_runs(tmp_path):
    """`cagtool run -m shape_loop`: the module's file, as the run found it, is sealed and checked
    like a script. Unchanged, the verification re-runs it (baseline and fix); changed after the
    check and before the baseline re-run reads it, the re-run refuses it: exit 3, one line naming
    the file, none of it run."""
    from cagtool.errors import UnreadableInput
    from cagtool.verify.fixes import Fix
    from cagtool.verify.verification import VERIFIED, verify

    job = tmp_path / "job"
    job.mkdir()
    module = job / SHAPE_LOOP.name
    shutil.copy(SHAPE_LOOP, module)
    proc = subprocess.run(cagtool_cmd("run", "--modes", "ca", "--backend", "eager", "--no-report", "-o", str(tmp_path / "run"), "-m", "shape_loop"),
                          cwd=str(job), capture_output=True, text=True, env={**os.environ, "CI": "true"}, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    fix = Fix("ca-dynamic", "sizes dynamic", (1,), run_flags=("--dynamic",))
    result = verify(tmp_path / "run", "ca", [fix], repeat=1)
    assert result.baseline is not None and result.baseline.status == "finished" and result.fixes[0].verdict == VERIFIED, result.fixes[0].reasons
    mark = tmp_path / "changed-ran"

    def change_the_module(line: str) -> None:
        if line.startswith("baseline:"):
            module.write_text(f"open({str(mark)!r}, 'w').write('ran')\n")

    with pytest.raises(UnreadableInput) as refused:
        verify(tmp_path / "run", "ca", [fix], repeat=1, progress=change_the_module)
    said = str(refused.value)
    assert refused.value.exit_code == 3 and "\n" not in said
    assert said == f"{module} changed after `recompiles --verify` checked it: not run; record the run again"
    assert not mark.exists()


def test_a_relative_run_from_elsewhere_and_two_verifications_at_once(recorded, tmp_path):
    """Two verifications of one run, started together from another directory with a relative RUN:
    each has its own re-runs under RUN/verify/ (none under the recorded cwd), both exit 0, and
    both read the same verdict with its reasons (the re-runs of one never read the other's)."""
    run = _run_copy(recorded, tmp_path / "records", "run")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    relative = os.path.relpath(run, elsewhere)
    job_dir = Path(json.loads((run / "run.json").read_text())["cwd"])
    before = sorted(p.name for p in job_dir.iterdir())
    cmd = cagtool_cmd("recompiles", relative, "--explain", "--verify", "--repeat", "1", "--fix", "ca-dynamic", "--format", "json")
    env = {**os.environ, "CI": "true"}
    procs = [subprocess.Popen(cmd, cwd=str(elsewhere), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) for _ in range(2)]
    outputs = [p.communicate(timeout=900) for p in procs]
    for proc, (_out, err) in zip(procs, outputs):
        assert proc.returncode == 0, err[-3000:]
    verdicts = [json.loads(out)["verification"]["fixes"][0] for out, _err in outputs]
    for fix in verdicts:
        # Dynamo still recompiles the backward graph's code on the next size: partly verified.
        assert fix["verdict"] == "partly verified" and fix["reasons"] and fix["reasons"][0] == "recompiles 2 -> 1", fix
        assert fix["reasons"][-1] == "cause #1 is still there (1 recompile in the re-run)", fix
    runs = {fix["measured"]["run"] for fix in verdicts}
    assert len(runs) == 2 and all(Path(r).is_absolute() and Path(r).parent.parent == run / "verify" for r in runs)
    assert sorted(p.name for p in job_dir.iterdir()) == before  # no stray run under the recorded cwd
    assert list(elsewhere.iterdir()) == []


def test_a_job_that_reads_stdin_fails_its_baseline_and_says_so_not_the_fix(tmp_path):
    """The re-runs read /dev/null: a job that needs a line on stdin fails without any fix. The
    verification says the baseline itself failed and why (exit 1), and judges no fix. Then the
    script is edited: the record no longer names the script that would run, and is refused."""
    script = tmp_path / "shape_loop_reads_stdin.py"
    script.write_text("name = input()\n" + SHAPE_LOOP.read_text())
    _record(tmp_path / "job", tmp_path / "run", script, stdin="first\n")
    proc = _verify(tmp_path / "run", tmp_path)
    line = _one_error_line(proc)
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "the baseline re-run itself failed" in line and "EOFError" in line and "read no stdin" in line
    assert "cagtool: baseline: run" in proc.stderr and "cagtool: ca-dynamic: run" not in proc.stderr  # no fix run or judged
    assert not (tmp_path / "run" / "verification.json").exists()

    with open(tmp_path / "job" / script.name, "a") as handle:
        handle.write("# edited after the run\n")
    proc = _verify(tmp_path / "run", tmp_path)
    assert proc.returncode == 3 and "changed since the run was recorded" in _one_error_line(proc)


@pytest.mark.parametrize("disk", ["read-only", "full"])
def test_verify_on_a_read_only_or_full_disk_is_one_line_naming_the_path(recorded, tmp_path, disk):
    mount = tmp_path / "small"
    if not can_mount_tmpfs(mount):
        pytest.skip("needs root to mount a small tmpfs (a real full or read-only disk)")
    try:
        subprocess.run(["mount", "-o", "remount,size=4m", str(mount)], check=True)
        run = _run_copy(recorded, mount)
        if disk == "read-only":
            subprocess.run(["mount", "-o", "remount,ro", str(mount)], check=True)
        else:
            with open(mount / "filler", "wb") as handle:
                try:
                    while True:
                        handle.write(b"\0" * 65536)
                except OSError:
                    pass
        proc = _verify(run, tmp_path)
        line = _one_error_line(proc)
        assert proc.returncode == 2, proc.stderr[-3000:]
        assert str(run) in line and ("Read-only file system" if disk == "read-only" else "No space left") in line, line
    finally:
        subprocess.run(["umount", str(mount)], check=False)


def test_a_module_in_the_working_directory_is_never_run_as_cagtool(tmp_path):
    """A `cagtool.py` or a `json.py` in the working directory (the user's own helpers, or files
    planted in a project a verification re-runs in), the script in a folder below it:
    `python -m cagtool...` would import them in cagtool's place or in its own imports' (the current
    directory comes first), where `python jobs/train.py` never would (its sys.path[0] is jobs/).
    Through the `cagtool` command, as a user types it there, neither the run's mode process nor the
    verification's re-runs import them."""
    command = Path(sys.executable).parent / "cagtool"  # the console script pip installed
    if not command.is_file():
        pytest.skip("no cagtool console script beside this python (pip install the package)")
    marker = tmp_path / "planted-ran"
    job = tmp_path / "job"
    (job / "jobs").mkdir(parents=True)
    shutil.copy(SHAPE_LOOP, job / "jobs" / SHAPE_LOOP.name)
    script = f"jobs/{SHAPE_LOOP.name}"
    for name in ("cagtool.py", "json.py"):
        (job / name).write_text(f"open({str(marker)!r}, 'a').write({name!r} + ' imported\\n')\nraise SystemExit(7)\n")
    env = {**os.environ, "CI": "true"}
    plain = subprocess.run([sys.executable, script], cwd=str(job), capture_output=True, text=True, env=env, timeout=600)
    assert plain.returncode == 0 and not marker.exists(), plain.stderr[-2000:]
    run = subprocess.run([str(command), "run", "--modes", "ca", "--backend", "eager", "--no-report", "-o", str(tmp_path / "run"), script],
                         cwd=str(job), capture_output=True, text=True, env=env, timeout=600)
    assert run.returncode == 0 and not marker.exists(), (run.stderr[-3000:], marker.exists() and marker.read_text())
    verify = subprocess.run([str(command), "recompiles", str(tmp_path / "run"), "--explain", "--verify", "--repeat", "1", "--fix", "ca-dynamic"],
                            cwd=str(job), capture_output=True, text=True, env=env, timeout=600)
    assert verify.returncode in (0, 1), verify.stderr[-3000:]
    assert "ca-dynamic" in verify.stdout and not marker.exists()


def test_a_link_planted_where_a_repetition_is_folded_is_refused_and_nothing_leaves_the_run(tmp_path):
    """`--repeat K` folds each later run of a side into the side's record as `<mode>.<k>`: a link
    planted at that name while the verification ran (or a folder there) is refused in one line
    (exit 3), the link's target gets nothing, and the run that could not be folded is kept."""
    from cagtool.errors import UnreadableInput
    from cagtool.verify.verification import _fold

    run, elsewhere = tmp_path / "run", tmp_path / "elsewhere"
    side, single = run / "verify" / "stamp" / "baseline", run / "verify" / "stamp" / "baseline.2"
    (side / "ca").mkdir(parents=True)
    (single / "ca").mkdir(parents=True)
    elsewhere.mkdir()
    meta = {"status": "finished", "exit_code": 0, "modes": ["ca"], "mode_exit_codes": {"ca": 0}}
    (side / "run.json").write_text(json.dumps(meta))
    (single / "run.json").write_text(json.dumps(meta))
    (single / "ca" / "steps.jsonl").write_text("{}\n")
    (side / "ca.2").symlink_to(elsewhere, target_is_directory=True)
    with pytest.raises(UnreadableInput, match=r"baseline/ca\.2 already exists: cagtool writes only inside the run directory"):
        _fold(run, side, single, "ca", 2)
    assert list(elsewhere.iterdir()) == [] and (single / "ca" / "steps.jsonl").is_file()
    assert json.loads((side / "run.json").read_text())["modes"] == ["ca"]
    (side / "ca.2").unlink()
    _fold(run, side, single, "ca", 2)
    assert json.loads((side / "run.json").read_text())["modes"] == ["ca", "ca.2"]
    assert (side / "ca.2" / "steps.jsonl").is_file() and not single.exists()


@pytest.mark.parametrize("raised", ["usage", "interrupt"])
def test_a_refused_move_after_an_error_keeps_the_error_and_says_what_stayed_behind(tmp_path, capsys, raised):
    # The re-runs' folder moved into the run when the block ends however it ends: where the move is
    # refused (a name planted in the run meanwhile) while the block's own error is in flight, that
    # error is the one raised, with the refusal said too, not replaced by it.
    from cagtool.errors import UnreadableInput, UsageError
    from cagtool.verify.verification import private_reruns

    run_dir = tmp_path / "run"
    root = run_dir / "verify" / "stamp"
    root.mkdir(parents=True)
    (root / "baseline").symlink_to(tmp_path)  # planted where the re-run's folder goes
    error = UsageError("the baseline re-run failed") if raised == "usage" else KeyboardInterrupt()
    with pytest.raises(type(error)) as caught:
        with private_reruns(run_dir, root) as (work, _):
            (work / "baseline").mkdir()
            (work / "baseline" / "events.jsonl").write_text("{}\n")
            raise error
    kept = [line for line in (str(caught.value), capsys.readouterr().err) if "are kept in" in line]
    assert len(kept) == 1 and "baseline" in kept[0], (str(caught.value), kept)
    if raised == "usage":
        assert str(caught.value).startswith("the baseline re-run failed; then ")
    staged = Path(kept[0].rsplit("are kept in ", 1)[1].split()[0].rstrip("."))
    assert (staged / "baseline" / "events.jsonl").is_file()  # nothing the re-runs made is lost
    assert os.readlink(root / "baseline") == str(tmp_path)
    shutil.rmtree(staged)
    with pytest.raises(UnreadableInput):  # and with no error in flight, the refusal is the error
        with private_reruns(run_dir, root) as (work, _):
            (work / "baseline").mkdir()
    shutil.rmtree(work, ignore_errors=True)
