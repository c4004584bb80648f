"""Tests of agent.session.ids: UUIDv7 layout (RFC 9562) and per-process uniqueness and monotonicity (SPEC §13.6)."""

from __future__ import annotations

import os
import re
import threading
import time
import uuid

from agent.session import ids

UUID7 = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")


def _ms(value: str) -> int:
    return uuid.UUID(value).int >> 80


def _counter(value: str) -> int:
    n = uuid.UUID(value).int
    return (((n >> 64) & 0xFFF) << 30) | ((n >> 32) & ((1 << 30) - 1))


class TestAllocateId:
    def test_matches_the_spec_pattern(self):
        """Every ID is a lowercase UUIDv7 with version 7 and variant 10, as SPEC §2.7 requires."""
        for _ in range(1000):
            value = ids.allocate_id()
            assert UUID7.match(value), value
            parsed = uuid.UUID(value)
            assert parsed.version == 7
            assert parsed.variant == uuid.RFC_4122

    def test_embeds_the_current_unix_milliseconds(self):
        """The 48 leading bits are the wall-clock epoch milliseconds at allocation."""
        before = time.time_ns() // 1_000_000
        value = ids.allocate_id()
        after = time.time_ns() // 1_000_000
        assert before <= _ms(value) <= after + 1

    def test_is_unique_and_strictly_increasing_in_a_tight_loop(self):
        """Many IDs within the same milliseconds are all distinct and sort in allocation order."""
        values = [ids.allocate_id() for _ in range(50_000)]
        assert len(set(values)) == len(values)
        assert values == sorted(values)
        # The loop is far faster than 1 ms per ID, so the counter (not luck) must have separated most of them.
        assert len({_ms(v) for v in values}) < len(values)

    def test_is_unique_across_threads(self):
        """Threads allocating concurrently never receive the same ID."""
        results: list[list[str]] = [[] for _ in range(4)]

        def work(out: list[str]) -> None:
            out.extend(ids.allocate_id() for _ in range(5000))

        threads = [threading.Thread(target=work, args=(out,)) for out in results]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        everything = [v for out in results for v in out]
        assert len(set(everything)) == len(everything) == 20_000


class TestGenerator:
    def test_stays_monotonic_when_the_clock_steps_back(self, monkeypatch):
        """A wall clock that jumps backwards keeps the last timestamp and counts on, so IDs still increase."""
        clock = iter([5_000_000_000_000_000, 4_000_000_000_000_000, 3_000_000_000_000_000])
        monkeypatch.setattr(ids.time, "time_ns", lambda: next(clock))
        generator = ids._Generator()
        first, second, third = generator.next(), generator.next(), generator.next()
        assert first < second < third
        assert _ms(first) == _ms(second) == _ms(third) == 5_000_000_000
        assert _counter(second) == _counter(first) + 1 and _counter(third) == _counter(first) + 2

    def test_borrows_the_next_millisecond_on_counter_rollover(self, monkeypatch):
        """When the 42-bit counter overflows within one millisecond, the timestamp advances by one."""
        monkeypatch.setattr(ids.time, "time_ns", lambda: 7_000_000_000_000_000)
        generator = ids._Generator()
        first = generator.next()
        generator._counter = ids._COUNTER_MAX
        rolled = generator.next()
        assert _ms(rolled) == _ms(first) + 1
        assert rolled > first
        assert _counter(rolled) <= ids._SEED_MASK

    def test_seeds_each_new_millisecond_with_the_top_counter_bit_clear(self, monkeypatch):
        """A fresh millisecond's counter leaves at least 2^41 increments of headroom (RFC 9562 §6.2)."""
        ticks = iter(range(1_000_000_000_000_000, 2_000_000_000_000_000, 1_000_000))
        monkeypatch.setattr(ids.time, "time_ns", lambda: next(ticks))
        generator = ids._Generator()
        assert all(_counter(generator.next()) <= ids._SEED_MASK for _ in range(500))

    def test_forked_child_restarts_the_counter(self):
        """A child forked after allocations starts from a reset state, not from its parent's counter."""
        ids.allocate_id()
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:  # child: report whether the state was reset, then exit without running pytest teardown
            try:
                os.write(write_end, b"reset" if ids._GENERATOR._last_ms == -1 else b"kept")
            finally:
                os._exit(0)
        os.close(write_end)
        try:
            answer = os.read(read_end, 16)
        finally:
            os.close(read_end)
            os.waitpid(pid, 0)
        assert answer == b"reset"
