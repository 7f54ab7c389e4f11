"""Steps and backward calls. The step tracker (tracker.py) installs hooks on torch (hooks.py: the
backward entry point, run as torch's body copied and pinned by engine_copy.py, and the optimizer
hooks) that only note what happened (notes.py); its drain counts the notes into steps
(boundaries.py), times them (timing.py), reads their losses (losses.py) and queues their lines for
the writer (lines.py). Beside it: what it finds about the job (findings.py), the final norms
(final_state.py), figures that live on the device (device_readings.py) and per-parameter gradient
digests (grad_digest.py)."""
