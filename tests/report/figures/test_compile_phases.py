"""Compile phases as torch's cumulative times nest them: the terminal's lines, golden."""

from cagtool.report.figures.compile_phases import phase_lines, phase_tree


def test_phases_nest_and_empty_ones_are_left_out():
    phases = {"dynamo": 1.57, "aot": 0.38, "inductor": 0.0, "ca_capture": 0.30}
    assert phase_lines(phases, 1.87) == [
        "compile: 1.87 s",
        "  Dynamo 1.57 s",
        "    AOTAutograd 0.38 s (inside Dynamo)",
        "  CA capture 0.30 s",
    ]
    rows = phase_tree({**phases, "inductor": 0.2}, 1.87)
    assert [(r.key, r.depth, r.inside) for r in rows] == [
        ("total", 0, ""), ("dynamo", 1, "compile"), ("aot", 2, "Dynamo"), ("inductor", 3, "AOTAutograd"), ("ca_capture", 1, "compile"),
    ]


def test_no_compile():
    assert phase_lines({}, 0.0) == ["compile: 0.00 s"]
