"""Following the processes a target starts: DDP over gloo (mp.spawn and torchrun), fork children,
launches cagtool cannot follow, and aot's compiled autograd forced off. Real torch, CPU, 2 ranks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, SAMPLES, cagtool_cmd, cagtool_in_process, recorded_once

from cagtool.capture.processes.launch_audit import check_launch
from cagtool.capture.run.target import Target, check_target
from cagtool.record.loader import load_run
from cagtool.record.schema import CAGraphEvent, DDPModelEvent, FindingEvent, StepEvent

SCRIPTS = Path(__file__).parent / "scripts"
ENV = {**os.environ, "CI": "true"}


def _cagtool_run(out: Path, *args: str, modes: str = "ca", torch_trace: bool = False, env: dict | None = None) -> subprocess.CompletedProcess:
    """--torch-trace only for the tests that read the trace, or that check what a followed process
    leaves behind (with the trace on, a process has more it could leave): the trace builds a
    structured record of every compile, work the other tests would pay for and never read."""
    trace = ["--torch-trace"] if torch_trace else []
    cmd = cagtool_cmd("run", "--modes", modes, "--backend", "eager", *trace, "-o", str(out), *args)
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env or ENV, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def _printed(stdout: str, key: str) -> dict:
    """The JSON lines the script's processes printed, by `key`."""
    lines = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    return {line[key]: line for line in lines}


def _check_ddp_ranks(run_path: Path, stdout: str, steps: int) -> None:
    """Each rank has its record, its CA graphs equal torch's captures (manifest) and what the rank
    printed, the ranks stayed in sync, and DDP's all-reduce hooks are in every CA graph."""
    ca = load_run(run_path).mode("ca")
    printed = _printed(stdout, "rank")
    assert sorted(ca.ranks()) == [0, 1] == sorted(printed)
    assert sorted(ca.processes) == ["rank0", "rank1"]
    for rank, record in ca.ranks().items():
        assert record.manifest.status == "finished" and record.manifest.exit_code == 0
        graphs = record.of(CAGraphEvent)
        captures = record.manifest.torch_counters["compiled_autograd"]["captures"]
        assert len(graphs) == captures == printed[rank]["ca_captures"] >= 1
        assert len(record.of(StepEvent)) == steps
        assert printed[rank]["in_sync"] and printed[rank]["python_reducer"]
        (model,) = record.of(DDPModelEvent)
        assert (model.reducer, model.optimize_ddp, model.set_by, model.script_optimize_ddp) == ("python", "python_reducer", "cagtool", None)
        assert (model.rank, model.world_size) == (rank, 2)
        # One post-accumulate-grad hook (DDP's all-reduce) per trainable parameter, in each CA graph.
        for graph in graphs:
            assert sum(h.hook_type == "post_acc_grad_hook" for h in graph.hooks) == model.num_params == model.all_reduce_hooks == 4
        assert not [f for f in record.of(FindingEvent) if f.code.startswith("ddp_")]
        # Dynamo inlines the hook when it compiles the CA graph: the functional all-reduce is there.
        trace = "".join(p.read_text() for p in (record.path / "trace").glob("*.log"))
        assert "_c10d_functional.all_reduce" in trace


def _record_mp_spawn(base: Path) -> list:
    proc = _cagtool_run(base / "r", "--seed", "off", str(SAMPLES / "train_ddp.py"), "--steps", "3", torch_trace=True)
    return [proc.stdout, proc.stderr]


@pytest.fixture(scope="module")
def mp_spawn_ddp(tmp_path_factory) -> tuple[Path, str, str]:
    """sample_scripts/train_ddp.py (2 ranks by mp.spawn) in ca mode with the trace and `--seed off`:
    (run directory, stdout, stderr). One job read by the mp.spawn test and the --seed off test
    (recorded once per session)."""
    base, (stdout, stderr) = recorded_once(tmp_path_factory, "follow-mp-spawn-ddp", _record_mp_spawn)
    return base / "r", stdout, stderr


@pytest.mark.slow
def test_ddp_mp_spawn_ranks_are_followed(mp_spawn_ddp):
    """sample_scripts/train_ddp.py never sets optimize_ddp: in ca mode cagtool selects the Python
    reducer. (That in aot the script's C++ reducer stays is asserted on the torchrun job's aot
    ranks: test_ddp_torchrun_module_form.)"""
    out, stdout, stderr = mp_spawn_ddp
    _check_ddp_ranks(out, stdout, steps=3)
    assert "uses the Python reducer" in stderr
    run = load_run(out)
    assert run.mode("ca").rank is None and run.mode("ca").manifest.process["role"] == "main"
    assert run.mode("ca").manifest.options["optimize_ddp"] == {"value": "python_reducer", "set_by": "cagtool"}


