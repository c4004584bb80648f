"""The zygote launcher: one warm Python process per worker that forks a fresh agent per launch, in milliseconds.

Why. A launch of the bundled agent by exec costs 90-110 ms before its first barrier (interpreter start-up, imports);
a case launches it four times or more. A Python process that has already imported the agent's start path forks,
and the child *becomes* the agent (what ``python -m`` runs, compiled once by the zygote) in about 2 ms. Agent
frameworks import in seconds, so without this a campaign against them would spend nearly all its time importing.

Shape. ``ZygoteLauncher`` (the harness side, a ``chaos.process.Launcher``) starts the zygote **by exec** (``python -m
chaos.zygote FD MODULE…``) — never by forking a harness worker, whose scripted-server threads may hold locks that a
forked child would inherit locked. The zygote imports the preload modules once, then serves launch requests over a
Unix socket pair (one line per request, one request in flight: a launcher is used from its process's main thread; a
line is the JSON of what the zygote needs — id, module, cwd, output files — a TAB, and the JSON of the whole request,
which only the child reads: the zygote's parse of a launch's ~100-variable environment cost 0.1-0.15 ms on its path,
at copy-on-write speed). For each launch one child becomes the agent. It is forked *ahead*: the zygote keeps one
**spare**, forked after the previous answer (off every launch's path) and prepared as far as nothing depends on a
launch (session, parent-death signal, signal dispositions, stdin, descriptors, random state); a launch request hands
the spare its request and its two output files (``SCM_RIGHTS`` over a ``SOCK_SEQPACKET`` pair) and the next spare is
forked after the answer. Without a spare (killed, stopped or signalled from outside: it waits with signals blocked, so
one with a signal pending is discarded; or a request bigger than one hand-off message) the launch forks on its own
path, as the spare would have. Measured (``bench/campaign.py``): a launch's request → its child's first barrier
1.1-1.4 ms shorter, the ratio to exec 7.1-7.5× → 7.3-7.9×. With ``--copy-ahead`` (given when the harness's loops leave
a core idle: ``chaos.case.copies_ahead``) a spare also copies, before its launch arrives, the pages launches were seen
to write (``chaos.prefault``: learned from launches that exit by themselves, reported to an abstract Unix socket of
the zygote): a launch's first barrier 7.1-7.8 → 4.5-5.2 ms after its hand-off. The answer carries the child's pid and
when it got the launch — the hand-off, or the moment its fork returned (``time.monotonic()``: CLOCK_MONOTONIC, one
clock for every process) — which the harness records as the launch's start; an exit status carries when the zygote
reaped it, the launch's end. The child ends up with:

- its own argv (``sys.argv``; ``argv[0]`` the module's file, as ``python -m`` sets it) and ``__main__`` module,
  environment (``os.environ`` made equal to the launch's), cwd, standard streams (``/dev/null`` and the two
  files), session and process group (``setsid``: the harness kills "the session" as for an exec'd agent);
- the parent-death signal set again (it is cleared by fork): SIGKILL when the zygote dies;
- the signal state of an interpreter exec'd by the same parent: every disposition the zygote or its preload
  changed is restored (SIGINT → ``KeyboardInterrupt``, SIGTERM/SIGCHLD default, SIGPIPE and SIGXFSZ ignored, what
  the parent left ignored stays ignored), no wakeup fd, an empty signal mask; a signal sent before the child is
  ready waits, blocked, for those dispositions;
- forked by libc's ``fork()`` rather than ``os.fork()`` (see ``_fork``: the interpreter's after-fork work is moot
  in a single-threaded zygote and cost ~0.5 ms of copy-on-write faults a launch), running the at-fork handlers the
  preload registered, but the standard library's moot ones;
- no inherited descriptor beyond 0-2 (``closerange``: the zygote's socket, pipes and whatever the preload opened),
  no inherited thread (the zygote refuses to serve when its preload left another thread running: the launcher
  falls back to exec with a one-line warning), ``random`` reseeded from the OS (ids: ``agent.session.ids`` draws
  from ``os.urandom`` on every call, so forked children never share a sequence).

The zygote is the **one reaping path** of its children (``waitpid`` on SIGCHLD) and relays each exit status
(negative = killed by that signal, as ``subprocess`` reports it) to the launcher; the harness never waits on a pid
it did not fork. It also makes itself a child subreaper, so a process an agent left behind (a bash tool's
grandchild) is reparented to it, and on its stop signal or end-of-file it SIGKILLs every process of its children's
sessions and every descendant before exiting: nothing it started outlives it. It asks for ``STOP_SIGNAL`` when its
own parent (the worker) dies, and the worker asks the same of the campaign (chaos.workers), so a SIGKILL of the
campaign takes everything down in cascade. It runs in a session of its own, so a SIGTERM or Ctrl-C sent to the
campaign's process group does not cut its running agents short (the campaign stops cleanly). If it dies anyway,
its children read as SIGKILLed (they were: their parent-death signal), the launcher says so once and launches go
by exec until ``chaos.case.shared_launcher`` starts a new zygote for the next case.

Which preloads are safe. A module that reads the environment *at import* sees the zygote's environment, not the
launch's. The bundled agent reads ``os.environ`` only when its commands run (``main`` → ``os.environ``); a target
declaring its own ``preload`` must have the same property, or list only modules that do.

What still differs from exec (none of it matters to the bundled agent; ``--launcher-check`` compares verdicts and
transcripts): every launch of one zygote shares its hash seed; settings read at interpreter start-up
(``PYTHONPATH``, ``PYTHON*`` flags, ``PYTHONIOENCODING``) are the zygote's; ``sys.orig_argv`` and
``/proc/PID/cmdline`` name ``chaos.zygote``; the program's own ``atexit`` handlers and non-daemon threads do not
run at exit (``os._exit``); the thread check counts Python threads only; the code of the module ``python -m``
runs is compiled at its first launch (a later edit of that file is not seen, as for the preloaded modules);
``threading.main_thread().native_id`` is the zygote's; at-fork handlers registered at interpreter start-up
(``.pth`` files, ``sitecustomize``), before the zygote could watch, do not run; a spare ran the preload's at-fork
handlers, reseeded ``random`` and took its pid when it was forked, before its launch was asked for; the modules
``chaos`` and ``chaos.prefault`` are in ``sys.modules``; with ``--copy-ahead``, a launch's private memory is partly
copied before it runs (its content unchanged).

OS and interpreter facts relied on: ``fork`` copies only the calling thread (hence the single-thread check), and
a child starts with the parent's signal mask and no pending signal;
``PR_SET_PDEATHSIG`` is cleared in a fork child and fires when the parent *thread* exits (the zygote is single
threaded); a pidfd (``os.pidfd_open``, Linux ≥ 5.3) can watch and signal a process that is not our child and stays
valid across pid reuse; ``os.closerange`` uses ``close_range(2)`` where the kernel has it.

Not here: when to kill (``chaos.supervisor``), sweeping a session after a case (``chaos.process``).
"""

