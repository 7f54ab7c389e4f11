"""Patches for a forward frame recompiled on a Python value (cagtool/verify/value_patches.py): the
guard texts are torch 2.13's own (TORCH_LOGS=recompiles on sample_scripts/scalar_per_step.py and a
module with a flag argument, a flag attribute and a global flag); the scripts are small files.
No torch job runs here; what a patched copy computes is checked against the script on real torch,
eagerly (tests/test_verify_fixes.py re-runs a compiled job)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import torch

from cagtool.record.schema import SourceRef
from cagtool.report.recompiles.explain import CAUSE_DYNAMO_FRAME, Cause
from cagtool.report.recompiles.table import SOURCE_DYNAMO_FRAME, RecompileRow, _user_frame_from_reasons
from cagtool.verify.patches import patch_for

SCALAR = textwrap.dedent("""\
    import torch


    class Scaled(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(8, 8)

        def forward(self, x, scale):
            return self.linear(x) * scale


    model = torch.compile(Scaled(), dynamic=False)
    for step in range(4):
        scale = 1.0 + 0.5 * step
        loss = model(x, scale).sum()
        loss.backward()
    """)
USE_LINE, CALL_LINE = 10, 16


def _row(script: Path, guard: str, line: int, function: str, code: str, caller: int | None, attempt: int = 1) -> RecompileRow:
    """A Dynamo recompile as the table reads it: torch's reason text (guard, `# code` comment, user
    stack), the guard's user frame parsed from it, and the caller line the record stores."""
    reason = (f"0/{attempt - 1}: {guard}                                             # {code}  # {script.name}:{line} in {function}\n"
              "User stack trace:\n"
              f'  File "{script}", line {line}, in {function}\n'
              f"    {code}")
    at = _user_frame_from_reasons([reason])
    called = SourceRef(str(script), caller, "", "main", "caller") if caller is not None else None
    return RecompileRow("ca", SOURCE_DYNAMO_FRAME, f"0/{attempt}", attempt, "guard_failure", (attempt,), messages=(reason,),
                        user_source=at, caller=called, frame_name=function)


def _cause(*rows: RecompileRow, consequences: tuple[int, ...] = ()) -> Cause:
    return Cause(CAUSE_DYNAMO_FRAME, list(rows), number=1, consequences=list(consequences))


def _scalar_patch(tmp_path: Path, text: str, code: str = "return self.linear(x) * scale", use: int = USE_LINE, call: int = CALL_LINE,
                  guard: str = "scale == 1.0", function: str = "forward"):
    script = tmp_path / "train.py"
    script.write_text(text)
    rows = [_row(script, guard.replace("1.0", v), use, function, code, call, attempt=i + 1) for i, v in enumerate(("1.0", "1.5"))]
    return patch_for(_cause(*rows, consequences=(2,)), str(script), "train.py", script.read_bytes())


def test_a_python_float_used_in_tensor_arithmetic_is_passed_as_a_tensor(tmp_path):
    patch = _scalar_patch(tmp_path, SCALAR)
    assert patch.name == "scalar-to-tensor" and patch.applicable and patch.why_not is None, patch.why_not
    assert patch.line == CALL_LINE and patch.who == "your code"
    assert patch.causes == (1, 2)  # the backward captured again because of it goes with it
    assert patch.title == "pass `scale` as a tensor where it is passed in: torch.tensor(scale, dtype=torch.get_default_dtype())"
    assert patch.diff.splitlines() == [
        "--- a/train.py",
        "+++ b/train.py",
        "@@ -13,5 +13,5 @@",
        " model = torch.compile(Scaled(), dynamic=False)",
        " for step in range(4):",
        "     scale = 1.0 + 0.5 * step",
        "-    loss = model(x, scale).sum()",
        "+    loss = model(x, torch.tensor(scale, dtype=torch.get_default_dtype())).sum()",
        "     loss.backward()",
    ]
    compile(patch.patched, "train.py", "exec")
    assert (tmp_path / "train.py").read_text() == SCALAR  # the user's file is never written


def test_a_keyword_argument_is_wrapped_in_place(tmp_path):
    patch = _scalar_patch(tmp_path, SCALAR.replace("model(x, scale)", "model(x, scale=scale * 2)"))
    assert patch.applicable, patch.why_not
    assert "+    loss = model(x, scale=torch.tensor(scale * 2, dtype=torch.get_default_dtype())).sum()" in patch.diff.splitlines()


