"""Tests of agent.warm: the zygote's rehearsal runs the agent end to end and leaves nothing of itself behind."""

from __future__ import annotations

import glob
import os
import signal
import sys
import tempfile
import threading

from agent import warm


def _fds() -> set[int]:
    return {int(fd) for fd in os.listdir("/proc/self/fd")}


def test_the_rehearsal_runs_and_resumes_a_session_to_completion():
    """A run through three model turns and every tool, then a resume of it, both exit 0."""
    assert warm.rehearse() == (0, 0)


def _inherited() -> tuple:
    cached = tempfile.tempdir
    leftovers = set(glob.glob(os.path.join(tempfile.gettempdir(), "agent-warm-*")))
    tempfile.tempdir = cached  # gettempdir() caches its choice: looking must not change what is looked at
    return (dict(os.environ), os.getcwd(), signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM),
            signal.getsignal(signal.SIGCHLD), sys.stdout, sys.stderr, cached, leftovers)


def test_the_rehearsal_leaves_nothing_a_forked_launch_would_inherit(monkeypatch, tmp_path):
    """Threads, descriptors, environment, cwd, signal handlers, streams, tempfile's cached choice, files: as before."""
    # A temporary directory of this test's own: other pytest workers rehearse at the same time, and their
    # agent-warm-* directories in the shared /tmp come and go between the two looks.
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", None)  # as in a fresh zygote: the rehearsal must not leave its choice
    before, threads, fds = _inherited(), set(threading.enumerate()), _fds()
    warm.rehearse()
    assert _inherited() == before
    # Nothing added: a thread or descriptor an earlier test of this worker left may end meanwhile, on its own time.
    assert set(threading.enumerate()) <= threads and _fds() <= fds


def test_without_a_unix_socket_the_rehearsal_still_runs(monkeypatch, tmp_path):
    """A temporary directory whose path is too long for AF_UNIX: no checkpoint channel, the run still completes."""
    deep = tmp_path / ("d" * 100)
    deep.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(deep))
    assert warm.rehearse() == (0, 0)