from __future__ import annotations

import errno
import json
import os
import select
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from chaos import prefault

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
# The zygote's parent-death signal (the worker died): it sweeps, then exits. Not SIGTERM: see serve().
STOP_SIGNAL = signal.SIGUSR2
COPY_AHEAD = "--copy-ahead"  # the zygote's option: spares copy ahead the pages launches write (chaos.prefault)
READY_SECONDS = 120.0  # the preload may be a framework that imports for seconds on a cold, busy machine
REPLY_SECONDS = 30.0


# --------------------------------------------------------------------------------------------------------------
# The zygote process (python -m chaos.zygote [--copy-ahead] FD MODULE…): stdlib only; of chaos, only chaos.prefault
# (stdlib only too, and copied with this module into a framework's interpreter environment)


_LIBC = None  # libc, opened once by the zygote: a child finds prctl resolved (dlopen + lookup: ~0.4 ms)


def _libc():
    global _LIBC
    if _LIBC is None:
        try:
            import ctypes

            _LIBC = ctypes.CDLL(None, use_errno=True)
        except OSError:  # no dynamic libc
            _LIBC = False
    return _LIBC


def _prctl(option: int, value: int) -> bool:
    prctl = getattr(_libc(), "prctl", None)  # not Linux: none
    return prctl is not None and prctl(option, value, 0, 0, 0) == 0


# The standard library's at-fork handlers (every os.register_at_fork in 3.11's Lib), all moot in the zygote's fork:
# threading's, logging's and concurrent.futures.thread's re-create locks another thread might have held at the fork
# (the zygote has one thread, checked, and forks from its own loop, inside none of those modules); random's reseeds
# the module's generator, which the child does itself (_become).
MOOT_AT_FORK = frozenset({"threading", "logging", "concurrent.futures.thread", "random"})


class _AtForkWatch:
    """The at-fork handlers registered while the preload imports (``os.register_at_fork`` wrapped, then restored):
    the zygote's own fork runs those of every module but the moot ones, as ``os.fork`` would (``_fork``)."""

    def __init__(self):
        self.handlers: list[tuple[str, dict]] = []  # (registering module, its keyword arguments), in order
        self._real = os.register_at_fork

    def __enter__(self) -> _AtForkWatch:
        real, handlers = self._real, self.handlers

        def register(**kw):
            real(**kw)  # first: its errors (a non-callable) are the caller's, as before
            handlers.append((sys._getframe(1).f_globals.get("__name__", "?"), kw))

        os.register_at_fork = register
        return self

    def __exit__(self, *exc) -> None:
        os.register_at_fork = self._real

    def kept(self) -> list[dict]:
        return [kw for module, kw in self.handlers if module not in MOOT_AT_FORK]


def _run_handlers(handlers: Sequence[dict], when: str) -> None:
    """Call each handler registered for ``when``; one that raises is reported and the rest still run, as CPython
    does for ``os.fork``'s."""
    for kw in handlers:
        if when in kw:
            try:
                kw[when]()
            except BaseException:  # noqa: BLE001 - CPython writes any of it as "unraisable" and goes on (a
                # SystemExit escaping into a child would run the zygote's sweep there and kill every other agent)
                import traceback

                traceback.print_exc()


