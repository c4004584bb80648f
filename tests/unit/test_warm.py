"""Tests of agent.warm: the zygote's rehearsal runs the agent end to end and leaves nothing of itself behind."""

from __future__ import annotations

import glob
import os
import signal
import tempfile
import threading

from agent import warm


def _fds() -> set[int]:
    return {int(fd) for fd in os.listdir("/proc/self/fd")}


def test_the_rehearsal_runs_and_resumes_a_session_to_completion():
    """A run through three model turns and every tool, then a resume of it, both exit 0."""
    assert warm.rehearse() == (0, 0)


def test_the_rehearsal_leaves_no_thread_descriptor_file_environment_or_handler():
    """What a forked launch would inherit is as it was before the rehearsal (threads, fds, files, env, signals)."""
    before = (threading.active_count(), _fds(), dict(os.environ), signal.getsignal(signal.SIGINT),
              signal.getsignal(signal.SIGTERM), set(glob.glob(os.path.join(tempfile.gettempdir(), "agent-warm-*"))))
    warm.rehearse()
    after = (threading.active_count(), _fds(), dict(os.environ), signal.getsignal(signal.SIGINT),
             signal.getsignal(signal.SIGTERM), set(glob.glob(os.path.join(tempfile.gettempdir(), "agent-warm-*"))))
    assert after == before
