"""The pure core of chaos.prefault: page runs from /proc text and pagemap bytes, their union, intersection and
wire format."""

from __future__ import annotations

import struct

from hypothesis import given
from hypothesis import strategies as st

from chaos import prefault
from chaos.prefault import PAGE

PRESENT, EXCLUSIVE = 1 << 63, 1 << 56


def pagemap(*entries: int) -> bytes:
    return b"".join(struct.pack("<Q", e) for e in entries)


def test_writable_spans_are_the_private_writable_mappings_only():
    """rw-p lines count (anonymous, heap, a library's data, a file whose name is not UTF-8); shared, read-only and
    executable ones do not."""
    maps = b"\n".join(line.encode() for line in [
        f"{1 * PAGE:x}-{3 * PAGE:x} rw-p 00000000 00:00 0 ",
        f"{3 * PAGE:x}-{4 * PAGE:x} r--p 00000000 08:01 12 /usr/lib/libc.so.6",
        f"{5 * PAGE:x}-{9 * PAGE:x} rw-s 00000000 00:05 7 /dev/shm/x",
        f"{9 * PAGE:x}-{10 * PAGE:x} r-xp 00000000 08:01 12 /usr/lib/libc.so.6",
        f"{10 * PAGE:x}-{12 * PAGE:x} rw-p 00001000 08:01 12 /usr/lib/libc.so.6",
        f"{20 * PAGE:x}-{21 * PAGE:x} rw-p 00000000 00:00 0 [heap]",
    ]) + f"\n{30 * PAGE:x}-{31 * PAGE:x} rw-p 00000000 08:01 13 /tmp/odd-".encode() + b"\xff"
    assert prefault.writable_spans(maps) == [(1, 3), (10, 12), (20, 21), (30, 31)]


def test_exclusive_runs_need_both_present_and_exclusive():
    """A page counts when present and mapped by this process alone; shared, absent or swapped pages do not."""
    data = pagemap(PRESENT | EXCLUSIVE, PRESENT | EXCLUSIVE | 123, PRESENT, EXCLUSIVE, 0,
                   PRESENT | EXCLUSIVE, PRESENT | EXCLUSIVE | (1 << 55), PRESENT | (1 << 61))
    assert prefault.exclusive_runs(data, 100) == [(100, 2), (105, 2)]
    assert prefault.exclusive_runs(b"", 7) == []


def test_union_joins_overlapping_and_adjacent_runs():
    """The union covers every page of both, once, in order."""
    assert prefault.union([(10, 5), (30, 2)], [(12, 10), (40, 1), (32, 1)]) == [(10, 12), (30, 3), (40, 1)]
    assert prefault.union([], [(5, 1)]) == [(5, 1)]
    assert prefault.union([(1, 10)], [(3, 2)]) == [(1, 10)]


def test_intersect_keeps_only_the_parts_inside_the_spans():
    """Runs are cut at span edges; a run outside every span disappears."""
    runs = [(0, 4), (6, 6), (20, 2), (30, 5)]
    spans = [(2, 8), (10, 21), (40, 50)]
    assert prefault.intersect(runs, spans) == [(2, 2), (6, 2), (10, 2), (20, 1)]
    assert prefault.intersect(runs, []) == []
    assert prefault.pages(prefault.intersect(runs, [(0, 100)])) == prefault.pages(runs) == 17


def _runs(draw_pairs) -> list[tuple[int, int]]:
    """Sorted disjoint (first, count) runs from (gap, length) pairs."""
    out, at = [], 0
    for gap, length in draw_pairs:
        at += gap
        out.append((at, length))
        at += length
    return out


def _pages(runs) -> set[int]:
    return {p for first, count in runs for p in range(first, first + count)}


@given(st.lists(st.tuples(st.integers(0, 6), st.integers(1, 6)), max_size=25),
       st.lists(st.tuples(st.integers(0, 12), st.integers(1, 20)), max_size=6))
def test_intersect_is_the_pages_in_both_as_sorted_disjoint_runs(runs, spans):
    """Whatever the runs and spans, the result covers exactly the pages in both, as sorted, disjoint runs."""
    runs = _runs(runs)
    spans = [(first, first + count) for first, count in _runs(spans)]
    cut = prefault.intersect(runs, spans)
    assert _pages(cut) == _pages(runs) & _pages([(a, b - a) for a, b in spans])
    assert all(count > 0 for _, count in cut)
    assert all(a + n <= b for (a, n), (b, _) in zip(cut, cut[1:]))


def test_a_report_round_trips_and_a_malformed_one_is_nothing():
    """encode/decode are inverses; a datagram that is not whole runs decodes to no runs, a run past the top of
    the address space to nothing."""
    runs = [(1, 2), (1 << 40, 7)]
    assert prefault.decode(prefault.encode(runs)) == runs
    assert prefault.decode(prefault.encode(runs)[:-1]) == []
    assert prefault.decode(b"") == []
    # a run past the top of the address space (anyone may send a datagram) is dropped, the others kept
    assert prefault.decode(prefault.encode([(1, 2), (prefault.TOP - 1, 2), (prefault.TOP - 1, 1)])) == [
        (1, 2), (prefault.TOP - 1, 1)]


def test_the_first_launches_then_every_power_of_two_learn():
    """Learning costs a launch ~1 ms and its copy ahead: the first three, then the 4th, 8th, 16th… launch report."""
    assert [n for n in range(1, 70) if prefault.Learner.learns(n)] == [1, 2, 3, 4, 8, 16, 32, 64]
