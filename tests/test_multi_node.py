"""A job whose ranks run on two hosts, simulated on one machine: two torchrun launchers (node ranks
0 and 1, one rank each) meeting over a localhost rendezvous, each under its own `cagtool run`
writing its own node's run, then `cagtool merge` making one run of the job. The reports and the
gate then see every rank of both nodes: the rank table, the CA graphs parting on the other node's
rank, and a gate held per rank that fails on the divergence."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
from pathlib import Path

import pytest

from conftest import ROOT, cagtool_cmd, cagtool_in_process, recorded_once

pytestmark = pytest.mark.slow

SCRIPT = ROOT / "tests" / "scripts" / "ddp_env_ranks.py"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _cagtool(*args: object, cwd: Path) -> subprocess.CompletedProcess:
    """merge, summary and gate read records and write files: in-process (cagtool_in_process)."""
    return cagtool_in_process(*args, cwd=cwd, env={"CI": "true"})


def _record_two_nodes(base: Path) -> None:
    port = _free_port()
    env = {**os.environ, "CI": "true"}
    nodes = []
    for node in (0, 1):
        cmd = cagtool_cmd("run", "--modes", "ca", "--backend", "eager", "-o", str(base / f"node{node}"),
                          "torchrun", "--nnodes", "2", "--node-rank", str(node), "--nproc-per-node", "1",
                          "--master-addr", "127.0.0.1", "--master-port", str(port), str(SCRIPT), "--steps", "4", "--diverge-rank", "1")
        nodes.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=str(base), env=env))
    outputs = [proc.communicate(timeout=300) for proc in nodes]
    for proc, (_out, err) in zip(nodes, outputs):
        assert proc.returncode == 0, err[-3000:]


@pytest.fixture(scope="module")
def two_nodes(tmp_path_factory) -> tuple[Path, Path]:
    """Both nodes' runs of one job where the rank on node 1 runs an extra op at step 2 (recorded
    once for all xdist workers, each with its own copy)."""
    base, _ = recorded_once(tmp_path_factory, "two-nodes", _record_two_nodes)
    return base / "node0", base / "node1"


def test_two_nodes_merge_into_one_job_that_reports_and_gates_every_rank(two_nodes, tmp_path):
    node0, node1 = two_nodes
    merged = tmp_path / "job"
    proc = _cagtool("merge", node1, node0, "-o", merged, cwd=tmp_path)  # any order: node 0 leads
    assert proc.returncode == 0, proc.stderr
    assert "node 0: " in proc.stderr and "ranks 0" in proc.stderr and "mode ca: ranks 0, 1" in proc.stderr
    meta = json.loads((merged / "run.json").read_text())
    assert [n["ranks"] for n in meta["options"]["merged_from"]] == [[0], [1]]
    assert not (merged / "gate.json").exists()

    summary = json.loads(_cagtool("summary", merged, "--format", "json", cwd=tmp_path).stdout)
    ranks = summary["modes"]["ca"]["ranks"]
    assert [r["rank"] for r in ranks["ranks"]] == [0, 1] and ranks["world_size"] == 2 and ranks["missing_ranks"] == []
    assert [r["ca_graphs"] for r in ranks["ranks"]] == [1, 2]  # rank 1 (node 1) captured again at step 2
    assert ranks["diverge"] is True
    findings = json.dumps(ranks["findings"])
    assert "ranks 0 and 1 part at step 2" in findings and "TanhBackward0" in findings

    gate = _cagtool("gate", merged, "--max-recompiles", "ca:5", "--format", "json", cwd=tmp_path)
    assert gate.returncode == 1
    checks = json.loads(gate.stdout)["checks"]
    assert {c["mode"] for c in checks if c["check"] == "max-recompiles:ca"} == {"ca@rank0", "ca@rank1"}
    assert next(c for c in checks if c["check"] == "ranks-agree")["outcome"] == "fail"
    assert next(c for c in checks if c["check"] == "ranks-present")["outcome"] == "pass"

    # One node alone is half a job: its gate says a rank is missing.
    half = json.loads(_cagtool("gate", node1, "--max-recompiles", "ca:5", "--format", "json", cwd=tmp_path).stdout)
    assert next(c for c in half["checks"] if c["check"] == "ranks-present")["outcome"] == "fail"


def test_merge_refuses_what_is_not_one_job(two_nodes, tmp_path):
    node0, node1 = two_nodes
    same = _cagtool("merge", node0, node0, "-o", tmp_path / "x", cwd=tmp_path)
    assert same.returncode == 2 and "given twice" in same.stderr
    (tmp_path / "exists").mkdir()
    exists = _cagtool("merge", node0, node1, "-o", tmp_path / "exists", cwd=tmp_path)
    assert exists.returncode == 2 and "already exists" in exists.stderr
    one = _cagtool("merge", node0, "-o", tmp_path / "y", cwd=tmp_path)
    assert one.returncode == 2 and "at least two" in one.stderr
    garbage = tmp_path / "garbage"
    garbage.mkdir()
    (garbage / "run.json").write_text("{not json")
    unreadable = _cagtool("merge", node0, garbage, "-o", tmp_path / "z", cwd=tmp_path)
    assert unreadable.returncode == 3
    # The same script with other arguments (the node rank apart, which differs by design) is another job.
    other = _node_copy(node1, tmp_path / "other")
    meta = json.loads((other / "run.json").read_text())
    meta["target_argv"] = [("8" if word == "4" else word) for word in meta["target_argv"]]  # --steps 4 -> 8
    (other / "run.json").write_text(json.dumps(meta))
    argv = _cagtool("merge", node0, other, "-o", tmp_path / "w", cwd=tmp_path)
    assert argv.returncode == 2 and "(the node rank apart): not the nodes of one job" in argv.stderr, argv.stderr
    assert not any((tmp_path / name).exists() for name in ("x", "y", "z", "w"))


def _node_copy(node: Path, where: Path) -> Path:
    import shutil

    shutil.copytree(node, where, symlinks=True)
    return where


def _left_behind(tmp_path: Path) -> list[str]:
    return sorted(p.name for p in tmp_path.iterdir() if ".merging" in p.name)


def test_a_merge_killed_mid_copy_leaves_a_staging_folder_the_next_merge_removes(two_nodes, tmp_path):
    """A merge SIGKILLed while copying leaves its staging folder beside the output (no chance to
    clean up). The next merge into that output removes it where its process is gone and it is this
    host's; a live merge's folder, another host's, and a link of that name (never followed) stay."""
    import signal
    import subprocess
    import sys

    from cagtool.record.merge import _staging_prefix

    node0, node1 = two_nodes
    merged = tmp_path / "job"
    prefix = _staging_prefix(merged)
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead = int(gone.stdout)
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("mine\n")
    try:
        stale = tmp_path / f"{prefix}{dead}"
        (stale / "ca").mkdir(parents=True)
        (stale / "ca" / "events.jsonl").write_text("{}\n")
        running = tmp_path / f"{prefix}{live.pid}"
        running.mkdir()
        other_host = tmp_path / f".job.merging-{'x' * 70}-{dead}"
        other_host.mkdir()
        link = tmp_path / f"{prefix}{2 ** 22 + 1}"  # above any pid_max: no process has it
        link.symlink_to(outside, target_is_directory=True)
        proc = _cagtool("merge", node0, node1, "-o", merged, cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        assert not stale.exists()
        assert running.is_dir() and other_host.is_dir() and link.is_symlink()
        assert (outside / "keep.txt").read_text() == "mine\n"
        assert _left_behind(tmp_path) == sorted(p.name for p in (running, other_host, link))
    finally:
        live.send_signal(signal.SIGKILL)
        live.wait()


def test_merge_refuses_links_that_leave_a_node_run_and_copies_nothing_through_them(two_nodes, tmp_path):
    """A node run from shared storage with links planted in it: to a secret file, and a rank
    directory that is a link to a directory outside. merge exits 3 naming the link, writes no
    merged run and leaves no staging directory; nothing outside the node is read."""
    node0, node1 = two_nodes
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP SECRET\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "private.key").write_text("KEY\n")

    leaky = _node_copy(node1, tmp_path / "leaky")
    (leaky / "ca" / "leak").symlink_to(secret)
    proc = _cagtool("merge", node0, leaky, "-o", tmp_path / "m1", cwd=tmp_path)
    assert proc.returncode == 3, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and f"leak is a symbolic link ({secret})" in proc.stderr
    assert not os.path.lexists(tmp_path / "m1") and _left_behind(tmp_path) == []

    rank_link = _node_copy(node1, tmp_path / "rank_link")
    (rank_link / "ca" / "procs" / "rank2").symlink_to(outside, target_is_directory=True)
    proc = _cagtool("merge", node0, rank_link, "-o", tmp_path / "m2", cwd=tmp_path)
    assert proc.returncode == 3 and "rank2 is a symbolic link" in proc.stderr, proc.stderr
    assert not os.path.lexists(tmp_path / "m2") and _left_behind(tmp_path) == []

    head_link = _node_copy(node0, tmp_path / "head_link")  # node 0's run is copied whole: the same rule
    (head_link / "notes").symlink_to(secret)
    proc = _cagtool("merge", head_link, node1, "-o", tmp_path / "m3", cwd=tmp_path)
    assert proc.returncode == 3 and "notes is a symbolic link" in proc.stderr, proc.stderr
    assert not os.path.lexists(tmp_path / "m3")
    assert not any("TOP SECRET" in p.read_text(errors="replace") for p in tmp_path.rglob("*") if p.is_file() and not p.is_symlink() and p != secret)


