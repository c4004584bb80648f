"""The pages a zygote's launches write, learned from launches that exit, and copied ahead in its spare.

Why. A forked launch starts out sharing every page with its zygote, and the first write to each costs a
copy-on-write fault: ~4-5 µs on these VMs (the fault leaves the guest), ~900-1,100 pages for a resume of the bundled
agent, half of its hand-off → first barrier. A spare waits idle, off every launch's path (``chaos.zygote``), so it
can take those copies before its launch arrives: ``MADV_POPULATE_WRITE`` (Linux 5.14) breaks copy-on-write for a
whole range in one call, with no fault per page. Only the pages launches write: copying every resident private page
of the zygote (~3,200 here) cost a spare ~9 ms of CPU, more than the faults it saves when both cores are busy.

How they are learned. A launch chosen to learn (the zygote's first ones, then every power of two) that exits by
itself, not killed, reads its own ``/proc/self/pagemap`` before it exits: a page of a private writable mapping that
is present and mapped by this process alone (``PM_MMAP_EXCLUSIVE``, bit 56; soft-dirty bits are not kept by this
kernel) was copied or first touched since the fork — or the zygote wrote its own copy meanwhile, which a launch
then likely writes too. The launch sends those page runs in one datagram to the zygote's abstract Unix socket
(no file to leave behind, gone with the zygote); the zygote keeps their union, and each later spare copies it.

Nothing here changes what a launch computes: populating copies each page's content as it is; only the private
writable mappings the spare has (``/proc/self/maps``) are touched, whatever was learned; and every failure (a kernel
without the advice: EINVAL; a run no longer mapped; a lost datagram) only leaves the faults to the launch, as before.

Stdlib only: the zygote imports it before its preload.
"""

from __future__ import annotations

import array
import os
import re
import socket
from collections.abc import Iterable, Sequence

PAGE = os.sysconf("SC_PAGE_SIZE")
MADV_POPULATE_WRITE = 23  # <linux/mman.h>, Linux >= 5.14
_PRESENT_EXCLUSIVE = 0x81  # bits 63 and 56 of a pagemap entry, as bits 7 and 0 of its last (little-endian) byte
_FLAGS = bytes(1 if b & _PRESENT_EXCLUSIVE == _PRESENT_EXCLUSIVE else 0 for b in range(256))
_RUN = re.compile(rb"\x01+")
# One report is one datagram (AF_UNIX keeps datagrams whole up to the sender's buffer, ~208 KiB by default):
# 4,096 runs of 16 bytes is 64 KiB. A launch with more runs than that sends none (learning is best effort).
MAX_RUNS = 4096
# Which launches learn: a zygote's first few (its union fills), then every power of two (a workload that changes
# over a nightly is seen again), so learning costs a launch ~1 ms a few dozen times in a whole campaign.
FIRST_LEARNERS = 8

Runs = list[tuple[int, int]]  # (first page number, page count), sorted, disjoint


# ---- pure: runs over page numbers ----------------------------------------------------------------------------