def test_a_loop_bound_or_a_test_is_not_made_a_tensor(tmp_path):
    """`range(n)` and `if n > 3` need a Python number: a tensor there changes what the code does
    (the recompile storm's `range(depth)`)."""
    looped = SCALAR.replace("return self.linear(x) * scale", "for _ in range(scale):\n            x = x * 1.01\n        return x")
    patch = _scalar_patch(tmp_path, looped, code="for _ in range(scale):", guard="scale == 1")
    assert not patch.applicable and patch.patched is None and patch.diff == ""
    assert patch.why_not == ("`scale` is used at line 10 in `range(scale)`, not in tensor arithmetic: "
                             "a tensor there changes what the code does")
    tested = SCALAR.replace("return self.linear(x) * scale", "if scale > 1:\n            x = x * 2\n        return self.linear(x)")
    patch = _scalar_patch(tmp_path, tested, code="if scale > 1:")
    assert not patch.applicable and patch.why_not.startswith("`scale` is used at line 10 in `scale > 1`")


def test_arithmetic_with_a_constant_only_or_feeding_python_is_not_patched(tmp_path):
    patch = _scalar_patch(tmp_path, SCALAR.replace("return self.linear(x) * scale", "return self.linear(x) * (2 * scale)"),
                          code="return self.linear(x) * (2 * scale)")
    assert not patch.applicable and "combined only with a constant at line 10" in patch.why_not
    patch = _scalar_patch(tmp_path, SCALAR.replace("return self.linear(x) * scale", "return self.linear(x).view(x.size(0) * scale, -1)"),
                          code="return self.linear(x).view(x.size(0) * scale, -1)")
    assert not patch.applicable and patch.why_not.startswith("`scale` is combined at line 10 with `x.size(0)`, a Python number")
    patch = _scalar_patch(tmp_path, SCALAR.replace("return self.linear(x) * scale", "return self.linear(x).view(-1, self.k * scale)"),
                          code="return self.linear(x).view(-1, self.k * scale)")
    assert not patch.applicable and patch.why_not.startswith("the arithmetic on `scale` at line 10 feeds `self.linear(x).view(-1, ")
    patch = _scalar_patch(tmp_path, SCALAR.replace("return self.linear(x) * scale", "return torch.sigmoid(self.linear(x) * scale).sum()"),
                          code="return torch.sigmoid(self.linear(x) * scale).sum()")
    assert patch.applicable, patch.why_not


def test_a_call_site_that_cannot_be_read_says_why(tmp_path):
    patch = _scalar_patch(tmp_path, SCALAR.replace("model(x, scale)", "model(*batch)"))
    assert not patch.applicable and patch.why_not.startswith("the call at line 16 passes `*args` or `**kwargs`")
    patch = _scalar_patch(tmp_path, SCALAR, call=None)
    assert not patch.applicable and "no call site to edit" in patch.why_not
    # The diff is shown, but the copy would not run: torch is not a name the script has.
    patch = _scalar_patch(tmp_path, SCALAR.replace("import torch\n", "import torch as T\n").replace("torch.nn", "T.nn").replace("torch.compile", "T.compile"))
    assert not patch.applicable and patch.why_not.startswith("the script does not `import torch`")
    assert "+    loss = model(x, torch.tensor(scale, dtype=torch.get_default_dtype())).sum()" in patch.diff.splitlines()


def test_the_compiled_call_is_told_from_a_torch_call_on_its_line(tmp_path):
    """`model(torch.randn(4, 8), scale)`: torch.randn takes two arguments too, but a torch function
    is never the compiled one; and of two calls of the script's own, the one by the compiled
    function's name (`loss_fn(...)` for a compiled `def loss_fn`)."""
    patch = _scalar_patch(tmp_path, SCALAR.replace("model(x, scale)", "model(torch.randn(4, 8), scale)"))
    assert patch.applicable, patch.why_not
    assert "+    loss = model(torch.randn(4, 8), torch.tensor(scale, dtype=torch.get_default_dtype())).sum()" in patch.diff.splitlines()
    function = textwrap.dedent("""\
        import torch


        def prepare(a, b):
            return a


        @torch.compile
        def forward(x, scale):
            return x * scale


        for step in range(4):
            scale = 1.0 + 0.5 * step
            loss = forward(prepare(1, 2), scale).sum()
        """)
    patch = _scalar_patch(tmp_path, function, code="return x * scale", call=15)
    assert patch.applicable, patch.why_not
    assert "+    loss = forward(prepare(1, 2), torch.tensor(scale, dtype=torch.get_default_dtype())).sum()" in patch.diff.splitlines()