def _fork(handlers: Sequence[dict] | None, blocked: set[int]) -> tuple[int, float]:
    """Fork with ``blocked`` (``_blocked_signals``: those the zygote or its preload gave a disposition of their own)
    blocked; the child unblocks every signal once its dispositions are those of an exec'd interpreter.

    Blocking first makes the child start clean: ``pthread_sigmask`` runs the Python handlers of signals already
    caught (it calls ``PyErr_CheckSignals``), then none can be caught until the fork, and a child inherits no
    pending signal (POSIX). A signal sent to the child before it is ready waits instead of meeting the zygote's
    disposition (a SIGINT would be ignored there).

    ``handlers`` (the preload's at-fork handlers but the moot ones): libc's ``fork()`` itself, running just those
    around it, rather than ``os.fork()`` (None). ``os.fork`` wraps the fork in the interpreter's after-fork work for
    the child — re-creating the GIL, the import lock and the thread states other threads might have left taken,
    dropping signals caught but not yet handled, then every at-fork handler — and in a forked child that first run
    of Python code is a run of copy-on-write faults: ~170 of the ~240 faults, ~0.8 ms, of a child that exits at once
    (``threading._after_fork`` alone ~135). In this zygote all of that is moot: one thread, forking from its own loop
    and holding none of those locks, no signal left caught (above), and the standard library's handlers moot
    (``MOOT_AT_FORK``). fork() is called through ``ctypes.PyDLL``, which keeps the GIL, as ``os.fork`` does: were
    it released around the call (``CDLL``), a native thread the thread check cannot see could take it, and the child
    would inherit a GIL held by a thread it does not have. What a child then differs in:
    ``threading.main_thread().native_id`` keeps the zygote's thread id (``threading.get_native_id()`` is right), no
    ``os.fork`` audit event is raised, and handlers registered at interpreter start-up, before the zygote could
    watch (``.pth`` files, ``sitecustomize``), do not run.

    Returns the pid (0 in the child) and, in the parent, ``time.monotonic()`` as the fork returned: the moment the
    child exists (CLOCK_MONOTONIC, the launcher's clock too), before the parent's handlers.
    """
    pid = -1
    # Whatever the zygote (or its preload, at import or in a handler) left in Python's stream buffers would be
    # flushed by the child into its launch's output files.
    _flush()
    try:
        _sigmask(signal.SIG_BLOCK, blocked)
        if handlers is None:
            pid = os.fork()
            forked = time.monotonic()
        else:
            _run_handlers(reversed(handlers), "before")  # as CPython: the last registered first
            pid = _fork_function()()
            forked = time.monotonic()
            if pid < 0:
                import ctypes

                err = ctypes.get_errno()
                _run_handlers(handlers, "after_in_parent")
                raise OSError(err, os.strerror(err))
            _run_handlers(handlers, "after_in_child" if pid == 0 else "after_in_parent")
    finally:
        if pid != 0:
            _sigmask(signal.SIG_UNBLOCK, blocked)  # the zygote blocks nothing else: unblocking restores its mask
    return pid, forked


def _sigmask(how: int, signals: set[int]) -> None:
    """pthread_sigmask, whose change stands even when a Python handler it runs raises (reported, not raised: a
    launch must not be lost, nor the zygote's mask left changed, to a preload's faulty handler)."""
    try:
        signal.pthread_sigmask(how, signals)
    except Exception:  # noqa: BLE001 - the handler's exception, raised after the mask was set
        import traceback

        traceback.print_exc()


_FORK = None


def _fork_function():
    """libc's fork through ``ctypes.PyDLL`` (the GIL stays held during the call), looked up once."""
    global _FORK
    if _FORK is None:
        import ctypes

        _FORK = ctypes.PyDLL(None, use_errno=True).fork
    return _FORK


def _dispositions() -> dict[int, object]:
    """Each signal's Python-visible disposition: SIG_DFL, SIG_IGN, a handler, or None (set outside Python)."""
    out = {}
    for sig in signal.valid_signals():
        try:
            out[sig] = signal.getsignal(sig)
        except (ValueError, OSError):  # a number the interpreter does not handle
            pass
    return out


def _signal_resets(fresh: Mapping[int, object], now: Mapping[int, object]) -> list[tuple[int, object]]:
    """(signal, disposition) for each signal whose disposition the zygote (or its preload) changed since it
    started: a child restores just those, to what an interpreter exec'd by the same parent starts with (SIGINT →
    KeyboardInterrupt, SIGPIPE/SIGXFSZ ignored, and whatever the parent left ignored: exec keeps ignored
    signals). Found once: a signal.signal() in a child costs ~50 µs of copy-on-write faults, and most never change."""
    return [(sig, fresh[sig]) for sig, disposition in now.items()
            if sig in fresh and fresh[sig] is not None and disposition != fresh[sig]]


def _blocked_signals(resets: Sequence[tuple[int, object]]) -> set[int]:
    """What ``_fork`` blocks: SIGINT, every signal with a Python handler in the zygote, and every signal whose
    disposition a child restores (one the preload ignores, say: under exec it would act at once). The few that
    matter, found once: blocking all and reading the old mask back cost ~0.35 ms a fork (a Signals enum for each)."""
    blocked = {signal.SIGINT, *(sig for sig, _ in resets)}
    for sig in signal.valid_signals():
        try:
            if callable(signal.getsignal(sig)):
                blocked.add(sig)
        except (ValueError, OSError):  # a number the interpreter does not handle
            pass
    return blocked


# What `python -m MODULE` runs, by module name: (spec, code), found and compiled once by the zygote at the module's
# first launch (finding the spec and unmarshalling the code cost ~0.5 ms a launch in the child); the code is the
# source as it was then, as for the preloaded modules. Only where finding it imports nothing: every package on the
# way must already be imported (one imported here would run its import-time code in the zygote, after the
# single-thread check). None otherwise and on any failure: the child then does what `python -m` does.
_MAIN: dict[str, tuple | None] = {}
# A hand-off message is at most what the zygote's end of the pair may send at once: Linux doubles SO_SNDBUF for its
# bookkeeping, so 256 KiB allows messages under 512 KiB whatever net.core.wmem_default is; the spare reads up to
# 1 MiB, every message whole. A bigger request fails to send (EMSGSIZE) and the launch forks on its own path.
_HANDOFF_SNDBUF = 256 << 10
_HANDOFF_BYTES = 1 << 20