def test_merge_refuses_a_link_loop_and_a_fifo_with_one_line_and_no_staging_left(two_nodes, tmp_path):
    node0, node1 = two_nodes
    looped = _node_copy(node1, tmp_path / "looped")
    (looped / "ca" / "a").symlink_to("b")
    (looped / "ca" / "b").symlink_to("a")
    proc = _cagtool("merge", node0, looped, "-o", tmp_path / "m", cwd=tmp_path)
    assert proc.returncode == 3 and "is a symbolic link (" in proc.stderr and "internal error" not in proc.stderr, proc.stderr
    assert not os.path.lexists(tmp_path / "m") and _left_behind(tmp_path) == []

    fifo = _node_copy(node1, tmp_path / "fifo")
    os.mkfifo(fifo / "ca" / "pipe")
    proc = _cagtool("merge", node0, fifo, "-o", tmp_path / "m", cwd=tmp_path)  # a FIFO would block the copy forever
    assert proc.returncode == 3 and "pipe is not a regular file" in proc.stderr, proc.stderr


def test_merge_refuses_every_link_even_one_that_stays_inside_the_node(two_nodes, tmp_path):
    """cagtool writes no links, and a relative link judged where it lies in the input can lead
    elsewhere from where its copy lies (beside the output): every link is refused, exit 3."""
    node0, node1 = two_nodes
    for name, target in (("manifest-alias.json", "manifest.json"), ("procs-alias", "procs")):
        other = _node_copy(node1, tmp_path / f"inner-{name}")
        (other / "ca" / name).symlink_to(target)
        proc = _cagtool("merge", node0, other, "-o", tmp_path / f"m-{name}", cwd=tmp_path)
        assert proc.returncode == 3 and f"{name} is a symbolic link ({target})" in proc.stderr, proc.stderr
        assert not (tmp_path / f"m-{name}").exists()


