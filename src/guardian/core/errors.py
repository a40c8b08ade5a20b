"""The one base of guardian's own errors."""

from __future__ import annotations


class GuardianError(Exception):
    """An error guardian raises on purpose: its message is fit for a user as it stands
    (what failed, where, and what to do where that is known), so a caller shows
    ``str(exc)`` and never a traceback. A subclass may keep a built-in second base
    (``ValueError``, ``RuntimeError``) that callers already catch it by."""