def _main_code(name: str) -> tuple | None:
    """(spec, code) of what ``python -m name`` runs, when the zygote can find it without importing anything."""
    if name not in _MAIN:
        _MAIN[name] = None
        parts = name.split(".")
        if all(".".join(parts[:i]) in sys.modules for i in range(1, len(parts))):
            try:
                import importlib.util

                spec = importlib.util.find_spec(name)
                if spec is not None and spec.submodule_search_locations is not None:  # a package: its __main__
                    spec = importlib.util.find_spec(f"{name}.__main__") if name in sys.modules else None
                code = spec.loader.get_code(spec.name) if spec is not None and spec.loader is not None else None
                if code is not None:
                    _MAIN[name] = (spec, code)
            except Exception:  # noqa: BLE001 - a syntax error, a missing parent…: the child reports it as python -m
                pass
    return _MAIN[name]


def _send(sock: socket.socket, message: Mapping) -> None:
    sock.sendall(json.dumps(message).encode() + b"\n")


def _spare_wait(handoff: socket.socket) -> tuple[dict, int, int] | None:
    """In a spare: wait for its launch (the request and its two output files); None when the zygote drops it (end
    of file). A message cut short (which the zygote's send limit rules out) is an error, never a launch."""
    data, fds, flags, _ = socket.recv_fds(handoff, _HANDOFF_BYTES, 2)
    handoff.close()
    if not data and not fds:
        return None
    if flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC) or len(fds) != 2:
        if len(fds) == 2:
            os.write(fds[1], b"chaos.zygote: the launch request reached its process cut short\n")
        raise ZygoteError(f"a hand-off of {len(data)} bytes and {len(fds)} descriptor(s), flags {flags:#x}")
    return json.loads(data), fds[0], fds[1]


def _become(request: Mapping | bytes | None, zygote_pid: int, out: int, err: int, main: tuple | None,
            resets: Sequence[tuple[int, object]], handoff: socket.socket | None = None,
            copy: Sequence[tuple[int, int]] = (), learn: bytes | None = None) -> None:
    """In the forked child: turn this process into a fresh launch of ``request["module"]`` (the request, or its JSON
    line); never returns. ``out``/``err`` are the launch's output files, opened by the zygote before the fork (so
    they exist, as with exec, the moment the launch is announced); ``resets`` the signal dispositions to restore.

    A *spare* (``request`` None) does all that depends on no launch first — its session, parent-death signal,
    signal dispositions, stdin, descriptors, random state, and the copies of the pages launches were seen to write
    (``copy``, see chaos.prefault) — then waits on ``handoff`` for its launch and its two output files, and goes on
    as any launch. ``learn``: the zygote's learner, to which the launch reports the pages it wrote if it exits by
    itself."""
    code = 1
    launched = request is not None
    try:
        if isinstance(request, bytes):  # parsed here, inside the try: nothing may return into the zygote's loop
            request = json.loads(request)
        os.setsid()
        _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != zygote_pid:  # the zygote died between fork and prctl: the signal would never come
            os._exit(1)
        signal.set_wakeup_fd(-1)
        for sig, disposition in resets:  # the zygote's handlers (and the preload's) undone: see _signal_resets
            signal.signal(sig, disposition)
        null = os.open(os.devnull, os.O_RDONLY)
        for fd, target in ((null, 0), (out, 1), (err, 2)) if request is not None else ((null, 0),):
            os.dup2(fd, target)
        # The zygote's socket and wake pipe, and anything the preload opened (a spare keeps its hand-off socket).
        keep = handoff.fileno() if handoff is not None else 1 << 20
        os.closerange(3, keep)
        os.closerange(keep + 1, 1 << 20)
        import random

        random.seed()
        import runpy

        if request is None:
            assert handoff is not None
            try:
                prefault.populate(copy)
            except Exception:  # noqa: BLE001 - only an optimisation: the launch faults those pages in, as before
                pass
            launch = _spare_wait(handoff)
            if launch is None:
                code = 0
                return
            request, out, err = launch
            launched = True
            main = _main_code(request["module"])  # as the zygote had it (compiled before this spare's fork, or now)
            for fd, target in ((out, 1), (err, 2)):
                os.dup2(fd, target)
                os.close(fd)
        os.chdir(request["cwd"])
        # The launch's environment exactly; only the differences are applied (each assignment is a putenv: the
        # whole ~100-variable replacement cost ~0.7 ms a launch, and a launch differs from the zygote in a few).
        env = request["env"]
        for key in [k for k in os.environ if k not in env]:
            del os.environ[key]
        for key, value in env.items():
            if os.environ.get(key) != value:
                os.environ[key] = value

        # As `python -m MODULE`: the module runs as __main__ from its source, not as the copy a preload imported.
        name = request["module"]
        if name in sys.modules and not hasattr(sys.modules[name], "__path__"):
            del sys.modules[name]
        sys.modules.pop(f"{name}.__main__", None)
        sys.argv = [name, *request["args"]]
        module = type(sys)("__main__")
        sys.modules["__main__"] = module  # a fresh __main__, as python -m starts with (not the zygote's own)
        try:
            # Unblocked last (_fork blocked the signals the zygote disposes of): one sent meanwhile is delivered now,
            # to the dispositions of an exec'd interpreter (a SIGINT: KeyboardInterrupt, handled below as CPython does).
            signal.pthread_sigmask(signal.SIG_SETMASK, [])
            if main is None:
                # What `python -m` itself calls: its error lines ("No module named …", "… is a package and cannot
                # be directly executed") and exit status 1, argv[0] the module's file.
                runpy._run_module_as_main(name)
            else:  # what that does on success, with the code the zygote already compiled
                spec, main_code = main
                module.__dict__.update(__file__=spec.origin, __cached__=spec.cached, __doc__=None,
                                       __loader__=spec.loader, __package__=spec.parent, __spec__=spec)
                sys.argv[0] = spec.origin
                exec(main_code, module.__dict__)
            code = 0
        except SystemExit as exc:
            if exc.code is None:
                code = 0
            elif isinstance(exc.code, int):
                code = exc.code
            else:
                sys.stderr.write(f"{exc.code}\n")
                code = 1
        except KeyboardInterrupt:
            # What CPython does with an uncaught KeyboardInterrupt: die by SIGINT, so the parent sees the signal.
            _flush()
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGINT)
        except BaseException:  # noqa: BLE001 - an uncaught exception is a traceback and exit 1, as in python -m
            import traceback

            traceback.print_exc()
            code = 1
    finally:
        _flush()
        if launched and learn is not None:  # after its output is out: the harness may already read it
            try:
                prefault.report(learn)
            except BaseException:  # noqa: BLE001 - a signal at the wrong moment: never the zygote's loop, below
                pass
        os._exit(code & 0xFF if isinstance(code, int) else 1)  # never the zygote's atexit handlers or finalizers


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):
            pass


