"""The DataFrame API over a real record: the same numbers the record and the metrics hold."""

from cagtool.record.loader import load_run
from cagtool.report.frames import events_frame, steps_frame
from cagtool.report.figures.metrics import mode_metrics


def test_frames_match_the_record(record_run):
    run = record_run("graph_breaks.py", "3")
    ca = load_run(run.path).mode("ca")
    steps = steps_frame(ca)
    assert list(steps.index) == [0, 1, 2]  # as the script's range(3) numbers them
    metrics = mode_metrics(ca)
    steady = steps.loc[~steps["compile_affected"], "iteration_s"].dropna()
    assert len(steady) == metrics.step_time.count
    assert steady.median() == metrics.step_time.median_s
    graphs = events_frame(ca, "ca_graph")
    assert len(graphs) == 1 and graphs.loc[0, "compile_id"] == "!0"
    misses = events_frame(ca, "ca_cache_miss")
    assert misses.loc[0, "node"] == "torch::autograd::GraphRoot" and misses.loc[0, "key_size"] == 39
