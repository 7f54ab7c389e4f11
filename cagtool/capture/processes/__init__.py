"""The processes of a job: following every Python process the target starts (follow.py, bootstrap/,
launch_audit.py), who a process is (identity.py), and signals and parent death (lifeline.py)."""
