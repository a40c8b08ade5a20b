"""The one base of guardian's own errors."""

from __future__ import annotations


class GuardianError(Exception):
    """An error guardian raises on purpose: its message is fit for a user as it stands
    (what failed, where, and what to do where that is known), so a caller shows
    ``str(exc)`` and never a traceback. A subclass may keep a built-in second base
    (``ValueError``, ``RuntimeError``) that callers already catch it by."""


def in_words(exc: BaseException) -> str:
    """An exception as a person reads it: a GuardianError's own message; an OSError's
    reason and the path it concerns (``No such file or directory: /proc/irq``, never
    ``FileNotFoundError(2, ...)``); otherwise its type and message."""
    if isinstance(exc, GuardianError):
        return str(exc)
    if isinstance(exc, OSError) and exc.strerror:
        where = [str(f) for f in (exc.filename, exc.filename2) if f is not None]
        return exc.strerror + (f": {' -> '.join(where)}" if where else "")
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
