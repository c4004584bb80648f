"""chaos.process on real processes: is_runnable (a spinning one, one blocked on a lock, one gone), proc_info read
from /proc as psutil reads it, a zygote launch's creation time (its fork, or its hand-off to a spare), and the
record of sweeps."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil

from chaos.process import ProcInfo, is_runnable, proc_info
from tests.integration import until

REPO = Path(__file__).resolve().parents[2]

SPIN = "while True: pass"
# Blocks in flock on a file the test holds locked: asleep, like a concurrent resume waiting for a program's lock.
WAIT_FOR_LOCK = "import fcntl, sys; f = open(sys.argv[1], 'w'); print('ready', flush=True); fcntl.flock(f, fcntl.LOCK_EX)"


def test_a_spinning_process_is_runnable():
    """A process burning CPU reads as runnable."""
    proc = subprocess.Popen([sys.executable, "-c", SPIN])
    try:
        assert until(lambda: is_runnable(proc.pid))
    finally:
        proc.kill()
        proc.wait()


def test_a_process_blocked_on_a_lock_is_not_runnable(tmp_path):
    """A process waiting in flock for a lock someone else holds reads as not runnable."""
    path = tmp_path / "lock"
    with open(path, "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        proc = subprocess.Popen([sys.executable, "-c", WAIT_FOR_LOCK, str(path)], stdout=subprocess.PIPE, text=True)
        try:
            assert proc.stdout.readline() == "ready\n"
            assert until(lambda: not is_runnable(proc.pid))
        finally:
            proc.kill()
            proc.wait()
            proc.stdout.close()


def test_a_reaped_process_is_not_runnable():
    """A pid whose process has ended and been reaped is not runnable."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    assert not is_runnable(proc.pid)


def _psutil_view(pid: int):
    """(name, cmdline) as psutil gives them, or None when it raises (gone, zombie)."""
    try:
        p = psutil.Process(pid)
        return p.name(), tuple(p.cmdline())
    except psutil.Error:
        return None


def test_proc_info_reads_what_psutil_reads(tmp_path):
    """Name and command line from /proc equal psutil's: a name the kernel cuts at 15 characters, arguments with
    spaces, carriage returns and an empty one, a rewritten title, an empty argv[0], every process of the machine;
    a zombie keeps its name (psutil raises), a process gone is "?"."""
    long_name = tmp_path / "a-rather-long-interpreter-name"
    long_name.symlink_to(sys.executable)
    sleeper = "import time; time.sleep(30)"
    procs = [
        subprocess.Popen([str(long_name), "-c", sleeper, "two words", "a\rb", "c\r\nd", ""]),
        # One argument with spaces, as a process that rewrote its title shows: psutil splits it at the spaces.
        subprocess.Popen(["bash", "-c", 'exec -a "worker: a title" cat'], stdin=subprocess.PIPE),
        subprocess.Popen(["bash", "-c", 'exec -a "" cat'], stdin=subprocess.PIPE),  # /proc/PID/cmdline is one NUL
    ]
    zombie = subprocess.Popen(["true"])
    try:
        # Exec sets the new name before it copies the arguments into the new address space: until both are there,
        # /proc/PID/cmdline reads empty (a window a loaded machine makes visible).
        assert until(lambda: all(_psutil_view(p.pid) and _psutil_view(p.pid)[0] not in ("bash", "python3")
                                  and proc_info(p.pid).cmdline != () for p in procs))
        assert until(lambda: psutil.Process(zombie.pid).status() == psutil.STATUS_ZOMBIE)
        assert proc_info(procs[0].pid).name == long_name.name
        assert proc_info(procs[0].pid).cmdline[-3:] == ("a\nb", "c\nd", "")
        assert proc_info(procs[1].pid).cmdline == ("worker:", "a", "title")
        assert proc_info(procs[2].pid).cmdline == ("",)
        assert proc_info(zombie.pid) == ProcInfo(zombie.pid, "true")
        compared = 0
        for pid in [p.pid for p in procs] + psutil.pids():
            before = _psutil_view(pid)
            info = proc_info(pid)
            if before is None or _psutil_view(pid) != before:
                continue  # raised (a zombie, gone) or changed while we read: nothing to compare
            assert (info.name, info.cmdline) == before, pid
            compared += 1
        assert compared >= len(procs)
    finally:
        for p in (*procs, zombie):
            p.kill()
            p.wait()
    assert proc_info(zombie.pid).name == "?"


