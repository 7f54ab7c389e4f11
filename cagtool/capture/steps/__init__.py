"""Steps and backward calls: the step tracker (tracker.py), which runs the body of torch's backward
entry point as copied and pinned (engine_copy.py), and what it reads per step: figures that live on
the device (device_readings.py) and per-parameter gradient digests (grad_digest.py)."""
