"""`--max-grad-diff` / `max-grad-diff`: the threshold grammar (a multiple of the parity tolerance)."""

from __future__ import annotations

import pytest

from cagtool.errors import UsageError
from cagtool.report.gate.config import settings_from_values


@pytest.mark.parametrize("given, scale", [("1", 1.0), ("2x", 2.0), ("auto", 1.0), (0.5, 0.5), (3, 3.0)])
def test_max_grad_diff_reads_a_multiple_of_the_tolerance(given, scale):
    settings = settings_from_values({"max_grad_diff": given}, "flag")
    assert settings.max_grad_diff == scale and settings.has_thresholds()


@pytest.mark.parametrize("given", ["0", "-1", "lots", "inf", True])
def test_max_grad_diff_refuses_what_is_not_a_positive_multiple(given):
    with pytest.raises(UsageError, match="max-grad-diff"):
        settings_from_values({"max-grad-diff": given}, "flag")


def test_config_key_is_read_from_pyproject(tmp_path):
    from cagtool.report.gate.config import load_config

    path = tmp_path / "pyproject.toml"
    path.write_text("[tool.cagtool.gate]\nmax-grad-diff = 2\n")
    assert load_config(path).max_grad_diff == 2.0