def writable_spans(maps: str) -> list[tuple[int, int]]:
    """(first page, end page) of every private writable mapping in a ``/proc/PID/maps`` text."""
    spans = []
    for line in maps.splitlines():
        fields = line.split(None, 2)
        if len(fields) >= 2 and fields[1].startswith("rw") and fields[1].endswith("p"):
            start, _, end = fields[0].partition("-")
            spans.append((int(start, 16) // PAGE, int(end, 16) // PAGE))
    return spans


def exclusive_runs(pagemap: bytes, first: int) -> Runs:
    """Runs of pages present and exclusively mapped, from ``pagemap`` entries (8 bytes each) of pages ``first``…"""
    flags = pagemap[7::8].translate(_FLAGS)
    return [(first + m.start(), m.end() - m.start()) for m in _RUN.finditer(flags)]


def union(a: Iterable[tuple[int, int]], b: Iterable[tuple[int, int]]) -> Runs:
    """The runs covering every page of ``a`` and of ``b`` (adjacent runs joined)."""
    out: Runs = []
    for first, count in sorted([*a, *b]):
        if out and first <= out[-1][0] + out[-1][1]:
            last_first, last_count = out[-1]
            out[-1] = (last_first, max(last_count, first + count - last_first))
        else:
            out.append((first, count))
    return out


def intersect(runs: Sequence[tuple[int, int]], spans: Sequence[tuple[int, int]]) -> Runs:
    """The parts of ``runs`` inside ``spans`` ((first, end) pairs), both sorted."""
    out: Runs = []
    i = 0
    for start, end in sorted(spans):
        while i < len(runs) and runs[i][0] + runs[i][1] <= start:
            i += 1
        j = i
        while j < len(runs) and runs[j][0] < end:
            lo, hi = max(runs[j][0], start), min(runs[j][0] + runs[j][1], end)
            if lo < hi:
                out.append((lo, hi - lo))
            j += 1
    return out


def pages(runs: Iterable[tuple[int, int]]) -> int:
    return sum(count for _, count in runs)


def encode(runs: Sequence[tuple[int, int]]) -> bytes:
    return array.array("Q", [n for run in runs for n in run]).tobytes()


def decode(data: bytes) -> Runs:
    """The runs of one report; [] for anything that is not a whole number of runs."""
    if len(data) % 16:
        return []
    values = array.array("Q")
    values.frombytes(data)
    return [(values[i], values[i + 1]) for i in range(0, len(values), 2) if values[i + 1]]


# ---- I/O: this process's pages, one report, one populate ------------------------------------------------------


def written() -> Runs:
    """The pages of this process's private writable mappings that it alone maps (see the module docstring)."""
    with open("/proc/self/maps") as f:
        spans = writable_spans(f.read())
    out: Runs = []
    fd = os.open("/proc/self/pagemap", os.O_RDONLY)
    try:
        for first, end in spans:
            out += exclusive_runs(os.pread(fd, (end - first) * 8, first * 8), first)
    finally:
        os.close(fd)
    return out


def report(address: bytes) -> None:
    """Send this process's written pages to the learner at ``address``; never waits, never raises."""
    try:
        runs = written()
        if not runs or len(runs) > MAX_RUNS:
            return
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            sock.sendto(encode(runs), socket.MSG_DONTWAIT, address)
    except OSError:  # the zygote is gone, its queue is full, /proc is not there: nothing learned this time
        pass


_MADVISE = None


def prepare() -> bool:
    """Resolve ``madvise`` once (in the zygote, so that no spare pays the lookup); False when there is none."""
    global _MADVISE
    if _MADVISE is None:
        try:
            import ctypes

            fn = ctypes.CDLL(None, use_errno=True).madvise
            fn.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
            fn.restype = ctypes.c_int
            _MADVISE = fn
        except (OSError, AttributeError):
            _MADVISE = False
    return bool(_MADVISE)


def populate(runs: Sequence[tuple[int, int]]) -> int:
    """Copy now the pages of ``runs`` that lie in this process's private writable mappings; the pages asked for
    (0 when populating is not possible here). What each page holds does not change."""
    if not runs or not prepare():
        return 0
    with open("/proc/self/maps") as f:
        targets = intersect(runs, writable_spans(f.read()))
    for first, count in targets:
        # A failure is ignored (EINVAL: a kernel before 5.14, or a VM_IO mapping; EFAULT/ENOMEM: a page that would
        # fault with SIGBUS, a run unmapped meanwhile): those pages are left to fault in the launch, as without this.
        _MADVISE(first * PAGE, count * PAGE, MADV_POPULATE_WRITE)
    return pages(targets)


class Learner:
    """The zygote's side: an abstract-namespace datagram socket its launches report to, and the union of what they
    reported. ``learns(n)`` says whether the n-th launch (1-based) should report."""

    def __init__(self) -> None:
        self.runs: Runs = []
        self.reports = 0
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.setblocking(False)
        # Abstract (leading NUL): nothing in the file system, gone when the socket closes, unique per zygote.
        self.sock.bind(b"\0killpoint-prefault-%d-%s" % (os.getpid(), os.urandom(6).hex().encode()))
        self.address: bytes = self.sock.getsockname()

    @staticmethod
    def learns(n: int) -> bool:
        return n <= FIRST_LEARNERS or n & (n - 1) == 0

    def receive(self) -> None:
        """Add every report waiting on the socket to the union."""
        while True:
            try:
                data = self.sock.recv(1 << 20)
            except (BlockingIOError, InterruptedError):
                return
            runs = decode(data)
            if runs:
                self.runs = union(self.runs, runs)
                self.reports += 1

    def close(self) -> None:
        self.sock.close()