def test_merge_checks_the_whole_run_when_given_a_mode_folder_and_never_writes_into_an_input(two_nodes, tmp_path):
    """A node named by its mode folder (node/ca) is copied whole: a link elsewhere in that run is
    refused as if the run were named. An output inside an input is refused before anything is
    written (it would change the input, or copy itself into itself)."""
    node0, node1 = two_nodes
    elsewhere = _node_copy(node0, tmp_path / "elsewhere")
    (elsewhere / "extra").mkdir()
    (elsewhere / "extra" / "leak").symlink_to("/etc/passwd")
    proc = _cagtool("merge", elsewhere / "ca", node1, "-o", tmp_path / "m", cwd=tmp_path)
    assert proc.returncode == 3 and "leak is a symbolic link (/etc/passwd)" in proc.stderr, proc.stderr
    assert not os.path.lexists(tmp_path / "m")

    for inside in (node0 / "merged", node1 / "ca" / "procs" / "merged"):
        before = sorted(str(p) for p in inside.parent.rglob("*"))
        proc = _cagtool("merge", node0, node1, "-o", inside, cwd=tmp_path)
        assert proc.returncode == 2 and "lies in the node run" in proc.stderr, proc.stderr
        assert sorted(str(p) for p in inside.parent.rglob("*")) == before


