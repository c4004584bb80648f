"""How an agent process is launched, signalled, killed with its whole session, and reaped.

One small interface (``Launcher`` → ``AgentProcess``): ``SubprocessLauncher`` here (exec), the zygote launcher in
``chaos.zygote`` (fork from a warm interpreter); the supervisor knows only the interface. Every agent runs in its own session (``setsid``), so "the
agent and everything it started" is "every process whose session id is the agent's pid" — including the bash tool,
which runs in its own process group but inside the agent's session.

Invariants protected:
- ``kill_session`` returns only when every process of the session is gone (dead or a zombie) according to psutil,
  or reports the ones that would not die (``KillReport.survivors``); the kernel releases the session file's flock
  only when its holder is gone, so a restart before that would race the dying writer.
- One reaping path per launcher: an exec'd leader is reaped by ``subprocess.Popen`` only (``poll``/``wait``; a
  zygote's children by the zygote only). Reaping it behind Popen's back (``os.waitid``/``os.waitpid``/``psutil.Process.wait`` on our own child) makes Popen report exit 0 for a killed
  process — a measured fact on these machines.

Not here: what to launch, when to kill (``chaos.supervisor``), the protocol.
"""

from __future__ import annotations

import functools
import os
import select
import signal
import subprocess
import time
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import psutil


@dataclass(frozen=True)
class ProcInfo:
    """A process as seen when it was found or killed."""

    pid: int
    name: str
    cmdline: tuple[str, ...] = ()

    def to_json(self) -> dict:
        return {"pid": self.pid, "name": self.name, "cmdline": list(self.cmdline)}


@dataclass
class KillReport:
    """What ``kill_session`` did: processes SIGKILLed and the ones not confirmed gone within the limit."""

    killed: list[ProcInfo] = field(default_factory=list)
    survivors: list[ProcInfo] = field(default_factory=list)


class AgentProcess(Protocol):
    """A launched agent: the leader of its own session."""

    pid: int
    session_id: int
    created: float  # time.monotonic() when the process was created (CLOCK_MONOTONIC: one clock for every process)
    # time.monotonic() when its reaper reaped it, once its exit status is known and the reaper says (the zygote
    # does); None: only the caller's own observation is known (Popen reaps when asked).
    ended: float | None

    def poll(self) -> int | None:
        """The exit status if the leader has ended (reaping it), else None. Negative = killed by that signal."""

    def wait(self, timeout: float | None = None) -> int | None:
        """Wait for the leader to end; None when ``timeout`` passed first."""

    def send_signal(self, sig: int) -> None:
        """Send ``sig`` to the leader only (no-op once it has been reaped)."""

    def kill_session(self, timeout: float = 5.0) -> KillReport:
        """SIGKILL the leader and every process of its session; return when psutil confirms they are gone."""

    def exit_fd(self) -> int | None:
        """A file descriptor that becomes readable when the leader exits (for a selector), or None to poll."""

    def close(self) -> None:
        """Release OS resources held for this process (not the process itself)."""


class Launcher(Protocol):
    """Starts agent processes. ``stdout``/``stderr`` are files the process writes to (kept for the report)."""

    def launch(
        self, argv: Sequence[str], env: Mapping[str, str], cwd: Path, stdout: Path, stderr: Path
    ) -> AgentProcess: ...


_BYTECODE_READY = False


def ensure_agent_bytecode() -> None:
    """Write the bundled agent's bytecode caches once per harness process (best effort).

    With ``PYTHONDONTWRITEBYTECODE=1`` (set on these machines) a Python process never writes ``__pycache__``, so every
    agent launch would recompile the agent's modules: about 35 ms instead of 8 ms per start, thousands of times per
    campaign. ``py_compile`` writes caches regardless of that variable, and the agent still *reads* them.
    """
    global _BYTECODE_READY
    if _BYTECODE_READY:
        return
    _BYTECODE_READY = True
    try:
        import compileall
        import importlib.util

        # Located, not imported: the harness never imports the agent beyond its contract (agent.session).
        spec = importlib.util.find_spec("agent")
        if spec is not None and spec.submodule_search_locations:
            compileall.compile_dir(list(spec.submodule_search_locations)[0], quiet=2)
    except Exception:  # a read-only install: the agent still runs, only slower to start
        pass


