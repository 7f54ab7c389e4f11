"""Every mode runs the script in the job's working directory, as python would: files one mode
writes there (a checkpoint the job resumes from) are there for the next. cagtool lists the
directory before each mode (capture/run/workdir.py) and the comparison names what a mode found."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, cagtool_cmd, cli_in_process

from cagtool.capture.run.workdir import MAX_DEPTH, list_workdir, set_aside, written_since

SCRIPT = Path(__file__).parent / "scripts" / "resumes_from_snapshot.py"


@pytest.mark.slow
def test_a_job_resuming_from_the_snapshot_an_earlier_mode_wrote_is_named_not_called_unseeded(tmp_path):
    out = tmp_path / "run"
    proc = subprocess.run(cagtool_cmd("run", "--modes", "eager,ca", "--backend", "eager", "--no-report", "-o", str(out), str(SCRIPT)),
                          cwd=tmp_path, capture_output=True, text=True, timeout=600, env={**os.environ, "CI": "true"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "resuming from epoch 3" in proc.stdout  # the ca mode did resume: the job's own doing
    meta = json.loads((out / "run.json").read_text())
    assert meta["written_before"] == {"ca": {"paths": ["snapshot.pt"], "count": 1}}
    code, text, _ = cli_in_process("compare", str(out), env={"CI": "true"}, cwd=tmp_path)
    flat = " ".join(text.split())
    assert "numerics not comparable: ca started from files an earlier mode wrote (snapshot.pt)" in flat
    assert "Numerics: ca started after an earlier mode wrote snapshot.pt in the job's working directory" in flat
    assert "unseeded" not in flat.split("gradients:")[0]
    # The gradients' check names the same cause, not the generic list of other inputs.
    gradients = flat.split("gradients:")[1]
    # (one pair, one reason: said once, in the gradients' line)
    assert "nothing compared (ca vs eager): not comparable: inputs differ" in gradients, gradients
    assert "it started after an earlier mode wrote snapshot.pt in the job's working directory" in gradients
    assert "unseeded" not in gradients
    # The ca mode's process opened snapshot.pt (torch.load), and it is the file that decides: a
    # mode that read none of the files an earlier mode wrote did not resume from them.
    manifest_path = out / "ca" / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    assert manifest["options"]["workdir_reads"] == ["snapshot.pt"]
    manifest["options"]["workdir_reads"] = []
    manifest_path.write_text(json.dumps(manifest))
    code, text, _ = cli_in_process("compare", str(out), env={"CI": "true"}, cwd=tmp_path)
    flat = " ".join(text.split())
    assert code == 0 and "earlier mode wrote" not in flat and "numerics not comparable: inputs differ (unseeded?)" in flat, flat
    # A forged record: a name with an escape sequence is shown as text; a wrong type is refused.
    manifest["options"]["workdir_reads"] = ["\x1b[31mred.pt"]
    manifest_path.write_text(json.dumps(manifest))
    meta["written_before"] = {"ca": {"paths": ["\x1b[31mred.pt"], "count": 1}}
    (out / "run.json").write_text(json.dumps(meta))
    code, text, _ = cli_in_process("compare", str(out), env={"CI": "true"}, cwd=tmp_path)
    assert code == 0 and "\x1b" not in text and "started from files an earlier mode wrote (" in " ".join(text.split())
    meta["written_before"] = {"ca": "snapshot.pt"}
    (out / "run.json").write_text(json.dumps(meta))
    code, _, err = cli_in_process("compare", str(out), env={"CI": "true"}, cwd=tmp_path)
    assert code == 3 and "written_before" in err and "Traceback" not in err


@pytest.mark.slow
def test_a_mode_that_resumed_at_the_jobs_end_trained_nothing_and_agrees_in_nothing(tmp_path):
    """A job that snapshots after its last epoch too (pytorch/examples' minGPT-ddp, save_every 1):
    the ca mode resumes at the end and trains no step. Its final norms are eager's (loaded), so
    compare read "losses and final norms agree with eager" and named no resume (that rule looked
    for losses that differ). It says the mode started from the snapshot and trained no step, and
    the speedup says why there is none."""
    out = tmp_path / "run"
    proc = subprocess.run(cagtool_cmd("run", "--modes", "eager,ca", "--backend", "eager", "--no-report", "-o", str(out), str(SCRIPT),
                                      "--save-last"), cwd=tmp_path, capture_output=True, text=True, timeout=600, env={**os.environ, "CI": "true"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "resuming from epoch 4" in proc.stdout
    code, text, _ = cli_in_process("compare", str(out), env={"CI": "true"}, cwd=tmp_path)
    flat = " ".join(text.split())
    assert code == 0
    # The headline leads with it (no "no recompiles", no figure of the mode: nothing of it was
    # measured), and says what to do.
    assert flat.startswith("ca trained no step: it resumed at the job's end from files an earlier mode wrote in its directory "
                           "(snapshot.pt), so nothing of it was measured; "), flat[:400]
    assert "no recompiles" not in flat.split("what to do:")[0]
    assert "what to do: run again with --isolate-workdir" in flat
    assert "Numerics: ca started after an earlier mode wrote snapshot.pt in the job's working directory and trained no step" in flat
    assert "agree with eager" not in flat.split("gradients:")[0], flat
    assert "ca: it trained no step" in flat
    # Every count of a mode that trained nothing is 0: a gate on it measured nothing, and fails.
    code, text, _ = cli_in_process("gate", "--no-config", "--max-recompiles", "ca:0", str(out), env={"CI": "true"}, cwd=tmp_path)
    assert code == 1 and "ERROR: mode-finished (ca): status finished, 0 steps: nothing of the job's training ran in it" in text, text
    assert "(it started after an earlier mode wrote snapshot.pt there; `cagtool run --isolate-workdir`" in " ".join(text.split()), text
    # ... and a count under its limit there is no improvement to tighten the limit on
    code, text, _ = cli_in_process("gate", "--no-config", "--max-recompiles", "ca:3", str(out), env={"CI": "true", "COLUMNS": "300"}, cwd=tmp_path)
    row = next(line.split() for line in text.splitlines() if line.startswith("max-recompiles"))
    assert code == 1 and row[1:5] == ["ca", "0", "<=", "3"] and row[5] == "PASS", text


@pytest.mark.slow
def test_isolate_workdir_starts_every_mode_from_the_directory_the_first_found(tmp_path):
    """The same job with --isolate-workdir: the snapshot eager saved is moved into the run's
    workdir/eager/ before ca starts, so ca trains from the start as eager did (the modes agree), and
    ca's own is moved after it: the job's directory is left as it was. A file that was there
    before and that a mode changed cannot be put back: it is still named as written before."""
    (tmp_path / "kept.txt").write_text("the user's own file")
    out = tmp_path / "run"
    proc = subprocess.run(cagtool_cmd("run", "--modes", "eager,ca", "--backend", "eager", "--no-report", "--isolate-workdir", "-o", str(out),
                                      str(SCRIPT), "--save-last"), cwd=tmp_path, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "CI": "true"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "resuming" not in proc.stdout and proc.stdout.count("done") == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept.txt", "run"]
    assert (out / "workdir" / "eager" / "snapshot.pt").is_file() and (out / "workdir" / "ca" / "snapshot.pt").is_file()
    meta = json.loads((out / "run.json").read_text())
    assert meta["written_before"] == {} and meta["options"]["isolate_workdir"] is True
    assert meta["set_aside"] == {"eager": {"paths": ["snapshot.pt"], "count": 1}, "ca": {"paths": ["snapshot.pt"], "count": 1}}
    code, text, _ = cli_in_process("compare", str(out), env={"CI": "true", "COLUMNS": "400"}, cwd=tmp_path)
    flat = " ".join(text.split())
    assert code == 0 and "numerics agree" in flat and "earlier mode wrote" not in flat, flat
    assert ("Working directory: every mode started from it as the first found it (--isolate-workdir): what each created there "
            "was moved into the run's workdir/<mode>/ (eager: snapshot.pt; ca: snapshot.pt)") in flat
    # A forged record's names are text, never escapes.
    meta["set_aside"] = {"eager": {"paths": ["\x1b]0;owned\x07x.pt"], "count": 1}}
    (out / "run.json").write_text(json.dumps(meta))
    code, text, _ = cli_in_process("compare", str(out), env={"CI": "true"}, cwd=tmp_path)
    assert code == 0 and "\x1b" not in text and "\x07" not in text and "workdir/<mode>/" in text


def test_set_aside_moves_only_the_files_a_mode_created(tmp_path):
    """Only regular files new since the first listing move; a changed file that was there, a link
    and a file with a second name stay where the job left them."""
    (tmp_path / "data.txt").write_text("before")
    first = list_workdir(str(tmp_path), tmp_path / "run")
    (tmp_path / "data.txt").write_text("changed by a mode")
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "last.pt").write_bytes(b"x")
    (tmp_path / "twice.bin").write_bytes(b"y")
    os.link(tmp_path / "twice.bin", tmp_path / "ckpt" / "second-name.bin")
    now = list_workdir(str(tmp_path), tmp_path / "run")
    moved, left = set_aside(str(tmp_path), first, now, tmp_path / "run" / "workdir" / "eager")
    assert moved == [os.path.join("ckpt", "last.pt")]
    assert left == [os.path.join("ckpt", "second-name.bin"), "twice.bin"]
    assert (tmp_path / "run" / "workdir" / "eager" / "ckpt" / "last.pt").read_bytes() == b"x"
    assert (tmp_path / "data.txt").read_text() == "changed by a mode" and (tmp_path / "twice.bin").exists()
    assert written_since(first, list_workdir(str(tmp_path), tmp_path / "run")) == sorted(["data.txt", *left])


@pytest.mark.slow
def test_a_ddp_job_resuming_in_its_later_mode_is_no_gradient_check_and_the_gate_cannot_pass_on_it(tmp_path):
    """pytorch/examples' DDP tutorial shape (2 ranks, rank 0 saves snapshot.pt, every rank resumes
    from it): the ca mode's ranks resume. Each rank's ca against eager is not comparable (named
    for the snapshot), and each mode's ranks agree with each other, which said nothing of ca
    against eager: `gate --max-grad-diff` passed on those alone ("nothing compared ... worst 0x").
    A mode none of whose pairs with the reference was compared is not measured: ERROR, exit 1."""
    script = ROOT / "tests" / "scripts" / "ddp_resumes_from_snapshot.py"
    out = tmp_path / "run"
    proc = subprocess.run(cagtool_cmd("run", "--modes", "eager,ca", "--backend", "eager", "--no-report", "-o", str(out), str(script)),
                          cwd=tmp_path, capture_output=True, text=True, timeout=600, env={**os.environ, "CI": "true"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "rank 0 resuming from epoch 3" in proc.stdout and "rank 1 resuming from epoch 3" in proc.stdout
    code, text, _ = cli_in_process("compare", "--format", "json", str(out), env={"CI": "true"}, cwd=tmp_path)
    assert code == 0
    pairs = {(p["record"], p["reference"]): p for p in json.loads(text)["grad_parity"]["pairs"]}
    for rank in (0, 1):
        blocked = pairs[(f"ca rank{rank}", f"eager rank{rank}")]["not_comparable"]
        assert blocked.startswith("inputs differ: the first step's losses already differ"), blocked
        assert "it started after an earlier mode wrote snapshot.pt in the job's working directory" in blocked
        assert "unseeded" not in blocked
    assert pairs[("ca rank1", "ca rank0")]["agrees"] and pairs[("eager rank1", "eager rank0")]["agrees"]
    code, text, _ = cli_in_process("gate", "--no-config", "--max-grad-diff", "1", str(out), env={"CI": "true"}, cwd=tmp_path)
    line = next(x for x in text.splitlines() if x.startswith(("PASS: max-grad-diff", "ERROR: max-grad-diff", "FAIL: max-grad-diff")))
    assert code == 1 and line.startswith("ERROR: max-grad-diff (ca/eager): cannot check: ca rank0 vs eager rank0: not comparable"), text
    assert "snapshot.pt" in line


def test_the_listing_skips_the_run_hidden_and_cache_directories_and_stops_at_its_depth(tmp_path):
    (tmp_path / "data" / "a" / "b" / "c").mkdir(parents=True)
    (tmp_path / "data" / "a" / "x.bin").write_bytes(b"1")
    (tmp_path / "data" / "a" / "b" / "c" / "deep.bin").write_bytes(b"1")  # below MAX_DEPTH levels
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "index").write_bytes(b"1")
    (tmp_path / "__pycache__").mkdir()
    (tmp_path / "__pycache__" / "m.pyc").write_bytes(b"1")
    run = tmp_path / "runs" / "r"
    run.mkdir(parents=True)
    (run / "run.json").write_text("{}")
    (tmp_path / "link").symlink_to(tmp_path / "data")
    before = list_workdir(str(tmp_path), run)
    assert set(before) == {os.path.join("data", "a", "x.bin")} and MAX_DEPTH == 3
    (tmp_path / "snapshot.pt").write_bytes(b"state")
    (tmp_path / "data" / "a" / "x.bin").write_bytes(b"22")
    (run / "more.json").write_text("{}")
    assert written_since(before, list_workdir(str(tmp_path), run)) == [os.path.join("data", "a", "x.bin"), "snapshot.pt"]


def test_the_files_cagtools_own_output_goes_to_are_not_the_jobs(tmp_path):
    """`cagtool run train.py > run.out 2> run.err` in the job's directory: every mode writes there
    through cagtool, so they are not files a mode found from an earlier one (the comparison would
    call the job one that resumes from its own files)."""
    (tmp_path / "data.bin").write_bytes(b"1")
    listing = (f"import json, pathlib, sys; from cagtool.capture.run.workdir import list_workdir; "
               f"sys.stderr.write('x'); sys.stderr.flush(); "
               f"print(json.dumps(sorted(list_workdir({str(tmp_path)!r}, pathlib.Path({str(tmp_path / 'runs')!r})))), file=sys.__stdout__, flush=True)")
    with open(tmp_path / "run.out", "w") as out, open(tmp_path / "run.err", "w") as err:
        subprocess.run([sys.executable, "-c", listing], stdout=out, stderr=err, cwd=tmp_path, timeout=60, check=True,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert json.loads((tmp_path / "run.out").read_text()) == ["data.bin"]
    assert (tmp_path / "run.err").read_text() == "x"


@pytest.mark.slow
def test_a_file_an_earlier_mode_wrote_and_no_mode_read_is_not_a_resume(tmp_path):
    """tests/scripts/saves_at_end.py writes model.pt at its end and never reads it; its modes draw
    other numbers (seeded from os.urandom). The later mode's differing first loss was put on the
    file ("ca started from files an earlier mode wrote (model.pt)"); the ca mode's process opened
    no file of the working directory an earlier mode wrote, so it is the inputs that differ. With
    --load-back it reads model.pt at its end, after writing it itself: not the earlier mode's file."""
    out = tmp_path / "run"
    proc = subprocess.run(cagtool_cmd("run", "--modes", "eager,ca", "--backend", "eager", "--no-report", "-o", str(out),
                                      str(ROOT / "tests" / "scripts" / "saves_at_end.py"), "--load-back"),
                          cwd=tmp_path, capture_output=True, text=True, timeout=600, env={**os.environ, "CI": "true"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads((out / "run.json").read_text())["written_before"] == {"ca": {"paths": ["model.pt"], "count": 1}}
    assert json.loads((out / "ca" / "manifest.json").read_text())["options"]["workdir_reads"] == []
    code, text, _ = cli_in_process("compare", str(out), env={"CI": "true"}, cwd=tmp_path)
    flat = " ".join(text.split())
    assert code == 0 and "earlier mode wrote" not in flat, flat
    assert "numerics not comparable: inputs differ (unseeded?)" in flat, flat


def test_a_file_the_process_wrote_itself_before_reading_it_is_not_kept_as_read(tmp_path):
    """workdir_reads keeps the files of the working directory a process read as they were when it
    started: one it rewrote first (with Python's open, or from C++ as torch.save to a path does) and
    then read back is its own, not an earlier mode's."""
    (tmp_path / "old.pt").write_bytes(b"old")
    (tmp_path / "mine.pt").write_bytes(b"old")
    (tmp_path / "native.pt").write_bytes(b"old")
    code = ("import os, sys; from cagtool.capture.processes import workdir_reads; workdir_reads.install(); "
            "open('old.pt', 'rb').read(); "
            "open('mine.pt', 'wb').write(b'new'); open('mine.pt', 'rb').read(); "
            "fd = os.open('native.pt', os.O_WRONLY | os.O_TRUNC); os.write(fd, b'new'); os.close(fd); open('native.pt', 'rb').read(); "
            "print(workdir_reads.reads())")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=60, check=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.stdout.strip() == "['old.pt']", out.stderr