def _set_process(node: Path, key: str, value: object) -> None:
    for manifest in node.rglob("manifest.json"):
        data = json.loads(manifest.read_text())
        if (data.get("process") or {}).get("rank") is not None:
            data["process"][key] = value
            manifest.write_text(json.dumps(data))


def test_merge_refuses_ranks_that_are_not_one_jobs(two_nodes, tmp_path):
    node0, node1 = two_nodes
    negative = _node_copy(node1, tmp_path / "negative")
    _set_process(negative, "rank", -5)
    proc = _cagtool("merge", node0, negative, "-o", tmp_path / "m", cwd=tmp_path)
    assert proc.returncode == 2 and "holds rank -5, not a rank of a job of world size 2" in proc.stderr, proc.stderr
    unranked = _node_copy(node1, tmp_path / "unranked")
    _set_process(unranked, "rank", "1")  # not an int: no rank at all
    proc = _cagtool("merge", node0, unranked, "-o", tmp_path / "m", cwd=tmp_path)
    assert proc.returncode == 2 and "finished without a rank's record" in proc.stderr, proc.stderr
    bigger = _node_copy(node1, tmp_path / "bigger")
    _set_process(bigger, "world_size", 64)
    proc = _cagtool("merge", node0, bigger, "-o", tmp_path / "m", cwd=tmp_path)
    assert proc.returncode == 2 and "world sizes 2, 64: not the nodes of one job" in proc.stderr, proc.stderr
    # A world size no job has would have every report count to it: refused wherever it is read.
    forged = _node_copy(node1, tmp_path / "forged")
    _set_process(forged, "world_size", 10**15)
    for args in (("summary", forged), ("gate", forged, "--max-recompiles", "ca:5"), ("merge", node0, forged, "-o", tmp_path / "m")):
        proc = _cagtool(*args, cwd=tmp_path)
        assert proc.returncode == 3 and "world_size 1000000000000000 is beyond any job's" in proc.stderr, (args, proc.stderr)
    assert not os.path.lexists(tmp_path / "m")
    # An error is one line even when it quotes a forged field: no line of the record's own in a CI log.
    named = _node_copy(node1, tmp_path / "named")
    meta = json.loads((named / "run.json").read_text())
    meta["target"]["name"] = "train.py\n::error title=cagtool gate::all checks passed"
    (named / "run.json").write_text(json.dumps(meta))
    proc = _cagtool("merge", node0, named, "-o", tmp_path / "m", cwd=tmp_path)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1 and "train.py\\n::error" in proc.stderr, proc.stderr


