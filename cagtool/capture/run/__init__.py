"""A `cagtool run`: the run directory and one fresh process per mode, interleaved (orchestrate.py);
one mode in its process (child.py), running the user's program as python would (target.py; the
file `-m` runs is found as runpy finds it, main_module.py), with the same stdin (stdin_feed.py)
and random state (seeding.py) in every mode; the live status line (status.py)."""