def test_a_zygote_launch_is_created_at_its_fork_or_its_hand_off(tmp_path):
    """A zygote child's ``created`` is when its fork returned, not when the zygote's answer arrives: with a preload
    that keeps the zygote 50 ms busy after each fork, the answer comes that much later. A launch handed to a spare
    (forked ahead) is created at the hand-off."""

    from chaos.zygote import ZygoteLauncher
    from tests.agents.slow_parent_preload import DELAY

    launcher = ZygoteLauncher("tests.agents.fresh", ("tests.agents.slow_parent_preload",),
                              env={"PYTHONPATH": str(REPO)})
    try:
        assert launcher.fallback is None, launcher.fallback
        env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)}
        argv = [sys.executable, "-m", "tests.agents.fresh", "exit", "0"]
        zygote = psutil.Process(launcher._proc.pid)
        assert until(lambda: len(zygote.children()) == 1)
        spare = zygote.children()[0]
        before = time.monotonic()
        handed = launcher.launch(argv, env, tmp_path, tmp_path / "out1", tmp_path / "err1")
        after = time.monotonic()
        assert handed.pid == spare.pid and before <= handed.created <= after
        assert handed.wait(10) == 0
        # No spare (killed, then reaped by the zygote): the launch forks on its own path.
        assert until(lambda: len([c for c in zygote.children() if c.pid != handed.pid]) == 1)
        os.kill(next(c.pid for c in zygote.children() if c.pid != handed.pid), 9)
        assert until(lambda: len([c for c in zygote.children() if c.pid != handed.pid]) == 0)
        before = time.monotonic()
        forked = launcher.launch(argv, env, tmp_path, tmp_path / "out2", tmp_path / "err2")
        after = time.monotonic()
        assert before <= forked.created and after - forked.created >= DELAY
        assert forked.wait(10) == 0
        for proc in (handed, forked):
            proc.close()
    finally:
        launcher.close()


def test_a_sweep_is_recorded_once_however_deep_its_calls(monkeypatch):
    """kill_processes over session_members leaves one interval in SWEEPS (the outermost call), spanning the sweep."""
    from collections import deque

    from chaos import process

    # A fresh record: the module's keeps its last 4,096 sweeps, and earlier tests of this worker may have filled it.
    monkeypatch.setattr(process, "SWEEPS", deque(maxlen=4096))
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], start_new_session=True)
    try:
        before = len(process.SWEEPS)
        started = time.monotonic()
        report = process.kill_processes(lambda: process.session_members(proc.pid) + [psutil.Process(proc.pid)],
                                        5.0, leader_done=lambda: proc.poll() is not None)
        ended = time.monotonic()
        assert [p.pid for p in report.killed] == [proc.pid]
        assert len(process.SWEEPS) == before + 1
        first, last = process.SWEEPS[-1]
        assert started <= first <= last <= ended
    finally:
        proc.kill()
        proc.wait()


def test_run_bounded_leaves_nothing_of_its_command_running(tmp_path):
    """A question's command (a target's describe) that leaves a daemon in its session: the daemon ends with it."""
    from chaos.process import run_bounded
    from tests.integration import gone

    pidfile = tmp_path / "daemon.pid"
    command = f"sleep 300 </dev/null >/dev/null 2>&1 & echo $! > {pidfile}; echo '{{}}'"  # off the output pipes
    done = run_bounded(["sh", "-c", command], dict(os.environ), 30.0)
    assert done.returncode == 0 and done.stdout.strip() == b"{}"
    assert gone(int(pidfile.read_text()))


