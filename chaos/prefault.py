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
then likely writes too. A learning launch's spare copies nothing ahead: the pages it copied would be exclusive too,
and its report could not tell them from the ones it wrote. The launch sends those page runs in one datagram to the
zygote's abstract Unix socket (no file to leave behind, gone with the zygote); the zygote keeps their union, and each
later spare copies it. The union only grows: a page some launch once wrote stays in it (bounded by the launches'
private writable memory). Anyone on the machine may send to that socket (its name is in ``/proc/net/unix``): at
worst spares copy pages for nothing; what a launch computes is unchanged either way.

Nothing here changes what a launch computes: populating copies each page's content as it is; only the private
writable mappings the spare has are touched, whatever was learned (a populating write into a shared mapping would
dirty a file's pages or allocate its blocks); and every failure (a kernel without the advice: ``prepare`` finds out
once and nothing is learned; a run no longer mapped; a lost datagram) only leaves the faults to the launch, as
before. The spare finds its mappings itself, after its fork (the zygote's maps can change from one fork to the next:
a preload's at-fork handlers run in it, and its allocator reuses addresses): one ``PROCMAP_QUERY`` ioctl per mapping
the runs fall in (Linux 6.11; ~16 of them), not the whole ``/proc/self/maps`` text, whose reading and cutting cost
each spare ~1.6 ms of CPU (0.53 ms to read 192 lines, 0.34 to parse them, 0.73 to cut ~510 runs), now ~0.9 ms (0.55
to query, most of it the first run of cold code in a fresh fork, 0.14 to make the runs disjoint, 0.18 to cut);
before 6.11, that text. A launch handed to a spare still copying waits for it: that time counts in the launch's life
(it would have been faults). A launch's report runs after its output is flushed and never raises (whatever fails, it
exits with its own status).