def _record_unseeded_torchrun(base: Path) -> list:
    proc = _cagtool_run(base / "r", "-m", "torch.distributed.run", "--", "--nproc-per-node", "2",
                        str(SCRIPTS / "ddp_unseeded.py"), modes="aot,ca", torch_trace=True)
    return [proc.stdout, proc.stderr]


@pytest.fixture(scope="module")
def unseeded_torchrun(tmp_path_factory) -> tuple[Path, str]:
    """An unseeded 2-rank DDP job under `cagtool run -m torch.distributed.run`, aot and ca modes,
    with the trace: (run directory, stdout). One job read by the torchrun tests below (recorded once
    per session). The script compiles nothing itself, so its aot mode runs what eager would (with
    compiled autograd forced off): the mode that shows cagtool leaves the script's DDP reducer alone."""
    base, (stdout, _) = recorded_once(tmp_path_factory, "follow-unseeded-torchrun", _record_unseeded_torchrun)
    return base / "r", stdout


@pytest.mark.slow
def test_ddp_torchrun_module_form(unseeded_torchrun):
    """Both torchrun ranks are followed in every mode; ddp_unseeded.py never sets optimize_ddp: in
    ca mode cagtool selects the Python reducer, in aot the script's (C++) reducer stays."""
    out, stdout = unseeded_torchrun
    lines = [line for line in stdout.splitlines() if line.startswith("{")]
    assert len(lines) == 4, stdout  # each rank once per mode; the aot mode's ranks end before ca starts
    _check_ddp_ranks(out, "\n".join(lines[2:]), steps=4)
    run = load_run(out)
    for rank, record in run.mode("ca").ranks().items():
        assert record.manifest.process["local_rank"] == rank  # torchrun's env, known from the start
    aot = run.mode("aot")
    assert sorted(aot.ranks()) == [0, 1]
    for record in aot.ranks().values():
        (model,) = record.of(DDPModelEvent)
        assert (model.reducer, model.set_by) == ("cpp", "script")
        assert not record.of(CAGraphEvent)


def test_torchrun_console_script_runs_as_module():
    target = check_target("torchrun", None, ["--nproc-per-node", "2", "train.py"])
    assert target == Target("module", "torch.distributed.run", ["--nproc-per-node", "2", "train.py"])
    assert target.label == "train"  # the run directory is named after the training script


def _record_mp_children(base: Path) -> list:
    user_site = base / "site"
    user_site.mkdir()
    (user_site / "sitecustomize.py").write_text("MARK = 'users-own'\n")
    proc = _cagtool_run(base / "r", str(SCRIPTS / "mp_children.py"), env={**ENV, "PYTHONPATH": str(user_site)})
    return [proc.stdout, proc.stderr]


@pytest.fixture(scope="module")
def mp_children(tmp_path_factory) -> tuple[Path, str]:
    """One ca job (tests/scripts/mp_children.py) whose parent starts two fork children, one spawn
    child and a plain `python -c` child, with a user's own sitecustomize on PYTHONPATH: (run
    directory, stdout). Read by the two tests below (recorded once per session)."""
    base, (stdout, _) = recorded_once(tmp_path_factory, "follow-mp-children", _record_mp_children)
    return base / "r", stdout


@pytest.mark.slow
def test_multiprocessing_children_get_their_own_records(mp_children):
    """Children started with fork (two, siblings) and with spawn, in one job: each has its own
    record, made in the child, with its parent and (fork only) the process it was forked from."""
    out, stdout = mp_children
    printed = _printed(stdout, "pid")
    assert sorted(line["start_method"] for line in printed.values()) == ["fork", "fork", "spawn"], stdout
    ca = load_run(out).mode("ca")
    assert sorted(ca.processes) == sorted(f"pid{pid}" for pid in printed)
    assert not ca.of(StepEvent)  # the parent trained nothing: the children's steps are theirs
    for key, record in ca.processes.items():
        pid = int(key[3:])
        start_method = printed[pid]["start_method"]
        assert record.manifest.process["ppid"] == ca.manifest.process["pid"]
        assert record.manifest.process.get("forked_from") == (ca.manifest.process["pid"] if start_method == "fork" else None), start_method
        assert record.manifest.status == "finished" and record.manifest.exit_code == 0
        assert len(record.of(StepEvent)) == 3
        assert len(record.of(CAGraphEvent)) == record.manifest.torch_counters["compiled_autograd"]["captures"] == printed[pid]["ca_captures"]