ARITHMETIC = textwrap.dedent("""\
    import torch


    def scaled(y, scale):
        return {use}


    torch.set_default_dtype({default})
    torch.manual_seed(0)
    y = {operand}
    out = []
    for step in range(3):
        scale = 1.0 / 3 + 0.1 * step
        out.append(scaled(y, scale))
    """)


@pytest.mark.parametrize("use, operand, default", [
    ("y * scale", "torch.randn(16)", "torch.float32"),
    ("y.square().mean() * scale", "torch.randn(16)", "torch.float32"),  # a 0-dim float32 loss, scaled
    ("scale * y.square().mean() - y.sum()", "torch.randn(16)", "torch.float32"),
    ("(y - scale) / (y.abs() + 1)", "torch.randn(16)", "torch.float32"),
    ("y * scale", "torch.arange(16)", "torch.float32"),  # an integer tensor: the result takes the default dtype
    ("y.sum() * scale", "torch.arange(16)", "torch.float64"),  # the default the script set, read at the call
    ("y.square().mean() * scale", "torch.randn(16)", "torch.float64"),
])
def test_the_patched_copy_computes_the_bits_the_python_float_did(tmp_path, use, operand, default):
    """The copy passes the float as a tensor of the default dtype when the call runs: where its
    value meets a float32 loss, an integer tensor or a tensor of the default dtype, every result has
    the dtype and the bits the script's own has (a float64 tensor made a scaled float32 loss
    float64, and an integer tensor's product float64)."""
    text = ARITHMETIC.format(use=use, operand=operand, default=default)
    patch = _scalar_patch(tmp_path, text, code=f"return {use}", use=5, call=14, function="scaled")
    assert patch.applicable, patch.why_not
    before = torch.get_default_dtype()
    try:
        plain: dict = {}
        exec(compile(text, "train.py", "exec"), plain)
        patched: dict = {}
        exec(compile(patch.patched, "train.py", "exec"), patched)
    finally:
        torch.set_default_dtype(before)
    assert [(o.dtype, o.shape) for o in patched["out"]] == [(o.dtype, o.shape) for o in plain["out"]]
    assert all(torch.equal(a, b) for a, b in zip(plain["out"], patched["out"])), (plain["out"], patched["out"])


def test_the_float_as_a_dividend_is_not_patched(tmp_path):
    """`scale / y`: torch computes a Python number over a tensor as `y.reciprocal() * scale`, a
    tensor over a tensor as a division; the last bits differ (they do, checked here)."""
    text = ARITHMETIC.format(use="scale / (y.abs() + 1)", operand="torch.randn(16)", default="torch.float32")
    patch = _scalar_patch(tmp_path, text, code="return scale / (y.abs() + 1)", use=5, call=14, function="scaled")
    assert not patch.applicable and patch.why_not == (
        "`scale` is divided by `y.abs() + 1` at line 5: torch computes a Python number over a tensor as the tensor's "
        "reciprocal times the number, a tensor over a tensor as a division, whose last bits differ")
    y = torch.randn(4096).abs() + 1
    assert not torch.equal(1.1 / y, torch.tensor(1.1) / y)


