"""What each compile left, by torch's compile id: tlparse's per-compile page (the stack it came
from, the Dynamo graph, the AOT graphs, Inductor's code, the guards) from a run record."""

from cagtool.report.compiles.detail import CompileDetail, compile_details, detail_command, find_detail, parse_compile_id

__all__ = ["CompileDetail", "compile_details", "detail_command", "find_detail", "parse_compile_id"]
