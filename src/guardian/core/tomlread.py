"""The standard TOML parser: ``tomllib`` from Python 3.11, the ``tomli`` package (the same
parser) on 3.10."""

import sys

if sys.version_info >= (3, 11):
    from tomllib import TOMLDecodeError, loads
else:  # pragma: no cover - exercised by the 3.10 run
    from tomli import TOMLDecodeError, loads

__all__ = ["TOMLDecodeError", "loads"]
