"""When to stop asking a model server: a wrong address fails at once, a dead server within a bound.

Retrying is right for a server that answered before and is busy or briefly gone (429, 5xx, a timeout,
a dropped connection). It is wrong in two cases, which :class:`Breaker` tells apart for one backend
(one base URL), shared by every thread and event loop that calls it:

- **never answered**: a refused connection or an unknown host before the server has sent any HTTP
  response (the first call of a run) is a configuration error (a wrong port or URL, a server not
  started): :meth:`Breaker.refused` opens the breaker at once and the caller raises one line naming
  the URL;
- **stopped answering**: connection failures and timeouts with no HTTP response in between, for
  ``seconds`` since the first of them started, open the breaker (a timeout "starts" when it expires:
  one slow answer, a long prompt on a CPU server, is not a dead server; the caller passes that
  time). Callers check :meth:`Breaker.check`
  before every attempt and never sleep past that moment, so every request in flight gives up within
  ``seconds`` (plus one request's ``timeout`` where a request hangs), and every later one at once,
  instead of each paying the full backoff.

An open breaker lets a request through again ``seconds`` after it opened (one probe: a long-lived
process recovers when the server comes back); a failure of that probe opens it again at once.
Any HTTP response, an error status included, shows the server is there and closes the breaker.
"""

from __future__ import annotations

import socket
import threading
import time
from typing import Callable


def refused_or_unknown(e: BaseException) -> str | None:
    """``"refused the connection"`` or ``"is an unknown host"`` where ``e`` (or an exception it was
    raised from) is a refused TCP connection or a failed host-name lookup; else None (a reset or a
    timeout: the server may be there)."""
    seen: set[int] = set()
    x: BaseException | None = e
    while x is not None and id(x) not in seen:
        seen.add(id(x))
        if isinstance(x, ConnectionRefusedError):
            return "refused the connection"
        if isinstance(x, socket.gaierror):
            return "is an unknown host"
        x = x.__cause__ or x.__context__
    return None


class Breaker:
    """The health of one server as its callers see it (see the module docstring).

    Args:
        seconds: how long connection failures may go on, with no HTTP response in between, before the
            breaker opens; None: never (a request gives up only after its own retries).
        clock: monotonic seconds (tests pass a fake one).
    """

    def __init__(self, seconds: float | None = 60.0, clock: Callable[[], float] = time.monotonic):
        self.seconds, self.clock = seconds, clock
        self.answered = False  # the server has sent at least one HTTP response
        self.failing_since: float | None = None  # start of the first failed attempt since the last response
        self.opened_at: float | None = None
        self.reason = ""  # why it opened, in words: the message every refused caller gets
        self._lock = threading.Lock()

    def check(self) -> str | None:
        """The reason to give up now, or None to go ahead (an open breaker lets one probe through
        ``seconds`` after it opened)."""
        with self._lock:
            if self.opened_at is None:
                return None
            if self.seconds is not None and self.clock() - self.opened_at >= self.seconds:
                self.opened_at = None  # half-open: this attempt probes; a failure reopens at once
                return None
            return self.reason

    def alive(self) -> None:
        """The server sent an HTTP response (any status): it is there."""
        with self._lock:
            self.answered, self.failing_since, self.opened_at = True, None, None

    def refused(self, reason: str) -> bool:
        """A refused connection or unknown host; True (and open) when the server never answered."""
        with self._lock:
            if self.answered:
                return False
            self.opened_at, self.reason = self.clock(), reason
            return True

    def failed(self, started: float, reason: str) -> bool:
        """A connection failure or timeout of an attempt that started at ``started``; True when it
        opens the breaker (failures have gone on for ``seconds``)."""
        with self._lock:
            self.failing_since = started if self.failing_since is None else min(self.failing_since, started)
            if self.seconds is not None and self.clock() - self.failing_since >= self.seconds:
                self.opened_at, self.reason = self.clock(), reason
                return True
            return False

    def wait_cap(self) -> float | None:
        """The longest a retry may sleep before the breaker would open (None: no cap)."""
        with self._lock:
            if self.seconds is None or self.failing_since is None:
                return None
            return max(0.0, self.failing_since + self.seconds - self.clock())
