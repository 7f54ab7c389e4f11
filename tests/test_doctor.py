"""`cagtool doctor` on this machine (real torch, real compiler), and its failures on real broken setups."""

from __future__ import annotations

import json
import subprocess

import pytest

from conftest import ROOT, cagtool_cmd

from cagtool.doctor import FAIL, OK, VERIFIED_TORCH, check_cxx, check_inductor_cache, check_runs_dir


@pytest.mark.slow
def test_doctor_passes_here_and_says_why_in_json():
    proc = subprocess.run(cagtool_cmd("doctor", "--format", "json"), capture_output=True, text=True, cwd=str(ROOT), timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(proc.stdout)
    assert report["format"] == "cagtool-doctor" and report["ok"] is True
    checks = {c["name"]: c for c in report["checks"]}
    assert list(checks) == ["python", "torch", "backward entry", "c++ compiler", "ca capture", "inductor cache", "runs dir"]
    assert checks["backward entry"]["status"] == "ok" and checks["backward entry"]["facts"]["diff"] == ""
    assert checks["torch"]["facts"]["missing"] == []
    # Doctor says whether compat/check_torch.py verified this torch (docs/compat.md); the pinned
    # one (constraints.txt) always is.
    import torch

    release = torch.__version__.split("+")[0]
    verified = release in VERIFIED_TORCH
    assert checks["torch"]["facts"]["verified"] is verified
    assert (": verified;" if verified else ": not verified") in checks["torch"]["detail"]
    pinned = (ROOT / "constraints.txt").read_text().split("torch==", 1)[1].split()[0]
    assert pinned in VERIFIED_TORCH
    capture = checks["ca capture"]["facts"]
    assert capture["kinds"] == ["new_node", "changed_shapes"]
    assert [name.startswith("CompiledAutograd") for name in capture["graphs"]] == [True, True]
    assert checks["runs dir"]["facts"]["path"] == str((ROOT / ".cagtool" / "runs").resolve())


def test_doctor_fails_on_a_compiler_inductor_cannot_find():
    import torch._inductor.config as inductor_config
    from torch._inductor import cpp_builder

    saved = inductor_config.cpp.cxx
    inductor_config.cpp.cxx = (None, "/nonexistent/g++")
    cpp_builder.cpp_compiler_search.cache_clear()
    try:
        check = check_cxx()
    finally:
        inductor_config.cpp.cxx = saved
        cpp_builder.cpp_compiler_search.cache_clear()
    assert check.status == FAIL and "/nonexistent/g++" in check.detail and "--backend eager" in check.detail
    assert check_cxx().status == OK


def test_doctor_fails_where_runs_cannot_be_written(tmp_path):
    (tmp_path / ".cagtool").write_text("a file where the runs directory would go")
    check = check_runs_dir(tmp_path)
    assert check.status == FAIL and "-o DIR" in check.detail
    assert check_runs_dir(tmp_path / "fresh").status == OK


def test_doctor_says_whether_the_jobs_inductor_cache_holds_its_isa_checks(tmp_path):
    """The job's Inductor cache (TORCHINDUCTOR_CACHE_DIR) with no ISA check: the next run's modes
    each compile them, said so, never a failure; with one (as torch lays it out): kept, counted."""
    empty = check_inductor_cache({"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "cache")})
    assert empty.status == OK and empty.facts == {"path": str(tmp_path / "cache"), "isa_checks": 0}
    assert "no CPU ISA checks yet; the next Inductor run's modes each compile them" in empty.detail
    (tmp_path / "cache" / "ab").mkdir(parents=True)
    (tmp_path / "cache" / "ab" / "cabcheck.cpp").write_text('extern "C" void __avx_chk_kernel() {}\n')
    (tmp_path / "cache" / "ab" / "cabcheck.so").write_bytes(b"\x7fELF")
    kept = check_inductor_cache({"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "cache")})
    assert kept.status == OK and kept.facts["isa_checks"] == 1 and "1 CPU ISA checks kept" in kept.detail
