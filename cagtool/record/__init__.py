"""The run record shared by capture (which writes it) and report (which reads it)."""
