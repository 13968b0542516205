"""Build script for the optional C accelerator; all other metadata lives in pyproject.toml.

`optional=True`: on a machine without a C compiler the build step is skipped with a warning and
the pure-Python code (wire/records, wire/messages/runtime.py) is used instead (same results,
slower).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension("wire.records._speedups", ["wire/records/_speedups.c"], optional=True),
        Extension("wire.messages._codec", ["wire/messages/_codec.c"], optional=True),
    ],
)
