"""Reading run records and rendering them. Never imports cagtool.capture."""