def test_merge_onto_a_full_disk_is_one_line_naming_the_output_and_leaves_nothing(two_nodes, tmp_path):
    from conftest import can_mount_tmpfs

    node0, node1 = two_nodes
    mount = tmp_path / "small"
    if not can_mount_tmpfs(mount):
        pytest.skip("needs root to mount a small tmpfs (a real full disk)")
    try:
        (mount / "filler").write_bytes(b"\0" * (150 * 1024))
        proc = _cagtool("merge", node0, node1, "-o", mount / "m", cwd=tmp_path)
        assert proc.returncode == 2, proc.stderr
        assert "cannot write the merged run" in proc.stderr and str(mount) in proc.stderr and "No space left" in proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1
        assert sorted(p.name for p in mount.iterdir()) == ["filler"]
    finally:
        subprocess.run(["umount", str(mount)], check=False)


def test_merge_shows_a_forged_host_name_and_never_passes_its_escapes_to_the_terminal(two_nodes, tmp_path):
    """A node run whose recorded host name carries a terminal title sequence and a line break: the
    merge lines show the name, one line a node, with no escape sequence a terminal would obey."""
    node0, node1 = two_nodes
    forged = _node_copy(node1, tmp_path / "forged")
    meta = json.loads((forged / "run.json").read_text())
    meta.setdefault("process", {})["hostname"] = "evil\n\x1b]0;TITLE\x07host"
    (forged / "run.json").write_text(json.dumps(meta))
    proc = _cagtool("merge", node0, forged, "-o", tmp_path / "merged", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "\x1b" not in proc.stderr and "\x07" not in proc.stderr
    [line] = [l for l in proc.stderr.splitlines() if l.startswith("node 1:")]
    assert "(evil\\nhost)" in line


def test_merge_refuses_a_hard_link_to_a_file_outside_the_node_and_copies_nothing(two_nodes, tmp_path):
    """A hard link is the file outside under a second name: merge would copy a secret (any file
    the merging user can read) into the merged run. cagtool writes none: exit 3, nothing copied."""
    node0, node1 = two_nodes
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP SECRET\n")
    linked = _node_copy(node1, tmp_path / "linked")
    os.link(secret, linked / "ca" / "procs" / "rank1" / "notes.txt")
    proc = _cagtool("merge", node0, linked, "-o", tmp_path / "m", cwd=tmp_path)
    assert proc.returncode == 3 and "notes.txt is a hard link (2 names)" in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert not os.path.lexists(tmp_path / "m") and _left_behind(tmp_path) == []


def test_merge_never_reads_through_a_link_planted_after_the_check(two_nodes, tmp_path, monkeypatch):
    """The node run changes while the merge runs: a rank's folder, a plain folder when the run was
    checked, is a link to a folder outside when it is copied. The copy walks the node by file
    descriptor and refuses it (exit 3): nothing from outside reaches the output, no staging left."""
    import shutil

    import cagtool.record.merge as merge
    from cagtool.errors import UnreadableInput

    node0, node1 = two_nodes
    outside = tmp_path / "outside"
    (outside / "ca1_1_0").mkdir(parents=True)
    (outside / "ca1_1_0" / "private.key").write_text("KEY\n")
    racing = _node_copy(node1, tmp_path / "racing")
    swapped = racing / "ca" / "procs" / "rank1" / "compiles"
    checked = merge.check_node_links

    def check_then_swap(root: Path) -> None:
        checked(root)
        if Path(root).name == "racing":
            shutil.rmtree(swapped)
            swapped.symlink_to(outside, target_is_directory=True)

    monkeypatch.setattr(merge, "check_node_links", check_then_swap)
    with pytest.raises(UnreadableInput, match="compiles is a symbolic link"):
        merge.merge_runs([node0, racing], tmp_path / "m")
    assert not os.path.lexists(tmp_path / "m") and _left_behind(tmp_path) == []


def test_a_merged_run_merges_with_a_third_node(two_nodes, tmp_path):
    """Nodes merged as they finish: the merged run of nodes 0 and 1 (it holds `procs/node1`) with
    node 2's run. Each launcher record keeps a name of its own, every rank is there."""
    node0, node1 = two_nodes
    nodes = [_node_copy(node, tmp_path / f"n{i}") for i, node in enumerate((node0, node1, node1))]
    (nodes[2] / "ca" / "procs" / "rank1").rename(nodes[2] / "ca" / "procs" / "rank2")
    for i, node in enumerate(nodes):
        for manifest in node.rglob("manifest.json"):
            data = json.loads(manifest.read_text())
            process = data.get("process") or {}
            if process.get("world_size") is not None:
                process["world_size"] = 3
            if i == 2 and process.get("rank") == 1:
                process["rank"] = 2
            manifest.write_text(json.dumps(data))
    first = _cagtool("merge", nodes[0], nodes[1], "-o", tmp_path / "m01", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    proc = _cagtool("merge", tmp_path / "m01", nodes[2], "-o", tmp_path / "m012", cwd=tmp_path)
    assert proc.returncode == 0 and "mode ca: ranks 0, 1, 2" in proc.stderr, proc.stderr
    assert sorted(p.name for p in (tmp_path / "m012" / "ca" / "procs").iterdir()) == ["node1", "node1-node1", "rank0", "rank1", "rank2"]


# Node runs handed over for `cagtool merge` (shared storage, another host's CI artifact) whose files
# cost their maker nothing and the merging machine everything: a sparse file of gigabytes, and a
# file its writer keeps extending while the merge copies it. The merge copies each file as it was
# when opened, its holes kept as holes: the output takes no more disk than the input, and it ends.
GIB = 1 << 30


def _rank_folder(node: Path) -> Path:
    return next((node / "ca" / "procs").glob("rank*"))


def _merge(node0: Path, node1: Path, output: Path):
    return _cagtool("merge", node0, node1, "-o", output, cwd=output.parent)


def test_merge_keeps_a_sparse_files_holes_and_writes_no_gigabytes_of_zeros(two_nodes, tmp_path):
    node0, node1 = two_nodes
    node = Path(shutil.copytree(node1, tmp_path / "node1"))
    planted = _rank_folder(node) / "blob.bin"
    with open(planted, "wb") as handle:
        handle.truncate(GIB)  # a gigabyte that takes no disk
        handle.seek(GIB // 2)
        handle.write(b"the only data")
    proc = _merge(node0, node, tmp_path / "job")
    assert proc.returncode == 0, proc.stderr
    copy = tmp_path / "job" / "ca" / "procs" / planted.parent.name / planted.name
    assert copy.stat().st_size == GIB and copy.read_bytes()[GIB // 2 : GIB // 2 + 13] == b"the only data"
    assert copy.stat().st_blocks * 512 < 16 << 20, f"the copy took {copy.stat().st_blocks * 512:,} bytes of disk"


def test_merge_copies_a_file_as_it_was_when_opened_though_its_writer_extends_it(two_nodes, tmp_path, monkeypatch):
    import cagtool.record.merge as merge

    node0, node1 = two_nodes
    node = Path(shutil.copytree(node1, tmp_path / "node1"))
    planted = _rank_folder(node) / "growing.log"
    planted.write_bytes(b"line\n" * 10)
    opened, looked, armed = merge.open_record_file, os.fstat, set()

    def open_record_file(path, *args, **kwargs):
        fd = opened(path, *args, **kwargs)
        if Path(path).name == planted.name:
            armed.add(fd)
        return fd

    def fstat(fd, *args, **kwargs):
        found = looked(fd, *args, **kwargs)
        if fd in armed:  # the merge has the file open and has looked at it: its writer extends it (sparsely: free)
            armed.discard(fd)
            os.truncate(planted, 256 << 20)
        return found

    monkeypatch.setattr(merge, "open_record_file", open_record_file)
    monkeypatch.setattr(merge.os, "fstat", fstat)
    proc = _merge(node0, node, tmp_path / "job")
    assert proc.returncode == 0, proc.stderr
    copy = tmp_path / "job" / "ca" / "procs" / planted.parent.name / planted.name
    assert copy.read_bytes() == b"line\n" * 10