@pytest.mark.slow
def test_python_children_record_their_exit_and_unfollowable_launches_are_findings(tmp_path):
    """One aot job that starts Python children (tests/scripts/launch_children.py), several claims:
    followed children that train record how they ended; one that imports torch but trains nothing
    sees the flag forced off and leaves no record; launches cagtool cannot follow are findings."""
    proc = _cagtool_run(tmp_path / "r", str(SCRIPTS / "launch_children.py"), modes="aot", torch_trace=True)
    # "flag False": aot forces the flag off in the followed child too
    assert proc.stdout.split() == ["flag", "False", "ok", "0", "exit3", "3", "raise", "1"], proc.stdout
    aot = load_run(tmp_path / "r").mode("aot")
    findings = [f for f in aot.of(FindingEvent) if f.code == "process_not_followed"]
    assert [f.detail["argv"][1:] for f in findings] == [["-c", "pass"], ["-I", "-c", "pass"]]
    assert "env=" in findings[0].message and "-I" in findings[1].message
    children = aot.processes.values()
    outcomes = {r.manifest.argv[-1]: (r.manifest.status, r.manifest.exit_code, r.manifest.exception.type if r.manifest.exception else None, len(r.of(StepEvent)))
                for r in children}
    assert outcomes == {"ok": ("finished", 0, None, 2), "exit3": ("failed", 3, None, 2), "raise": ("failed", 1, "ValueError", 2)}
    # The child that imported torch but trained nothing left no record behind, not even a directory.
    assert sorted(p.name for p in (tmp_path / "r" / "aot" / "procs").iterdir()) == sorted(aot.processes), "a record of the flag child"
    summary = cagtool_in_process("summary", str(tmp_path / "r"), "--format", "json", env={"CI": "true"})
    assert "process_not_followed" in summary.stdout


@pytest.mark.parametrize(
    ("argv", "env", "reason"),
    [
        ([sys.executable, "-Iu", "x.py"], None, "-I"),
        ([sys.executable, "-E", "x.py"], None, "-E"),
        ([sys.executable, "-S", "-c", "pass"], None, "-S"),
        ([sys.executable, "x.py"], {"PATH": "/usr/bin"}, "PYTHONPATH"),
        ([sys.executable, "-c", "import x", "-I"], None, None),  # -I after -c is the script's argument
        (["ls", "-l"], {}, None),
    ],
)
def test_check_launch(argv, env, reason):
    bootstrap = "/opt/cagtool/bootstrap"
    parent = {"PYTHONPATH": bootstrap, "CAGTOOL_FOLLOW": "{}", "PATH": os.environ.get("PATH", "")}
    with pytest.MonkeyPatch.context() as mp:
        for key, value in parent.items():
            mp.setenv(key, value)
        found = check_launch(argv[0], argv, env, bootstrap, "CAGTOOL_FOLLOW")
    assert (found.reason if found else None) is None if reason is None else reason in found.reason


def test_console_script_with_isolated_shebang_is_seen(tmp_path):
    tool = tmp_path / "tool"
    tool.write_text(f"#!{sys.executable} -I\nprint(1)\n")
    found = check_launch(str(tool), [str(tool)], None, "/b", "CAGTOOL_FOLLOW")
    assert found is not None and "-I" in found.reason


