"""`make demo` (demo/run.py) and its parts."""