DRAIN_SECONDS = 5.0  # run_bounded: how long a killed command's output pipes may stay open before they are dropped


def run_bounded(argv: Sequence[str], env: Mapping[str, str], timeout: float,
                cwd: str | Path | None = None) -> subprocess.CompletedProcess:
    """Run a short command (a target's answer to a question, an implementation's plan) to completion, output
    captured, in a session of its own; past ``timeout`` the whole session is SIGKILLed — not only the direct child,
    as ``subprocess.run`` would — and ``subprocess.TimeoutExpired`` is raised."""
    proc = subprocess.Popen(list(argv), env=dict(env), cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True)
    _LAUNCHED.add(proc.pid)  # a worker told to stop at once sweeps it too (sweep_launched)
    try:
        out, err = proc.communicate(timeout=timeout)
    except BaseException:  # the timeout, or Ctrl-C/SIGTERM raised meanwhile: nothing of it may outlive us
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # its own process group, and then whatever else is in its session
        except OSError:
            pass
        kill_processes(lambda: session_members(proc.pid), 5.0, leader_done=lambda: proc.poll() is not None)
        try:
            proc.communicate(timeout=DRAIN_SECONDS)
        except subprocess.TimeoutExpired:
            # A process that left the session (setsid) still holds the output pipes: outside the session, it is not
            # the sweep's to kill, and waiting for its end of file could take forever. Drop the pipes; reap the
            # leader (SIGKILLed above) if it is gone: one that is not (stuck in the kernel) kill_processes reported.
            for stream in (proc.stdout, proc.stderr):
                stream.close()
            try:
                proc.wait(DRAIN_SECONDS)
            except subprocess.TimeoutExpired:
                pass
        raise
    else:
        # What it left running in its session (a daemon it started) ends with it: a question is not a case. (While
        # a member lives, Linux keeps the leader's number reserved; a live process under that number means the
        # session is empty and the number someone else's: then nothing is ours to kill.)
        if not psutil.pid_exists(proc.pid) and session_members(proc.pid):
            kill_processes(lambda: session_members(proc.pid), 5.0)
    finally:
        _LAUNCHED.discard(proc.pid)
    return subprocess.CompletedProcess(list(argv), proc.returncode, out, err)


# Sessions (= leader pids) this process started by exec and has not closed: what a worker sweeps when it must stop
# at once (chaos.workers.STOP_SIGNAL), since no case's own cleanup will run then.
_LAUNCHED: set[int] = set()


def sweep_launched() -> None:
    """SIGKILL every process of every session this process launched by exec and has not closed (best effort, fast:
    called from a signal handler just before the process exits)."""
    sessions = set(_LAUNCHED)
    if not sessions:
        return
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        pid = int(entry)
        try:
            if os.getsid(pid) in sessions:
                os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


class SubprocessLauncher:
    """``subprocess.Popen`` in a new session (``start_new_session=True``: the child calls setsid, so its pid is the
    session id), stdin from /dev/null, stdout/stderr to files (a pipe nobody drains could block a chatty agent)."""

    def launch(
        self, argv: Sequence[str], env: Mapping[str, str], cwd: Path, stdout: Path, stderr: Path
    ) -> AgentProcess:
        ensure_agent_bytecode()
        created = time.monotonic()  # Popen forks (and execs) inside this call
        with open(stdout, "wb") as out, open(stderr, "wb") as err:
            popen = subprocess.Popen(
                list(argv),
                env=dict(env),
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                start_new_session=True,
                close_fds=True,
            )
        _LAUNCHED.add(popen.pid)
        return PopenProcess(popen, created)