def test_run_bounded_ends_although_an_escaped_process_holds_its_output(tmp_path, monkeypatch):
    """A command that times out after starting a process in a session of its own that keeps the output pipes open:
    run_bounded still raises TimeoutExpired (the pipes are dropped), instead of waiting for that process forever."""
    import signal

    import pytest

    from chaos import process

    monkeypatch.setattr(process, "DRAIN_SECONDS", 0.5)
    pidfile = tmp_path / "escaped.pid"
    command = f"setsid sleep 30 & echo $! > {pidfile}; sleep 30"  # the escaped sleep keeps stdout and stderr
    started = time.monotonic()
    try:
        with pytest.raises(subprocess.TimeoutExpired):
            process.run_bounded(["sh", "-c", command], dict(os.environ), 1.0)
        assert time.monotonic() - started < 20  # not the escaped sleep's 30 s
    finally:
        if pidfile.exists():
            os.kill(int(pidfile.read_text()), signal.SIGKILL)


def _stop_a_campaign_of(tmp_path: Path, script: str, ready, sig) -> None:
    """Run `chaos campaign` over a target that runs ``script`` (Python), with SIGINT and SIGTERM at their defaults
    whatever this test runner was started with (a background job ignores SIGINT); once ``ready()``, send ``sig`` to
    the campaign's process group and assert it stopped on it (exit 128 + sig)."""
    import signal

    program = tmp_path / "target.py"
    program.write_text(script)
    target = tmp_path / "t.toml"
    target.write_text(f'name = "t"\ncommand = ["{sys.executable}", "{program}"]\n')
    scenario = Path(__file__).resolve().parents[2] / "scenarios" / "single-read.toml"

    # A trampoline sets the defaults, then execs the campaign (preexec_fn could deadlock a threaded test process).
    defaults = ("import os, signal, sys\nfor s in (signal.SIGINT, signal.SIGTERM): signal.signal(s, signal.SIG_DFL)\n"
                "os.execv(sys.executable, [sys.executable, '-m', *sys.argv[1:]])")
    proc = subprocess.Popen([sys.executable, "-c", defaults, "chaos", "campaign", str(scenario), "--target", str(target),
                             "--out", str(tmp_path / "out"), "--name", "c"], cwd=tmp_path, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not ready():
            assert time.monotonic() < deadline and proc.poll() is None, "the target never started"
            time.sleep(0.05)
        os.killpg(proc.pid, sig)
        assert proc.wait(60) == 128 + sig
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_a_hang_up_stops_a_campaign_and_its_exec_d_target(tmp_path):
    """SIGHUP to a campaign's process group (its terminal closed): its workers hear it as the campaign does, so the
    campaign stops cleanly (exit 129, "stopped": "SIGHUP") and the target it exec'd is gone with it."""
    import json
    import signal

    from tests.integration import gone

    pids = tmp_path / "pids"
    _stop_a_campaign_of(tmp_path, "import os, subprocess, time\nchild = subprocess.Popen(['sleep', '300'])\n"
                        f"open({str(pids)!r}, 'a').write(f'{{os.getpid()}} {{child.pid}}\\n')\ntime.sleep(300)\n",
                        lambda: pids.exists() and pids.read_text().strip(), signal.SIGHUP)
    assert all(gone(int(pid)) for pid in pids.read_text().split())
    assert json.loads((tmp_path / "out" / "c" / "campaign.json").read_text())["stopped"] == "SIGHUP"


def test_a_campaign_starts_its_exec_d_target_with_default_interrupt_and_terminate(tmp_path):
    """A target a campaign worker execs starts with SIGINT and SIGTERM at their defaults, as under `chaos run`: an
    ``int`` fault reaches a program that installs no handler of its own (the worker does not ignore them)."""
    import signal

    status = tmp_path / "status"
    _stop_a_campaign_of(tmp_path, "import os, time\nlines = open('/proc/self/status').read().splitlines()\n"
                        f"open({str(status) + '.tmp'!r}, 'w').write('\\n'.join(l for l in lines if l[:3] == 'Sig'))\n"
                        f"os.rename({str(status) + '.tmp'!r}, {str(status)!r})\ntime.sleep(300)\n",
                        status.exists, signal.SIGTERM)
    ignored = int(dict(line.split(":") for line in status.read_text().splitlines())["SigIgn"], 16)
    assert not ignored & (1 << (signal.SIGINT - 1)) and not ignored & (1 << (signal.SIGTERM - 1))
