"""chaos.prefault on real memory: a forked child finds the pages it wrote, a populated page is this process's own copy
with its content unchanged, and a zygote's spares copy what its launches reported."""

from __future__ import annotations

import ctypes
import errno
import json
import mmap
import os
import re
import sys

import pytest

from chaos import prefault
from chaos.prefault import PAGE
from chaos.zygote import ZygoteLauncher
from tests.integration import until
from tests.integration.test_zygote import MODULE, _spares, launch

PAGES = 64


def own_pages(first: int, count: int) -> list[bool]:
    """For each page: present and mapped by this process alone (read from /proc/self/pagemap)."""
    with open("/proc/self/pagemap", "rb") as f:
        f.seek(first * 8)
        data = f.read(count * 8)
    return [int.from_bytes(data[i:i + 8], "little") >> 56 & 0x81 == 0x81 for i in range(0, len(data), 8)]


def _address(buf) -> int:
    """The first page number of an mmap object (its view released at once, so the mapping can close)."""
    view = ctypes.c_char.from_buffer(buf)
    try:
        return ctypes.addressof(view) // PAGE
    finally:
        del view


@pytest.fixture
def region():
    """A private anonymous mapping of PAGES pages, every page written (present, then shared with forked children)."""
    buf = mmap.mmap(-1, PAGES * PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    for i in range(PAGES):
        buf[i * PAGE] = i + 1
    first = _address(buf)
    yield buf, first
    buf.close()


def in_child(fn) -> dict:
    """Run ``fn()`` in a forked child and return what it returned (JSON through a pipe)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            os.write(w, json.dumps(fn()).encode())
        finally:
            os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        data = f.read()
    os.waitpid(pid, 0)
    return json.loads(data)


def test_a_forked_child_finds_the_pages_it_wrote_and_not_the_ones_it_only_shares(region):
    """Pages 10-19 written after the fork are reported; pages 30-39, only read, are not (still shared)."""
    buf, first = region

    def child():
        for i in range(10, 20):
            buf[i * PAGE + 1] = 7
        _ = [buf[i * PAGE] for i in range(30, 40)]
        covered = set()
        for start, count in prefault.written():
            covered.update(range(start, start + count))
        return {"written": [first + i in covered for i in range(10, 20)],
                "read": [first + i in covered for i in range(30, 40)]}

    seen = in_child(child)
    assert all(seen["written"]) and not any(seen["read"])


def test_populate_makes_the_pages_the_childs_own_and_changes_no_byte(region):
    """After populate, the asked pages are exclusively this process's (no fault left to take on a write) and hold
    what they held; other pages stay shared; runs outside any writable mapping are left alone."""
    buf, first = region

    def child():
        before = bytes(buf)
        asked = prefault.populate([(first + 10, 10), (1, 1)])  # page 1: never a mapping of a Linux process
        return {"asked": asked, "own": own_pages(first, PAGES), "same": bytes(buf) == before}

    seen = in_child(child)
    assert seen["same"] and seen["asked"] == 10
    assert seen["own"][10:20] == [True] * 10
    assert not any(seen["own"][30:40])


def queryable() -> bool:
    """Whether this kernel has PROCMAP_QUERY (Linux 6.11)."""
    major, minor = (int(x) for x in re.match(r"(\d+)\.(\d+)", os.uname().release).groups())
    return (major, minor) >= (6, 11)


@pytest.fixture
def mappings(tmp_path):
    """Page numbers of: a private writable mapping (8 pages), a shared one of a sparse file (8), a private one made
    read-only (4), and a private one of 4 pages right after a private one of 4 (two mappings, one run across both)."""
    libc = ctypes.CDLL(None, use_errno=True)
    private = mmap.mmap(-1, 8 * PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    sparse = tmp_path / "sparse"
    sparse.write_bytes(b"")
    os.truncate(sparse, 8 * PAGE)
    with open(sparse, "r+b") as f:
        shared = mmap.mmap(f.fileno(), 8 * PAGE, flags=mmap.MAP_SHARED)
    readonly = mmap.mmap(-1, 4 * PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    pair = mmap.mmap(-1, 8 * PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    pages = {"private": _address(private), "shared": _address(shared), "readonly": _address(readonly),
             "pair": _address(pair), "sparse": sparse}
    assert libc.mprotect(ctypes.c_void_p(pages["readonly"] * PAGE), ctypes.c_size_t(4 * PAGE), mmap.PROT_READ) == 0
    # A flag that differs (no core dump of the second half) makes the kernel keep two rw-p mappings where one was.
    pair.madvise(mmap.MADV_DONTDUMP, 4 * PAGE, 4 * PAGE)
    yield pages
    for m in (private, shared, readonly, pair):
        m.close()


def test_the_queried_mappings_are_the_ones_the_maps_text_names(mappings):
    """PROCMAP_QUERY finds, for runs over private, shared, read-only, unmapped and adjacent mappings, the same
    private writable spans as the whole /proc/self/maps text: the pages populate may copy are the same either way."""
    p = mappings
    runs = sorted([(1, 1), (p["private"] + 2, 3), (p["shared"], 8), (p["readonly"] + 1, 2), (p["pair"] + 2, 4)])
    if not queryable():
        pytest.skip(f"PROCMAP_QUERY came with Linux 6.11; this is {os.uname().release}")
    queried = prefault.queried_spans(runs)  # on 6.11 or later an error here is a wrong request, not an old kernel
    assert queried, "no mapping found"
    from_text = prefault.writable_spans(prefault._maps())
    assert prefault.intersect(runs, queried) == prefault.intersect(runs, from_text)
    assert prefault.intersect(runs, queried) == sorted([(p["private"] + 2, 3), (p["pair"] + 2, 2), (p["pair"] + 4, 2)])


@pytest.mark.parametrize("query", [True, False], ids=["PROCMAP_QUERY", "maps text"])
def test_populate_never_writes_into_a_shared_read_only_or_missing_mapping(mappings, monkeypatch, query):
    """A run over a shared mapping of a sparse file, a read-only one and an unmapped page: populate copies none of
    them (the file gets no block), and copies the private pages asked, whichever way it finds its mappings."""
    p = mappings
    real = prefault.fcntl.ioctl
    if query and not queryable():
        pytest.skip(f"PROCMAP_QUERY came with Linux 6.11; this is {os.uname().release}")

    def ioctl(*args):
        if not query:  # as on a kernel before 6.11
            raise OSError(errno.ENOTTY, "Inappropriate ioctl for device")
        calls.append(args[1])
        return real(*args)

    calls: list[int] = []
    monkeypatch.setattr(prefault.fcntl, "ioctl", ioctl)
    runs = [(1, 1), (p["private"], 8), (p["shared"], 8), (p["readonly"], 4)]
    seen = in_child(lambda: {"asked": prefault.populate(runs), "own": own_pages(p["private"], 8),
                             "queries": len(calls)})
    assert seen["asked"] == 8 and seen["own"] == [True] * 8
    assert os.stat(p["sparse"]).st_blocks == 0
    assert (seen["queries"] > 0) is query  # the way asked for is the way taken


def warm_up(launcher, tmp_path, launches: int = 5) -> None:
    """``launches`` launches that exit 0: the first four learn (and copy nothing), the fifth's spare copies."""
    for _ in range(launches):
        proc, _, err = launch(launcher, tmp_path, "exit", "0")
        assert proc.wait(20) == 0, err.read_text()
        proc.close()


def private_dirty_kib(pid: int) -> int:
    with open(f"/proc/{pid}/smaps_rollup") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("Private_Dirty:"))