class PopenProcess:
    """``AgentProcess`` over a ``subprocess.Popen`` started in its own session."""

    def __init__(self, popen: subprocess.Popen, created: float):
        self._popen = popen
        self.created = created
        self.ended: float | None = None  # Popen reaps when asked: the caller's observation is all there is
        self.pid = popen.pid
        self.session_id = popen.pid
        self._pidfd: int | None
        try:
            # A pidfd becomes readable when the process exits; it does not reap, so Popen stays the one reaper.
            # The pid cannot be recycled before we reap it, so opening it after Popen returned is safe.
            self._pidfd = os.pidfd_open(popen.pid)
        except (AttributeError, OSError):  # kernel < 5.3 or a sandbox without pidfd: the supervisor polls instead
            self._pidfd = None

    def poll(self) -> int | None:
        return self._popen.poll()

    def wait(self, timeout: float | None = None) -> int | None:
        if self._pidfd is not None and timeout is not None and self._popen.returncode is None:
            # Popen.wait(timeout) polls with sleeps that grow to 50 ms: a process that exits just after a poll is
            # noticed up to 50 ms late, on every probe of every case. The pidfd wakes us at the exit itself; Popen
            # still does the reaping (poll), so there stays one reaping path.
            ready, _, _ = select.select([self._pidfd], [], [], max(0.0, timeout))
            return self._popen.poll() if ready else None
        try:
            return self._popen.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def send_signal(self, sig: int) -> None:
        # Popen.send_signal polls first and does nothing once the child is reaped, so a recycled pid is never hit.
        self._popen.send_signal(sig)

    def kill_session(self, timeout: float = 5.0) -> KillReport:
        return kill_session(self, timeout)  # wait() reaps through Popen, the one reaping path

    def exit_fd(self) -> int | None:
        return self._pidfd

    def close(self) -> None:
        _LAUNCHED.discard(self.pid)
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None


def kill_session(proc: AgentProcess, timeout: float) -> KillReport:
    """``AgentProcess.kill_session`` over the process's own poll/send_signal/wait: SIGKILL the leader first (it is the
    process paused at the barrier), then whatever is left of its tree and session, until the leader is reaped."""
    # Take the tree before the leader dies: its children are then reparented and only the session id (or, for a
    # child that called setsid itself, nothing) still ties them to the agent.
    tree = descendants(proc.pid)
    report = KillReport()
    if proc.poll() is None:
        report.killed.append(proc_info(proc.pid))
        proc.send_signal(signal.SIGKILL)
    # Until the leader is reaped, not merely dying: nothing of the case may start before (a restart could not take
    # the session's lock earlier anyway: the kernel drops a dying process's flock only after freeing its memory,
    # ~0.03 ms before the reap, bench/exitorder.py; launched sooner it would be refused, exit 6).
    rest = kill_processes(lambda: [*tree, *session_members(proc.session_id)], timeout,
                          leader_done=lambda: proc.wait(0.005) is not None)
    report.killed += rest.killed
    report.survivors += rest.survivors
    if proc.poll() is None:
        report.survivors.append(proc_info(proc.pid))
    return report


def proc_info(pid: int) -> ProcInfo:
    """Name and command line of ``pid`` (``?`` once it is gone), as psutil gives them, read from /proc directly:
    it is taken for every killed leader just before its SIGKILL, and psutil's Process took ~0.2 ms there. A zombie
    gives its name and no arguments (psutil raises)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            raw = f.read()
    except OSError:
        return ProcInfo(pid, "?")
    name = os.fsdecode(stat[stat.find(b"(") + 1: stat.rfind(b")")])
    # psutil's rules: it reads the file as text (universal newlines: CR and CRLF become LF); arguments end with NUL,
    # and a process that rewrote its title may use spaces instead.
    raw = raw.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    sep = b"\0" if raw.endswith(b"\0") else b" "
    data = raw[:-1] if raw.endswith(sep) else raw
    parts = data.split(sep) if raw else []
    if sep == b"\0" and len(parts) == 1 and b" " in data:
        parts = data.split(b" ")
    cmdline = tuple(os.fsdecode(a) for a in parts)
    if len(name) >= 15 and cmdline and os.path.basename(cmdline[0]).startswith(name):
        name = os.path.basename(cmdline[0])  # the kernel keeps 15 characters of the name (psutil's rule)
    return ProcInfo(pid, name, cmdline)


# When this process swept processes (time.monotonic() intervals of the outermost sweep calls, the last 4,096): issue
# [2/5] defines the harness overhead without "the process sweeps that guarantee no process outlives its case", and
# bench/campaign.py prints it so besides its conservative figure. Sweeps run on a harness's main thread only.
SWEEPS: deque[tuple[float, float]] = deque(maxlen=4096)
_sweep_depth = 0


def _sweep(fn):
    @functools.wraps(fn)
    def timed(*args, **kwargs):
        global _sweep_depth
        _sweep_depth += 1
        start = time.monotonic()
        try:
            return fn(*args, **kwargs)
        finally:
            _sweep_depth -= 1
            if _sweep_depth == 0:
                SWEEPS.append((start, time.monotonic()))
    return timed


def descendants(pid: int) -> list[psutil.Process]:
    """Every live descendant of ``pid``, taken before a kill (children reparent once their parent dies).

    Read from ``/proc/PID/task/TID/children`` (Linux with CONFIG_PROC_CHILDREN): a few files per process, where
    psutil's ``children(recursive=True)`` reads the stat file of every process on the machine (~2 ms, on every kill
    of every case). psutil's way is the fallback where those files do not exist."""
    found: list[psutil.Process] = []
    todo = [pid]
    try:
        while todo:
            parent = todo.pop()
            for task in os.listdir(f"/proc/{parent}/task"):
                with open(f"/proc/{parent}/task/{task}/children", "rb") as f:
                    for child in f.read().split():
                        todo.append(int(child))
                        found.append(int(child))
    except FileNotFoundError:
        if not os.path.exists(f"/proc/{os.getpid()}/task/{os.getpid()}/children"):
            try:  # no children files on this kernel
                return psutil.Process(pid).children(recursive=True)
            except psutil.Error:
                return []
    except (OSError, ValueError):
        pass  # a process that ended while we read: its descendants are found by the session sweep
    out = []
    for child in found:
        try:
            out.append(psutil.Process(child))
        except psutil.Error:
            pass
    return out