def test_a_value_from_elsewhere_is_not_patched(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(SCALAR)
    other = tmp_path / "lib.py"
    row = _row(other, "scale == 1.0", 3, "forward", "return x * scale", CALL_LINE)
    patch = patch_for(_cause(row), str(script), "train.py", script.read_bytes())
    assert not patch.applicable and patch.why_not.startswith(f"the guard on `scale` was installed in {other}, not in the script")
    patch = patch_for(_cause(_row(script, "scale == 1.0", USE_LINE, "forward", "x", CALL_LINE)), None, None, None)
    assert not patch.applicable and "not a script file" in patch.why_not
    two = [_row(script, "scale == 1.0", USE_LINE, "forward", "x", CALL_LINE), _row(script, "n == 3", USE_LINE, "forward", "x", CALL_LINE, 2)]
    patch = patch_for(_cause(*two), str(script), "train.py", script.read_bytes())
    assert not patch.applicable and patch.why_not.startswith("guards on several Python values failed (`scale`, `n`)")


FLAGS = textwrap.dedent("""\
    import torch

    FLAG = True


    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 4)
            self.use_relu = True

        def forward(self, x, flag):
            y = self.lin(x)
            if flag:
                y = y.relu()
            else:
                y = y.sigmoid()
            if self.use_relu:
                y = y + 1
            if FLAG:
                y = y * 2
            return y


    m = torch.compile(M(), backend="eager", dynamic=False)
    for step in range(4):
        out = m(x, step % 2 == 0)
    """)


def test_a_branch_on_a_flag_argument_is_shown_as_torch_where_never_applied(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(FLAGS)
    patch = patch_for(_cause(_row(script, "flag == True", 14, "forward", "if flag:", 27)), str(script), "train.py", script.read_bytes())
    assert patch.name == "branch-to-where" and not patch.applicable and patch.patched is None
    assert patch.why_not.startswith("torch.where computes both sides on every call and needs both to be tensors that broadcast")
    assert [l for l in patch.diff.splitlines() if l[:1] in "+-" and l[:3] not in ("+++", "---")] == [
        "-        if flag:",
        "-            y = y.relu()",
        "-        else:",
        "-            y = y.sigmoid()",
        "+        y = torch.where(flag, y.relu(), y.sigmoid())",
        "-    out = m(x, step % 2 == 0)",
        "+    out = m(x, torch.tensor(step % 2 == 0))",
    ]
    # Without an `else` the name keeps its value: torch.where(flag, y.relu(), y).
    script.write_text(FLAGS.replace("        else:\n            y = y.sigmoid()\n", ""))
    patch = patch_for(_cause(_row(script, "flag == True", 14, "forward", "if flag:", 25)), str(script), "train.py", script.read_bytes())
    assert "+        y = torch.where(flag, y.relu(), y)" in patch.diff.splitlines() and not patch.applicable


def test_a_branch_that_is_not_a_choice_of_values_keeps_its_why_not(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(FLAGS.replace("            y = y.relu()\n", "            y = y.relu()\n            print('relu')\n"))
    patch = patch_for(_cause(_row(script, "flag == True", 14, "forward", "if flag:", 28)), str(script), "train.py", script.read_bytes())
    assert not patch.applicable and patch.diff == ""
    assert patch.why_not == ("the `if` at line 14 does more than assign one name on one line in each branch: "
                             "torch.where can only replace a choice between two values")
    script.write_text(FLAGS.replace("        if flag:\n", "        if x is None:\n            y = x\n        elif flag:\n"))
    patch = patch_for(_cause(_row(script, "flag == True", 16, "forward", "elif flag:", 29)), str(script), "train.py", script.read_bytes())
    assert not patch.applicable and patch.diff == ""
    assert patch.why_not == "the branch at line 16 is an `elif`: its choice depends on the tests before it, not on `flag` alone"


def test_a_flag_attribute_or_global_has_no_call_site(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(FLAGS)
    patch = patch_for(_cause(_row(script, "self.use_relu == True", 18, "forward", "if self.use_relu:", 27)), str(script), "train.py", script.read_bytes())
    assert not patch.applicable and patch.diff == ""
    assert patch.why_not.startswith("`self.use_relu` is a module attribute read inside the compiled code, not an argument")
    patch = patch_for(_cause(_row(script, "G['FLAG'] == True", 20, "forward", "if FLAG:", 27)), str(script), "train.py", script.read_bytes())
    assert not patch.applicable and patch.why_not.startswith("`FLAG` is a global read inside the compiled code")


def test_a_forged_guard_never_puts_its_text_into_the_patched_copy(tmp_path):
    """The guard text and the user frame come from the record, which is not sealed: a forged guard
    carrying code (in its name, its value, or the frame's code line) makes no patch or one whose
    text is the script's own, with the fixed torch.tensor(...) around the script's own argument."""
    evil = "__import__('os').system('touch /tmp/cagtool-pwned')"
    applied = []
    for guard, code in ((f"{evil} == 1.0", "return self.linear(x) * scale"),
                        (f"scale == 1.0; {evil}", "return self.linear(x) * scale"),
                        ("L['scale'] == 1.0 or " + evil, "return self.linear(x) * scale"),
                        ("scale == 1.0", evil)):
        patch = _scalar_patch(tmp_path, SCALAR, code=code, guard=guard)
        assert evil not in (patch.patched or "") + patch.diff, guard
        applied.append(patch.applicable)
        if patch.applicable:
            changed = [(a, b) for a, b in zip(SCALAR.splitlines(), patch.patched.splitlines()) if a != b]
            assert changed == [("    loss = model(x, scale).sum()", "    loss = model(x, torch.tensor(scale, dtype=torch.get_default_dtype())).sum()")]
    assert applied == [False, False, False, True]  # a forged frame code line alone: the script's own edit
