"""The exit codes of every ``guardian`` command and of the service.

The numbers are an interface: scripts and probes read 0 and 1, and the systemd unit's
``RestartPreventExitStatus=78`` keeps the service from restarting into a configuration
it refused. The service's refusals are the sysexits.h codes (``EX_CONFIG``...)."""

from __future__ import annotations

import enum

__all__ = ["ExitCode"]


class ExitCode(enum.IntEnum):
    OK = 0
    # the command ran and found a problem: a rule error, a failed test or action, an
    # unhealthy service, a refusal
    FAILED = 1
    # what was asked cannot be done as given: a bad argument, an unknown action, an
    # unreadable recording, an output file that exists
    USAGE = 2
    # `guardian health`: the service runs, but cannot see everything (a blind rule, a
    # source unavailable or failing); a liveness probe asks `--live`, which exits 0 then
    DEGRADED = 3
    # what the command must ask could not be asked: the Kubernetes API (`guardian
    # breaker`, `guardian holds`) with no credentials that reach it, not answering, or
    # refusing; the answer is unknown (never "nothing tripped" or "no holds")
    UNAVAILABLE = 69  # EX_UNAVAILABLE
    CANTCREAT = 73  # EX_CANTCREAT: an output file (the audit log) cannot be created
    TEMPFAIL = 75  # EX_TEMPFAIL: try again later (the metrics port is taken for now)
    CONFIG = 78  # EX_CONFIG: a configuration error; the unit does not restart on it
    INTERRUPTED = 130  # 128 + SIGINT, as a shell reports Ctrl-C