@pytest.mark.slow
def test_aot_counts_equal_plain_python_with_the_flag_off(tmp_path):
    """The script sets torch._dynamo.config.compiled_autograd = True itself; under `aot` cagtool
    forces it off, so Dynamo's counts equal the script run by python with the flag off (and not
    with it on: forcing matters). The plain runs share one process: the flag-off run first, in the
    fresh interpreter whose counts are compared; then, after torch._dynamo.reset(), the flag-on run,
    whose counts need only show that the flag changes them."""
    script = str(SCRIPTS / "ca_flag_hooks.py")
    wrapper = (
        "import json, runpy, sys\n"
        "script, seen = sys.argv[1], []\n"
        "for flag in ('0', '1'):\n"
        "    sys.argv = [script, '--ca-flag', flag]\n"
        "    runpy.run_path(script, run_name='__main__')\n"
        "    import torch._dynamo; from torch._dynamo.utils import counters\n"
        "    seen.append({k: {str(a): b for a, b in v.items()} for k, v in counters.items()})\n"
        "    torch._dynamo.config.compiled_autograd = False; torch._dynamo.reset(); counters.clear()\n"
        "print(json.dumps(seen))\n"
    )

    def key_counts(counters: dict) -> dict:
        return {
            "unique_graphs": counters.get("stats", {}).get("unique_graphs"),
            "calls_captured": counters.get("stats", {}).get("calls_captured"),
            "graph_breaks": sorted((reason[:300], n) for reason, n in counters.get("graph_break", {}).items()),  # the manifest keeps 300 chars
            "recompiles": counters.get("recompiles", {}),
            "ca_captures": counters.get("compiled_autograd", {}).get("captures", 0),
            # every frame offered to Dynamo: the script's backward hooks reached from the compiled
            # train_step's loss.backward() included, cagtool's own frames never (capture/observe/dynamo_skip.py)
            "frames": counters.get("frames", {}),
        }

    # The plain process and the cagtool run are independent: run them side by side.
    plain = subprocess.Popen([sys.executable, "-c", wrapper, script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        _cagtool_run(tmp_path / "r", script, "--ca-flag", "1", modes="aot")
        stdout, stderr = plain.communicate(timeout=600)
        assert plain.returncode == 0, stderr[-2000:]
        flag_off, flag_on = map(key_counts, json.loads(stdout.strip().splitlines()[-1]))
    finally:
        plain.kill()  # a no-op once it ended; stops it when the run above failed
        plain.wait()
    recorded = load_run(tmp_path / "r").mode("aot").manifest.torch_counters
    assert key_counts(recorded) == flag_off
    assert flag_on != flag_off
    assert flag_on["ca_captures"] > 0 == flag_off["ca_captures"]  # the flag, not the second run, makes the difference


def test_forced_flag_reads_false_after_the_script_sets_it():
    """docs/torch-internals.md: env_value_force wins over the script's assignment."""
    import torch
    from torch.utils._config_module import _UNSET_SENTINEL

    entry = torch._dynamo.config._config["compiled_autograd"]
    entry.env_value_force = False
    try:
        torch._dynamo.config.compiled_autograd = True
        assert torch._dynamo.config.compiled_autograd is False
    finally:
        entry.env_value_force = _UNSET_SENTINEL
        torch._dynamo.config.compiled_autograd = False


def test_launches_by_torchs_compiler_are_not_reported():
    """Inductor starts `python -c` with an env of its own to check a kernel loads: not the job's."""
    from cagtool.capture.processes.launch_audit import started_by_compiler

    def launched_from(filename: str) -> bool:
        code = compile("result = check(sys._getframe())", filename, "exec")
        scope = {"check": started_by_compiler, "sys": sys}
        exec(code, scope)
        return scope["result"]

    assert launched_from(os.path.join(os.sep, "env", "site-packages", "torch", "_inductor", "codecache.py"))
    assert not launched_from(os.path.join(os.sep, "home", "me", "train.py"))


@pytest.mark.slow
def test_ddp_without_its_hooks_in_the_ca_graph_is_a_finding(tmp_path):
    """DDP in the main process (world size 1): the main record has rank 0; a DDP model whose
    all-reduce hooks never reach the CA graph is a finding that names the fix."""
    _cagtool_run(tmp_path / "r", str(SCRIPTS / "ddp_one_rank.py"), "--remove-hooks")
    run = load_run(tmp_path / "r")
    ca = run.mode("ca")
    assert ca.rank == 0 and run.mode("ca", rank=0) is ca and ca.processes == {}
    assert ca.of(CAGraphEvent) and not any(h.hook_type == "post_acc_grad_hook" for g in ca.of(CAGraphEvent) for h in g.hooks)
    (finding,) = [f for f in ca.of(FindingEvent) if f.code == "ddp_collectives_not_in_ca_graphs"]
    assert "post_acc_grad_hook" in finding.message and "Fix:" in finding.message


@pytest.mark.slow
def test_users_own_sitecustomize_still_runs_in_followed_children(mp_children):
    """cagtool's bootstrap shadows the user's sitecustomize on PYTHONPATH and runs it: the job's
    `python -c` child, followed, sees the user's module as `sitecustomize`."""
    _, stdout = mp_children
    assert "child: users-own True" in stdout


@pytest.mark.slow
def test_unseeded_torchrun_ranks_are_seeded_alike_in_every_mode(unseeded_torchrun):
    """Each torchrun worker is seeded like the main process (seed + rank), before the script can
    draw: the modes of an unseeded DDP job then compute on the same numbers and agree."""
    out, stdout = unseeded_torchrun
    lines = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    by_rank: dict[int, list[dict]] = {}
    for line in lines:
        by_rank.setdefault(line["rank"], []).append(line)
    assert sorted(by_rank) == [0, 1] and all(len(seen) == 2 for seen in by_rank.values())  # one per mode (aot, ca)
    for seen in by_rank.values():
        assert seen[0]["draws"] == seen[1]["draws"] and seen[0]["norm"] == seen[1]["norm"]
    for generator in ("random", "numpy", "torch"):  # ranks draw different numbers, as under python
        assert by_rank[0][0]["draws"][generator] != by_rank[1][0]["draws"][generator]
    run = load_run(out)
    for mode in ("aot", "ca"):
        for rank, record in run.mode(mode).ranks().items():
            seed = record.manifest.options["seed"]
            assert (seed["seed"], seed["rank"], sorted(seed["seeded"]), seed["script_reseeded"]) == (rank, rank, ["numpy", "random", "torch"], False)
    compare = cagtool_in_process("compare", str(out), "--format", "json", env={"CI": "true"})
    numerics = json.loads(compare.stdout)["numerics"]
    assert numerics["agree"] is True and not any(d["inputs_differ"] for d in numerics["diffs"])


@pytest.mark.slow
def test_seed_off_leaves_followed_processes_unseeded(mp_spawn_ddp):
    """`--seed off`: the followed DDP ranks (mp.spawn's, in the mp.spawn test's job) seed nothing."""
    out, stdout, _ = mp_spawn_ddp
    assert len([line for line in stdout.splitlines() if line.startswith("{")]) == 2
    ranks = load_run(out).mode("ca").ranks()
    assert sorted(ranks) == [0, 1]
    for record in ranks.values():
        assert record.manifest.options["seed"] == {"seed": None, "seeded": [], "script_reseeded": None}


def test_another_copys_bootstrap_on_pythonpath_follows_the_child(tmp_path):
    """A launcher whose sys.path finds a second copy of cagtool (an editable install in its
    environment) checks with that copy's bootstrap path; the parent put its own copy's on
    PYTHONPATH, which follows the child all the same (DeepSpeed's launcher run from elsewhere)."""
    other = tmp_path / "other" / "cagtool" / "capture" / "processes" / "bootstrap"
    other.mkdir(parents=True)
    (other / "sitecustomize.py").write_text("")
    env = {"PYTHONPATH": os.pathsep.join([str(tmp_path), str(other)]), "CAGTOOL_FOLLOW": "{}"}
    assert check_launch(sys.executable, [sys.executable, "x.py"], env, "/opt/this/cagtool/capture/processes/bootstrap", "CAGTOOL_FOLLOW") is None
    # a directory of that name without cagtool's sitecustomize is no bootstrap
    (other / "sitecustomize.py").unlink()
    found = check_launch(sys.executable, [sys.executable, "x.py"], env, "/opt/this/cagtool/capture/processes/bootstrap", "CAGTOOL_FOLLOW")
    assert found is not None and "PYTHONPATH" in found.reason


LATE_FINALIZER = """
import json  # imported before the hook's module: the interpreter clears its globals after the hook's at exit
from cagtool.capture.processes import launch_audit

launch_audit.install(lambda launch: None, "/nonexistent", "CAGTOOL_FOLLOW")


class Late:
    def __del__(self):
        id(self)  # an audit event ("builtins.id") while the interpreter clears the modules' globals


json.late = Late()
print("done")
"""


def test_the_launch_audit_says_nothing_when_a_finalizer_runs_at_exit():
    """The audit hook (launch_audit.py `install`) is called for every audit event until the process
    ends, also while the interpreter clears the modules' globals at exit: a job object's finalizer
    calling id() then (torch 2.14's do, in every compiled job) must not print "Exception ignored in
    audit hook" into the job's stderr."""
    proc = subprocess.run([sys.executable, "-c", LATE_FINALIZER], capture_output=True, text=True, cwd=str(ROOT), timeout=60)
    assert proc.returncode == 0 and proc.stdout == "done\n"
    assert proc.stderr == ""