Stdlib only: the zygote imports it before its preload.
"""

from __future__ import annotations

import _socket  # not socket.socket: a launch's program may have patched it (gevent), and the report runs in it
import array
import bisect
import fcntl
import mmap
import os
import re
import socket
import struct
from collections.abc import Iterable, Sequence

PAGE = os.sysconf("SC_PAGE_SIZE")
TOP = (1 << 64) // PAGE  # no page lies above a 64-bit address space (and a report is anyone's datagram)
MADV_POPULATE_WRITE = 23  # <linux/mman.h>, Linux >= 5.14
_PRESENT_EXCLUSIVE = 0x81  # bits 63 and 56 of a pagemap entry, as bits 7 and 0 of its last (little-endian) byte
_FLAGS = bytes(1 if b & _PRESENT_EXCLUSIVE == _PRESENT_EXCLUSIVE else 0 for b in range(256))
_RUN = re.compile(rb"\x01+")
# One report is one datagram (AF_UNIX keeps datagrams whole up to the sender's buffer, ~208 KiB by default):
# 4,096 runs of 16 bytes is 64 KiB. A launch with more runs than that sends none (learning is best effort).
MAX_RUNS = 4096
# Which launches learn: a zygote's first few (its union fills), then every power of two (pages a workload that
# changes over a nightly writes anew are seen), so learning costs a launch ~1 ms, and its copy ahead, a few dozen
# times in a whole campaign.
FIRST_LEARNERS = 3

Runs = list[tuple[int, int]]  # (first page number, page count), sorted, disjoint


# ---- pure: runs over page numbers ----------------------------------------------------------------------------


def writable_spans(maps: bytes) -> list[tuple[int, int]]:
    """(first page, end page) of every private writable mapping in a ``/proc/PID/maps`` text (bytes: a mapped
    file's name need not be UTF-8)."""
    spans = []
    for line in maps.splitlines():
        fields = line.split(None, 2)
        if len(fields) >= 2 and fields[1].startswith(b"rw") and fields[1].endswith(b"p"):
            start, _, end = fields[0].partition(b"-")
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
    """The parts of ``runs`` (sorted, disjoint) inside ``spans`` ((first, end) pairs, disjoint). The runs wholly
    inside a span are sliced, not visited one by one: a spare cuts ~500 runs to ~16 spans (0.73 ms as a loop)."""
    out: Runs = []
    firsts = [first for first, _ in runs]
    for start, end in sorted(spans):
        i = max(0, bisect.bisect_right(firsts, start) - 1)  # the last run starting at or before the span, if any
        j = bisect.bisect_left(firsts, end)  # runs[i:j] start before the span's end
        if i < j and runs[i][0] + runs[i][1] <= start:  # ... and that one ends before the span
            i += 1
        if i >= j:
            continue
        (first, count), (last, last_count) = runs[i], runs[j - 1]
        if i == j - 1:
            out.append((max(first, start), min(first + count, end) - max(first, start)))
            continue
        out.append((max(first, start), first + count - max(first, start)))
        out.extend(runs[i + 1:j - 1])  # between two runs that meet the span: inside it
        out.append((last, min(last + last_count, end) - last))
    return out


def pages(runs: Iterable[tuple[int, int]]) -> int:
    return sum(count for _, count in runs)


def encode(runs: Sequence[tuple[int, int]]) -> bytes:
    return array.array("Q", [n for run in runs for n in run]).tobytes()


def decode(data: bytes) -> Runs:
    """The runs of one report; [] for anything that is not a whole number of runs. A run reaching past the top of
    the address space is dropped: no launch wrote there, and no address could be asked about it."""
    if len(data) % 16:
        return []
    values = array.array("Q")
    values.frombytes(data)
    return [(values[i], values[i + 1]) for i in range(0, len(values), 2)
            if values[i + 1] and values[i] + values[i + 1] <= TOP]


# ---- I/O: this process's pages, one report, one populate ------------------------------------------------------


# pagemap is read this many pages at a time (8 bytes each): a mapping may reserve terabytes it never touches.
_CHUNK = 8192


def _maps() -> bytes:
    with open("/proc/self/maps", "rb") as f:
        return f.read()


# struct procmap_query (<linux/fs.h>, Linux 6.11): size, query flags and address in; the mapping's start, end and
# flags (then page size, offset, inode, device, name and build-id fields this module leaves empty) out.
_QUERY = struct.Struct("=9Q4I2Q")  # native order, no padding: 104 bytes
_PROCMAP_QUERY = 3 << 30 | _QUERY.size << 16 | ord("f") << 8 | 17  # _IOWR('f', 17, struct procmap_query)
_COVERING_OR_NEXT = 0x10  # the mapping holding the address, else the next one above it
_READ, _WRITE, _SHARED = 0x1, 0x2, 0x8  # the mapping's flags, as in the query flags


def queried_spans(runs: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """(first page, end page) of this process's private writable mappings that ``runs`` (sorted, disjoint) fall in,
    one ``PROCMAP_QUERY`` per readable and writable mapping met; raises OSError where the kernel lacks it (ENOTTY
    before Linux 6.11)."""
    spans: list[tuple[int, int]] = []
    buf = bytearray(_QUERY.size)
    fd = os.open("/proc/self/maps", os.O_RDONLY | os.O_CLOEXEC)
    ends = [first + count for first, count in runs]
    try:
        i, at = 0, runs[0][0] if runs else 0
        while i < len(runs) and at < TOP:
            # The kernel skips the mappings that are not readable and writable; shared ones are told apart below.
            _QUERY.pack_into(buf, 0, _QUERY.size, _COVERING_OR_NEXT | _READ | _WRITE, at * PAGE, *([0] * 12))
            try:
                fcntl.ioctl(fd, _PROCMAP_QUERY, buf, True)
            except FileNotFoundError:  # ENOENT: no mapping at or above ``at``
                break
            _, _, _, start, end, flags, *_ = _QUERY.unpack_from(buf)
            first, last = start // PAGE, end // PAGE
            if flags & (_READ | _WRITE | _SHARED) == _READ | _WRITE:  # rw-p, as writable_spans reads the text
                spans.append((first, last))
            i = bisect.bisect_right(ends, last, i)  # past the runs that end inside this mapping
            if i < len(runs):
                at = max(last, runs[i][0])  # a run across the end goes on in whatever mapping comes next
    finally:
        os.close(fd)
    return spans


def written(limit: int = MAX_RUNS) -> Runs | None:
    """The pages of this process's private writable mappings that it alone maps (see the module docstring); None
    past ``limit`` runs."""
    out: Runs = []
    fd = os.open("/proc/self/pagemap", os.O_RDONLY)
    try:
        for first, end in writable_spans(_maps()):
            for at in range(first, end, _CHUNK):
                count = min(_CHUNK, end - at)
                runs = exclusive_runs(os.pread(fd, count * 8, at * 8), at)
                if runs and out and out[-1][0] + out[-1][1] == runs[0][0]:  # a run across two chunks
                    out[-1] = (out[-1][0], out[-1][1] + runs[0][1])
                    runs = runs[1:]
                out += runs
                if len(out) > limit:
                    return None
    finally:
        os.close(fd)
    return out


def report(address: bytes) -> None:
    """Send this process's written pages to the learner at ``address``; never waits, never raises: it runs in a
    launch about to exit with its own status."""
    try:
        runs = written()
        if not runs:
            return
        sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_DGRAM)
        try:
            sock.sendto(encode(runs), _socket.MSG_DONTWAIT, address)
        finally:
            sock.close()
    except BaseException:  # noqa: BLE001 - the zygote gone or its queue full, no /proc, a signal: nothing learned
        pass


_MADVISE = None


def prepare() -> bool:
    """Resolve ``madvise`` once (in the zygote, so that no spare pays the lookup) and try the advice on a page of
    its own; False when there is no madvise or the kernel does not know the advice (before 5.14): then nothing is
    worth learning."""
    global _MADVISE
    if _MADVISE is None:
        _MADVISE = False
        try:
            import ctypes

            fn = ctypes.CDLL(None, use_errno=True).madvise
            fn.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
            fn.restype = ctypes.c_int
            page = mmap.mmap(-1, PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
            view = ctypes.c_char.from_buffer(page)
            ok = fn(ctypes.addressof(view), PAGE, MADV_POPULATE_WRITE) == 0
            del view  # (the mapping cannot close while a view of it lives)
            page.close()
            if ok:
                _MADVISE = fn
        except (OSError, AttributeError, ValueError):
            pass
    return bool(_MADVISE)


def populate(runs: Sequence[tuple[int, int]]) -> int:
    """Copy now the pages of ``runs`` that lie in this process's private writable mappings; the pages asked for
    (0 when populating is not possible here). What each page holds does not change."""
    if not runs or not prepare():
        return 0
    # Sorted and disjoint (0.14 ms for ~500 runs): the cut slices the runs between two that meet a mapping as
    # wholly inside it, which overlapping runs would not be (a page past the mapping's end could be populated).
    runs = union(runs, ())
    try:
        spans = queried_spans(runs)
    except OSError:  # ENOTTY: a kernel before 6.11; whatever else, the whole text is the safe way
        spans = writable_spans(_maps())
    targets = intersect(runs, spans)
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
