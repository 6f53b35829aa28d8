"""grove's release, the version of its wheel (tools/build_wheel.py reads this line)."""
__version__ = "0.1.0"
