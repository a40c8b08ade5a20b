"""guardian.hostio.nvml's Sessions: the handshake that shuts every NVML session of the
process down while a GPU is reset, over the recorded NVML (tests/support/nvml_recorded.py;
no GPU in this session). nvml.h, nvmlShutdown: "This method should be called after NVML
work is done, once for each call to nvmlInit() A reference count of the number of
initializations is maintained. Shutdown only occurs when the reference count reaches
zero." """

from __future__ import annotations

import copy
import threading
from typing import Any

import pynvml
import pytest

from guardian.hostio.nvml import Nvml, NvmlReleased, Reading, Sessions
from tests.support.nvml_recorded import RecordedNvml, load

H100 = load("h100x8.json")


def _open(fake: RecordedNvml) -> int:
    """Sessions open in the recorded library: nvmlInit calls not matched by nvmlShutdown."""
    return fake.calls.count("nvmlInit") - fake.calls.count("nvmlShutdown")


class _Held(RecordedNvml):
    """The recorded NVML whose first device count waits until the test lets it go: a
    source read in progress on another thread."""

    def __init__(self, rec: dict[str, Any]) -> None:
        super().__init__(rec)
        self.reading, self.go = threading.Event(), threading.Event()

    def nvmlDeviceGetCount(self) -> int:
        if not self.reading.is_set():
            self.reading.set()
            assert self.go.wait(30)
        self.calls.append("count")
        return super().nvmlDeviceGetCount()


class _Spy:
    """A lock that says when a thread asks for it."""

    def __init__(self, lock: Any) -> None:
        self.lock, self.asked = lock, threading.Event()

    def __enter__(self) -> None:
        self.asked.set()
        self.lock.acquire()

    def __exit__(self, *exc: object) -> None:
        self.lock.release()


def test_a_read_under_way_ends_before_the_release_shuts_its_session() -> None:
    """The loop's read holds the lock for one bounded read: a release asked meanwhile
    waits for it (its event set is never freed under it), then shuts the session; the
    next read after the release opens NVML anew."""
    fake = _Held(copy.deepcopy(H100))
    sessions = Sessions()
    nvml = Nvml(fake, sessions)
    nvml.start()
    got: list[Reading] = []
    released: list[int] = []
    reader = threading.Thread(target=lambda: got.append(nvml.read()))
    reader.start()
    assert fake.reading.wait(30)  # the read holds the lock now
    spy = _Spy(sessions.lock)
    sessions.lock = spy  # type: ignore[assignment]  # the reader releases the real one

    def release() -> None:
        with sessions.released("NVML released for a GPU reset of 0000:3a:00.0") as r:
            released.append(r.sessions)
            released.append(_open(fake))

    releaser = threading.Thread(target=release)
    releaser.start()
    assert spy.asked.wait(30)
    assert "nvmlShutdown" not in fake.calls  # waiting for the read
    fake.go.set()
    reader.join(30)
    releaser.join(30)
    [reading] = got
    assert reading.count == 8 and not reading.failures
    assert fake.calls.index("nvmlShutdown") > fake.calls.index("count")
    assert released == [1, 0]  # one session shut; none open while released
    sessions.lock = spy.lock
    assert nvml.read().count == 8 and _open(fake) == 1  # opened anew


def test_while_released_no_session_opens_and_a_second_release_is_refused() -> None:
    fake = RecordedNvml(copy.deepcopy(H100))
    sessions = Sessions()
    why = "NVML released for a GPU reset of 0000:3a:00.0"
    with sessions.released(why) as r:
        assert r.sessions == 0
        with pytest.raises(NvmlReleased, match=why):
            Nvml(fake, sessions).start()
        with pytest.raises(NvmlReleased, match=why):
            Nvml(fake, sessions).read()
        with pytest.raises(NvmlReleased, match=why), sessions.released("another"):
            pass
    assert fake.calls.count("nvmlInit") == 0
    Nvml(fake, sessions).start()  # after it, as before
    assert _open(fake) == 1


class _Refuses(RecordedNvml):
    def nvmlShutdown(self) -> None:
        super().nvmlShutdown()
        raise pynvml.NVMLError(pynvml.NVML_ERROR_UNKNOWN)


def test_a_shutdown_nvml_refuses_is_said_and_the_session_still_counts_closed() -> None:
    sessions = Sessions()
    nvml = Nvml(_Refuses(copy.deepcopy(H100)), sessions)
    nvml.start()
    with sessions.released("why") as r:
        assert (r.sessions, r.failures) == (1, ["nvmlShutdown: NVML UNKNOWN"])
    assert not nvml.opened and sessions.open == []