@pytest.mark.parametrize("copy_ahead", [True, False])
def test_a_zygote_copies_ahead_what_its_launches_reported_only_when_asked(tmp_path, copy_ahead):
    """With copy-ahead on, launches that exit report the pages they wrote and a later spare copies them; off, no
    launch reports and no spare copies."""
    launcher = ZygoteLauncher(MODULE, ("json", "subprocess", "ctypes"), copy_ahead=copy_ahead)
    try:
        assert launcher.fallback is None, launcher.fallback
        warm_up(launcher, tmp_path, 4)
        assert launcher.forked == 4 and launcher.copied == 0  # the learners' spares copy nothing
        warm_up(launcher, tmp_path, 1)
        assert (launcher.copied > 0) is copy_ahead
    finally:
        launcher.close()


def test_a_spare_holds_its_copies_before_its_launch_arrives(tmp_path):
    """The pages asked are copied in the waiting spare: its private dirty memory exceeds a plain zygote's spare's by
    at least half of them (the rest may lie outside its mappings, or be its own writes either way)."""
    plain = ZygoteLauncher(MODULE, ("json", "subprocess", "ctypes"))
    copying = ZygoteLauncher(MODULE, ("json", "subprocess", "ctypes"), copy_ahead=True)
    try:
        for each in (plain, copying):
            warm_up(each, tmp_path)
        before = copying.copied
        warm_up(copying, tmp_path, 1)  # the 6th launch: its spare copied, and so does the 7th's, waiting now
        asked_kib = (copying.copied - before) * PAGE // 1024
        assert asked_kib > 0
        assert until(lambda: len(_spares(plain)) == 1 and len(_spares(copying)) == 1)
        spare, reference = _spares(copying)[0], _spares(plain)[0]
        assert until(lambda: private_dirty_kib(spare) - private_dirty_kib(reference) >= asked_kib // 2), (
            private_dirty_kib(spare), private_dirty_kib(reference), asked_kib)
    finally:
        plain.close()
        copying.close()


