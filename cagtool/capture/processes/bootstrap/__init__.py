"""The directory cagtool puts first on PYTHONPATH for the target (holds sitecustomize.py)."""
