"""An exception in words (issue 40: a dry run's plan said `plan failed:
FileNotFoundError(2, 'No such file or directory')`, naming no path)."""

from __future__ import annotations

import errno
import os

from guardian.core.errors import GuardianError, in_words


def test_an_oserror_says_its_reason_and_path() -> None:
    exc = FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), "/proc/irq")
    assert in_words(exc) == "No such file or directory: /proc/irq"


def test_guardians_own_error_is_its_message_and_others_name_their_type() -> None:
    assert in_words(GuardianError("the budget is spent")) == "the budget is spent"
    assert in_words(ValueError("bad")) == "ValueError: bad" and in_words(KeyError()) == \
        "KeyError"
