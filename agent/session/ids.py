"""UUIDv7 allocation for every ID the agent writes (SPEC §2.7, §13.6).

Invariant: IDs allocated by one process are unique and strictly increasing. Layout per RFC 9562 §5.7:
48-bit big-endian Unix milliseconds, version nibble 7, variant bits ``10``, then 74 bits. Of those we use the
fixed-length dedicated counter of RFC 9562 §6.2 Method 1: the 12 ``rand_a`` bits plus the top 30 bits of
``rand_b`` form a 42-bit counter, the last 32 bits are fresh ``os.urandom`` bytes on every call. Within a process
the pair (timestamp, counter) strictly increases, so uniqueness does not depend on luck; the random tail keeps
IDs of different processes (including a forked child, which also gets a reseeded counter) apart.

What this module does not do: it does not promise uniqueness across the file — the reducer enforces that
(``DUPLICATE_ID``) — and it does not parse or validate IDs. Standard library only: the agent's start path imports it.
"""

from __future__ import annotations

import os
import threading
import time

_COUNTER_BITS = 42
_COUNTER_MAX = (1 << _COUNTER_BITS) - 1
# RFC 9562 §6.2 ("Fixed Bit-Length Dedicated Counter"): seed each new millisecond's counter randomly but with its
# top bit clear, so that at least 2^41 increments fit before rollover within one millisecond.
_SEED_MASK = (1 << (_COUNTER_BITS - 1)) - 1


class _Generator:
    """Monotonic UUIDv7 state of one process: the last timestamp used and the counter within it."""

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        # Also a fresh lock: a child forked while another thread held the old one would otherwise deadlock.
        self._lock = threading.Lock()
        self._last_ms = -1
        self._counter = 0

    def _seed(self) -> int:
        return int.from_bytes(os.urandom(6), "big") & _SEED_MASK

    def next(self) -> str:
        with self._lock:
            now = time.time_ns() // 1_000_000
            if now > self._last_ms:
                self._last_ms = now
                self._counter = self._seed()
            else:
                # Same millisecond, or the wall clock stepped backwards (NTP): keep the last timestamp and count
                # on, so IDs keep increasing (RFC 9562 §6.2, monotonicity over clock regressions).
                self._counter += 1
                if self._counter > _COUNTER_MAX:
                    # Counter rollover: borrow the next millisecond (RFC 9562 §6.2 "Counter Rollover Handling").
                    self._last_ms += 1
                    self._counter = self._seed()
            ms, counter = self._last_ms, self._counter
        tail = int.from_bytes(os.urandom(4), "big")
        rand_a = counter >> 30                      # top 12 counter bits
        rand_b = ((counter & ((1 << 30) - 1)) << 32) | tail  # low 30 counter bits, then 32 random bits
        value = ((ms & 0xFFFF_FFFF_FFFF) << 80) | (0x7 << 76) | (rand_a << 64) | (0b10 << 62) | rand_b
        h = f"{value:032x}"
        return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


_GENERATOR = _Generator()
# A forked child inherits the counter state; reseed it so parent and child never walk the same (ms, counter)
# sequence with only the random tail to tell them apart.
os.register_at_fork(after_in_child=_GENERATOR._reset)


def allocate_id() -> str:
    """A fresh lowercase UUIDv7, greater than every ID this process allocated before."""
    return _GENERATOR.next()
