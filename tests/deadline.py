"""What tests of hostile files share: a body that would hang fails instead (SIGALRM, the main thread only)."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


@contextmanager
def deadline(seconds: float) -> Iterator[None]:
    """Fail (TimeoutError) instead of hanging when the body runs past `seconds`."""
    def expire(signum: int, frame: Any) -> None:
        raise TimeoutError(f"still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