def test_a_report_that_cannot_decode_its_maps_never_leaves_the_launch(tmp_path):
    """A learning launch that mapped a file whose name is not UTF-8 exits with its own status, no traceback, and a
    launch running beside it is untouched (a report that raised ran the zygote's own sweep in the child)."""
    launcher = ZygoteLauncher(MODULE, ("json", "subprocess", "ctypes"), copy_ahead=True)
    try:
        beside, _, _ = launch(launcher, tmp_path, "wait", "2")
        work = tmp_path / "odd"
        work.mkdir()
        odd, _, err = launch(launcher, work, "mapodd", str(work))  # the 2nd launch: a learner
        assert odd.wait(20) == 0, err.read_text()
        assert err.read_text() == ""
        assert beside.wait(20) == 0
    finally:
        launcher.close()


def test_a_launch_from_a_spare_that_copied_ahead_sees_what_an_exec_launch_sees(tmp_path):
    """Copying pages changes nothing a launch can see: its report equals exec's, as for any spare."""
    from chaos.process import SubprocessLauncher

    launcher = ZygoteLauncher(MODULE, ("json", "subprocess", "ctypes"), copy_ahead=True)
    try:
        warm_up(launcher, tmp_path)
        seen = []
        for each in (launcher, SubprocessLauncher()):
            work = tmp_path / type(each).__name__
            work.mkdir()
            proc, out, err = launch(each, work, "report", FRESH_VARS="A", A="1")
            assert proc.wait(20) == 0, err.read_text()
            proc.close()
            seen.append(json.loads(out.read_text()))
        assert launcher.copied > 0
        forked, execd = seen
        for key in ("argv", "argv0", "main", "env", "signals", "mask", "threads", "threading", "session_leader",
                    "stdin_empty", "fds"):
            assert forked[key] == execd[key], key
    finally:
        launcher.close()


def test_the_zygote_usage_line_names_the_option():
    """A bad command line of the zygote is one usage line and exit 2."""
    import subprocess

    done = subprocess.run([sys.executable, "-m", "chaos.zygote", "--copy-ahead"], capture_output=True, text=True)
    assert done.returncode == 2 and done.stderr == "usage: python -m chaos.zygote [--copy-ahead] FD MODULE...\n"