def _sweep(children: Mapping[int, int]) -> None:
    """SIGKILL every process of the children's sessions and every descendant of the zygote (subreaper orphans)."""
    me = os.getpid()
    for _ in range(50):
        victims = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or int(entry) == me:
                continue
            pid = int(entry)
            try:
                sid = os.getsid(pid)
                with open(f"/proc/{pid}/stat", "rb") as f:
                    ppid = int(f.read().rsplit(b")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            if sid in children or ppid == me:
                victims.append(pid)
        if not victims:
            return
        for pid in victims:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        _reap({})
        time.sleep(0.01)


def _reap(children: dict[int, int], sock: socket.socket | None = None) -> set[int]:
    """Reap every exited child (ours and reparented orphans); report ours to the launcher, by launch id: a pid is
    reused once reaped (pid_max is 32,768 here, and a nightly forks more processes than that), the id never is.
    Returns the pids reaped that were no launch (a spare, an orphan)."""
    others: set[int] = set()
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return others
        if pid == 0:
            return others
        if pid not in children:
            others.add(pid)
        else:
            launch = children.pop(pid)
            if sock is not None:
                try:
                    _send(sock, {"exit": pid, "id": launch, "status": os.waitstatus_to_exitcode(status),
                                 "at": time.monotonic()})  # reaped on SIGCHLD: within a few µs of its end
                except OSError:
                    pass


def serve(fd: int, preload: Sequence[str], copy_ahead: bool = False) -> int:
    """The zygote's life: preload, announce, then fork one child per launch request until end-of-file.
    ``copy_ahead``: spares copy the pages launches were seen to write (chaos.prefault)."""
    parent = os.getppid()
    fresh = _dispositions()  # before the zygote installs a handler: what an interpreter exec'd here starts with
    sock = socket.socket(fileno=fd)
    # STOP_SIGNAL, not SIGKILL, when the worker dies: the handler sweeps before exiting. (The zygote runs in a session
    # of its own, so a SIGTERM or Ctrl-C a CI runner sends to the campaign's process group does not reach it: the
    # campaign stops cleanly, and this zygote with it by end-of-file.)
    _prctl(_PR_SET_PDEATHSIG, STOP_SIGNAL)
    if os.getppid() != parent:  # the worker died before the request was in place
        return 1
    _prctl(_PR_SET_CHILD_SUBREAPER, 1)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the campaign's to handle
    children: dict[int, int] = {}  # pid -> launch id, until reaped
    stop = False

    def on_term(signum, frame):  # noqa: ARG001 - signal API
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(STOP_SIGNAL, on_term)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    os.set_blocking(wake_r, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda s, f: None)  # a handler, so the wakeup fd sees SIGCHLD
    try:
        import importlib

        with _AtForkWatch() as watch:
            for name in preload:
                importlib.import_module(name)
    except BaseException as exc:  # noqa: BLE001 - any failure of the preload is the launcher's fallback reason
        _send(sock, {"fallback": f"preload {name!r} failed: {type(exc).__name__}: {exc}"})
        return 1
    import threading

    if threading.active_count() > 1:
        _send(sock, {"fallback": f"the preload left {threading.active_count()} threads running (fork copies only "
                                 "one: their locks could be held in every child)"})
        return 1
    zygote_pid = os.getpid()
    # No gc.freeze() here: measured, it made a forked launch slower (5.0 ms vs 3.7 ms to run `agent bugs`).
    resets = _signal_resets(fresh, _dispositions())
    blocked = _blocked_signals(resets)
    handlers = watch.kept() if getattr(_libc(), "fork", None) else None  # (no libc fork: os.fork)
    if handlers is not None:
        _fork_function()
    try:
        learner: prefault.Learner | None = prefault.Learner() if copy_ahead and prefault.prepare() else None
    except Exception:  # noqa: BLE001 - no abstract Unix sockets here, say: launches fault their pages in, as before
        learner = None
    forks = 0  # children forked to take a launch (spares included): which of them learn

    def learns() -> bytes | None:
        nonlocal forks
        forks += 1
        return learner.address if learner is not None and learner.learns(forks) else None

    def new_spare() -> tuple[int, socket.socket, int] | None:
        """Fork the next launch's process ahead of its request (see _become): off the path of any launch. The
        third item: how many pages it is asked to copy ahead."""
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        mine.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, _HANDOFF_SNDBUF)
        learn = learns()
        # A learner copies nothing: its report must tell the pages it wrote from the ones copied for it.
        copy = learner.runs if learner is not None and learn is None else []
        try:
            pid, _ = _fork(handlers, blocked)
        except OSError:
            mine.close()
            theirs.close()
            return None  # (out of processes, say): the next launch forks on its own path
        if pid == 0:
            _become(None, zygote_pid, -1, -1, None, resets, handoff=theirs, copy=copy, learn=learn)
        theirs.close()
        return pid, mine, prefault.pages(copy)

    spare = new_spare()
    _send(sock, {"ready": zygote_pid, "fork": "os" if handlers is None else f"libc, {len(handlers)} handler(s)"})
    buffer = b""
    try:
        while not stop:
            try:
                ready, _, _ = select.select([sock, wake_r, *([learner.sock] if learner else [])], [], [])
            except InterruptedError:
                continue
            if learner is not None and learner.sock in ready:
                learner.receive()
            if wake_r in ready:
                try:
                    os.read(wake_r, 4096)
                except BlockingIOError:
                    pass
                if spare is not None and spare[0] in _reap(children, sock):
                    spare[1].close()  # reaped: its pid may be anyone's now, it must never be handed a launch
                    spare = None
            if sock in ready:
                data = sock.recv(1 << 20)
                if not data:
                    break  # the launcher is gone
                buffer += data
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    head, _, line = line.partition(b"\t")  # json.dumps never writes a raw TAB
                    request = json.loads(head)
                    opened: list[int] = []
                    try:
                        # What Popen would refuse before the program runs is refused here too, with its error
                        # (a missing cwd is a launch error under exec, not an exit 1 of the child).
                        if not os.path.isdir(request["cwd"]):
                            raise FileNotFoundError(2, "No such file or directory", request["cwd"])
                        main = _main_code(request["module"])  # compiled once here: later spares inherit it
                        for name in ("stdout", "stderr"):
                            opened.append(os.open(request[name], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644))
                        copied = spare[2] if spare else 0
                        pid, forked, spare = _hand_off(spare, line, opened) if spare else (0, 0.0, None)
                        learn = None
                        if not pid:  # no spare, or it is gone: fork on this launch's path
                            # The reply below comes after the parent's side of the fork, while the child already
                            # runs: it carries when the child came to exist.
                            copied, learn = 0, learns()
                            pid, forked = _fork(handlers, blocked)
                    except OSError as exc:
                        for fd in opened:
                            os.close(fd)
                        _send(sock, {"id": request["id"], "error": str(exc)})
                        continue
                    if pid == 0:
                        _become(line, zygote_pid, *opened, main, resets, learn=learn)
                    for fd in opened:
                        os.close(fd)
                    children[pid] = request["id"]
                    _send(sock, {"id": request["id"], "pid": pid, "forked": forked, "copied": copied})
                if spare is None and not stop:
                    spare = new_spare()  # after the answers, off every launch's path
    finally:
        if spare is not None:
            spare[1].close()  # end-of-file: the spare exits by itself (and the sweep below kills it anyway)
        if learner is not None:
            learner.close()
        _sweep(dict(children))
        _reap(children)
    return 0


def _spare_clean(pid: int) -> bool:
    """True when a spare may take a launch: not stopped and no signal pending. It waits with the zygote's signals
    blocked (see _fork), so a signal sent to it from outside while it waits would otherwise hit its launch, which
    must start with none pending (as any child). Read from /proc/PID/status (~20 µs)."""
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            text = f.read()
        # Only the three lines needed (a dict of all ~60 cost the zygote ~50 µs a launch, on its path).
        state, pending, shared = (text.split(b"\n" + key + b":", 1)[1].split(None, 1)[0]
                                  for key in (b"State", b"SigPnd", b"ShdPnd"))
        return state in (b"S", b"R", b"D") and int(pending, 16) == 0 and int(shared, 16) == 0
    except (OSError, IndexError, ValueError):
        return False


def _hand_off(spare: tuple[int, socket.socket, int], line: bytes, files: Sequence[int]):
    """Give a spare its launch (the request line and its two output files): (its pid, when it got them, None); or
    (0, 0.0, the spare still waiting) for a request too big for one message; or (0, 0.0, None) when the spare is gone
    (its socket closed with it, so a pid reused by another process is never taken for it)."""
    pid, handoff, _ = spare
    if not _spare_clean(pid):
        try:
            os.kill(pid, signal.SIGKILL)  # not reaped yet (serve drops a reaped spare): the pid is still its own
        except ProcessLookupError:
            pass
        handoff.close()
        return 0, 0.0, None
    try:
        socket.send_fds(handoff, [line], list(files))
    except OSError as exc:
        if exc.errno == errno.EMSGSIZE:
            return 0, 0.0, spare
        handoff.close()  # EPIPE, ECONNREFUSED…: the spare died (killed from outside)
        return 0, 0.0, None
    handoff.close()
    return pid, time.monotonic(), None


# --------------------------------------------------------------------------------------------------------------
# The harness side


class ZygoteError(Exception):
    """The zygote could not start or stopped answering (the launcher then falls back to exec)."""


class ZygoteLauncher:
    """A ``chaos.process.Launcher`` that forks launches of ``python -m MODULE`` from a warm zygote.

    An argv that is not ``[this interpreter, "-m", MODULE, …]`` (a foreign command) is launched by exec. When the
    zygote cannot serve (its preload failed or left threads running) every launch is by exec and ``fallback``
    says why. Use one launcher per process (a campaign worker); ``close`` stops the zygote and sweeps its children.
    """

    def __init__(self, module: str, preload: Sequence[str] = (), *, python: str = sys.executable,
                 stderr: str | Path | None = None, env: Mapping[str, str] | None = None, copy_ahead: bool = False):
        from chaos.process import SubprocessLauncher

        self.module = module
        self.preload = tuple(preload) or (module,)
        self.python = python
        # Added to the zygote's own environment: what another interpreter environment needs to import the probe
        # (PYTHONPATH, chaos.environments.probe_path). Read at interpreter start-up, so every launch shares it.
        self.env = dict(env or {})
        self.copy_ahead = copy_ahead
        self.exec = SubprocessLauncher()
        self.fallback: str | None = None
        self.fork: str | None = None  # how the zygote forks, once it is ready
        self.forked = 0  # launches the zygote forked (or handed to a spare)
        self.copied = 0  # pages their spares were asked to copy ahead, in all (chaos.prefault: asked, not checked)
        self._status: dict[int, int] = {}  # launch id -> exit status (never by pid: pids are reused)
        self._ended: dict[int, float] = {}  # launch id -> when the zygote reaped it (time.monotonic())
        self._next = 0
        self._buffer = b""
        self._sock: socket.socket | None = None
        self._proc: subprocess.Popen | None = None
        self._start(stderr)

    # ---- life ------------------------------------------------------------------------------------------------

    def _start(self, stderr) -> None:
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        err = open(stderr, "ab") if stderr else subprocess.DEVNULL
        try:
            self._proc = subprocess.Popen(
                [self.python, "-m", "chaos.zygote", *([COPY_AHEAD] if self.copy_ahead else []), str(theirs.fileno()),
                 *self.preload],
                pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err,
                close_fds=True, start_new_session=True, env={**os.environ, **self.env} if self.env else None)
        except OSError as exc:
            self.fallback = f"the zygote could not start: {exc}"
            mine.close()
            return
        finally:
            theirs.close()
            if err is not subprocess.DEVNULL:
                err.close()
        self._sock = mine
        message = self._read_until(lambda m: "ready" in m or "fallback" in m, READY_SECONDS)
        if message is None:
            self.fallback = "the zygote did not become ready"
        elif "fallback" in message:
            self.fallback = message["fallback"]
        else:
            self.fork = message.get("fork", "os")  # "libc", or "os" and why (see _fork)
        if self.fallback:
            self.close()

    def close(self) -> None:
        """Stop the zygote: end-of-file makes it sweep every process it started and exit."""
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        if self._proc is not None:
            try:
                self._proc.wait(10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
            self._proc = None

    def _died(self) -> None:
        """End-of-file from a zygote that was serving: it is gone, and so are its children (their parent-death
        signal). Every later launch goes by exec; ``died`` tells the owner, which may start a new zygote."""
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        code = self._proc.poll() if self._proc is not None else None
        if self.fallback is None:
            self.fallback = f"the zygote died (exit {code})"
            self.died = True

    died = False

    @property
    def alive(self) -> bool:
        return self._sock is not None and self._proc is not None and self._proc.poll() is None

    def cpu_seconds(self) -> float:
        """CPU time of the zygote and of every child it has reaped (spares and launches): user + system, its own
        and its waited-for children's (``/proc/PID/stat``); 0.0 once it is gone."""
        if self._proc is None:
            return 0.0
        try:
            with open(f"/proc/{self._proc.pid}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except OSError:
            return 0.0
        return sum(int(x) for x in fields[11:15]) / os.sysconf("SC_CLK_TCK")  # utime stime cutime cstime

    # ---- messages ----------------------------------------------------------------------------------------------

    def _read_until(self, done, timeout: float) -> dict | None:
        """Read messages (recording exits and replies) until ``done(message)``; None on timeout or end-of-file."""
        deadline = time.monotonic() + timeout
        while True:
            while b"\n" in self._buffer:
                line, self._buffer = self._buffer.split(b"\n", 1)
                message = json.loads(line)
                if "exit" in message:
                    self._status[message["id"]] = message["status"]
                    if isinstance(message.get("at"), float):
                        self._ended[message["id"]] = message["at"]
                if done(message):
                    return message
            left = deadline - time.monotonic()
            if left <= 0 or self._sock is None:
                return None
            ready, _, _ = select.select([self._sock], [], [], left)
            if not ready:
                return None
            data = self._sock.recv(1 << 16)
            if not data:
                self._died()
                return None
            self._buffer += data

    def pump(self, timeout: float = 0.0) -> None:
        """Record whatever the zygote has said (exit statuses) within ``timeout`` seconds."""
        self._read_until(lambda m: False, timeout)

    def ended(self, launch: int) -> float | None:
        """When the zygote reaped launch ``launch`` (once its status is known; taken: asked once)."""
        return self._ended.pop(launch, None)

    def status(self, launch: int, timeout: float = 0.0) -> int | None:
        """The exit status of launch ``launch`` (its id) once the zygote reaped it (waiting up to ``timeout``)."""
        if launch not in self._status:
            self._read_until(lambda m: "exit" in m and m.get("id") == launch, timeout)
        return self._status.get(launch)

    # ---- launching --------------------------------------------------------------------------------------------

    def accepts(self, argv: Sequence[str]) -> bool:
        return (self.fallback is None and self.alive and len(argv) >= 3 and argv[0] == self.python
                and argv[1] == "-m" and argv[2] == self.module)

    def launch(self, argv: Sequence[str], env: Mapping[str, str], cwd: Path, stdout: Path, stderr: Path):
        if not self.accepts(argv):
            return self.exec.launch(argv, env, cwd, stdout, stderr)
        self._next += 1
        sent = time.monotonic()
        head = {"id": self._next, "module": self.module, "cwd": str(cwd), "stdout": str(stdout),
                "stderr": str(stderr)}
        request = {**head, "args": list(argv[3:]), "env": dict(env)}
        assert self._sock is not None
        try:  # the zygote reads the head only (module docstring); json.dumps escapes every TAB and newline
            self._sock.sendall(json.dumps(head).encode() + b"\t" + json.dumps(request).encode() + b"\n")
        except OSError:  # the zygote is gone (broken pipe): the launch goes by exec
            self._died()
            return self.exec.launch(argv, env, cwd, stdout, stderr)
        reply = self._read_until(lambda m: ("pid" in m or "error" in m) and m.get("id") == request["id"],
                                 REPLY_SECONDS)
        if reply is not None and "error" in reply:
            raise OSError(reply["error"])  # as Popen would raise for an output file it cannot open
        if reply is None:
            self.fallback = "the zygote stopped answering"
            self.close()
            return self.exec.launch(argv, env, cwd, stdout, stderr)
        # Created when its process got the launch (hand-off or fork) as the zygote reports it, bounded by what this
        # side saw (one clock, CLOCK_MONOTONIC).
        forked = reply.get("forked")
        created = min(max(forked, sent), time.monotonic()) if isinstance(forked, float) else time.monotonic()
        self.forked += 1
        self.copied += reply.get("copied", 0)
        return ZygoteProcess(self, reply["pid"], request["id"], created)


class ZygoteProcess:
    """``chaos.process.AgentProcess`` for a child of the zygote: watched and signalled through a pidfd opened as soon
    as the launch is announced (a signal through it can never reach a process that later reuses the pid); its exit
    status comes from the zygote, by launch id."""

    def __init__(self, launcher: ZygoteLauncher, pid: int, launch: int, created: float | None = None):
        self.launcher = launcher
        self.created = time.monotonic() if created is None else created
        self.launch = launch  # the launch id: exit statuses are reported by it, never by the reusable pid
        self.pid = pid
        self.session_id = pid
        try:
            self._pidfd: int | None = os.pidfd_open(pid)
        except ProcessLookupError:  # it exited (and was reaped) at once: the zygote's word is all there is
            self._pidfd = None
        self.returncode: int | None = None
        self.ended: float | None = None  # when the zygote reaped it: its word, as for the status

    def _exited(self, timeout: float) -> bool:
        if self._pidfd is None:
            return True
        ready, _, _ = select.select([self._pidfd], [], [], max(0.0, timeout))
        return bool(ready)

    def poll(self) -> int | None:
        if self.returncode is None:
            code = self.launcher.status(self.launch, 0.0)
            if code is None and self._exited(0.0):
                # Exited: the zygote reaps on SIGCHLD and reports within milliseconds.
                code = self.launcher.status(self.launch, 5.0)
                if code is None and self.launcher.died:
                    code = -signal.SIGKILL  # its zygote died: the child got its parent-death signal, SIGKILL
            self.returncode = code
            if code is not None:
                self.ended = self.launcher.ended(self.launch)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int | None:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return None
            if self._pidfd is not None:
                self._exited(0.5 if left is None else min(left, 0.5))
            else:
                self.launcher.pump(0.05 if left is None else min(left, 0.05))
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.returncode is not None or self._pidfd is None:
            return
        try:
            signal.pidfd_send_signal(self._pidfd, sig)
        except ProcessLookupError:  # exited meanwhile
            pass

    def kill_session(self, timeout: float = 5.0):
        from chaos.process import kill_session

        return kill_session(self, timeout)

    def exit_fd(self) -> int | None:
        return self._pidfd

    def close(self) -> None:
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None


def pidfd_supported() -> bool:
    """Whether this kernel and sandbox give pidfds (Linux ≥ 5.3): the zygote's children are watched through them."""
    try:
        os.close(os.pidfd_open(os.getpid()))
        return True
    except (AttributeError, OSError):
        return False


def launcher_for(target, *, warn=None, copy_ahead: bool = False):
    """The launcher of ``target`` (``chaos.target.Target``) in this process: a zygote when the target allows one
    (``launcher = "zygote"`` and a ``python -m MODULE`` command of this interpreter), else exec. A zygote that cannot
    serve falls back to exec and ``warn`` gets one line saying why; ``copy_ahead``: its spares copy ahead the pages
    launches write (chaos.prefault). Call it from the main thread: the zygote's
    parent-death signal is tied to the thread that started it, and it must live as long as the process."""
    import threading

    from chaos.process import SubprocessLauncher

    module = target.zygote_module()
    if module is None:
        return SubprocessLauncher()
    if threading.current_thread() is not threading.main_thread():
        return SubprocessLauncher()
    if not pidfd_supported():
        if warn is not None:
            warn("zygote launcher unavailable (no pidfd on this kernel); launching by exec")
        return SubprocessLauncher()
    preload = target.preload or (module,)
    env = target.interpreter_env()
    if target.probe is not None:  # the runner first: it installs the probe in each child before the program runs
        preload = (module, *target.preload)
        # The preload imports with the target's own settings (its telemetry switches: CrewAI decides at import
        # whether to start an exporter thread); a value naming the case directory cannot apply to a zygote.
        env = {**{k: v for k, v in target.probe.env if "{case}" not in v}, **env}
    launcher = ZygoteLauncher(module, preload, python=target.interpreter(), env=env, copy_ahead=copy_ahead)
    if launcher.fallback and warn is not None:
        warn(f"zygote launcher unavailable ({launcher.fallback}); launching by exec")
    return launcher


def main(argv: list[str]) -> int:
    copy_ahead = argv[:1] == [COPY_AHEAD]
    argv = argv[1:] if copy_ahead else argv
    if len(argv) < 1 or not argv[0].isdigit():
        sys.stderr.write(f"usage: python -m chaos.zygote [{COPY_AHEAD}] FD MODULE...\n")
        return 2
    return serve(int(argv[0]), argv[1:], copy_ahead)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