def is_runnable(pid: int) -> bool:
    """True when some thread of ``pid`` is running or waiting for a CPU (``R``) or in uninterruptible I/O (``D``):
    it will make progress on its own. False when every thread sleeps (a lock such as ``flock``, a socket, a timer),
    is stopped, or the process is gone.

    Read from ``/proc/PID/task/TID/stat`` (every thread: a framework may work in a pool thread while its main
    thread waits); the state is the field after the command name's last ``)`` (a name may contain parentheses)."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return False
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/stat", "rb") as f:
                stat = f.read()
        except OSError:  # the thread ended while we looked
            continue
        if stat[stat.rfind(b")") + 2:][:1] in (b"R", b"D"):
            return True
    return False


def _alive(p: psutil.Process) -> bool:
    # A zombie is dead: it holds no locks, files or memory, only a pid until its parent (possibly a PID 1 that
    # never reaps, in a container) collects it. is_running() also guards against a recycled pid (create time).
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


@_sweep
def session_members(session_id: int, exclude: Iterable[int] = ()) -> list[psutil.Process]:
    """Every live (non-zombie) process whose session id is ``session_id``, except ``session_id`` itself."""
    skip = {session_id, os.getpid(), *exclude}
    found = []
    for pid in psutil.pids():
        if pid in skip:
            continue
        try:
            if os.getsid(pid) != session_id:
                continue
            p = psutil.Process(pid)
        except (OSError, psutil.Error):  # gone between the listing and the look-up
            continue
        if _alive(p):
            found.append(p)
    return found


def stragglers(session_id: int) -> list[ProcInfo]:
    """The processes of the session still alive (the leader excluded: the caller knows whether it is reaped)."""
    return [proc_info(p.pid) for p in session_members(session_id)]


@_sweep
def kill_processes(find, timeout: float, leader_done=lambda: True) -> KillReport:
    """SIGKILL whatever ``find()`` returns until it returns nothing alive and ``leader_done()`` holds.

    ``find`` is called again on every round because a process may fork while we kill its siblings.
    """
    report = KillReport()
    seen: set[int] = set()
    deadline = time.monotonic() + timeout
    while True:
        alive = {p.pid: p for p in find() if _alive(p)}
        for pid, p in alive.items():
            try:
                if pid not in seen:
                    seen.add(pid)
                    report.killed.append(proc_info(pid))
                p.kill()  # psutil checks the create time first, so a recycled pid is not signalled
            except psutil.Error:
                pass
        done = leader_done()
        if not alive and done:
            return report
        if time.monotonic() > deadline:
            # Uninterruptible sleep (D state) can outlast SIGKILL; report instead of hanging the harness.
            report.survivors = [proc_info(pid) for pid, p in alive.items() if _alive(p)]
            return report
        time.sleep(0.002)
