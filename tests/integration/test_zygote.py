"""The zygote launcher with real processes: a forked launch is as fresh as an exec'd one, statuses are relayed, and
nothing it started outlives it (chaos/zygote.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from chaos.process import SubprocessLauncher
from chaos.zygote import ZygoteLauncher
from tests.integration import until

REPO = Path(__file__).resolve().parents[2]
MODULE = "tests.agents.fresh"


@pytest.fixture
def zygote():
    launcher = ZygoteLauncher(MODULE, ("json", "subprocess", "ctypes"))
    assert launcher.fallback is None, launcher.fallback
    yield launcher
    launcher.close()


def env(**extra) -> dict:
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": str(REPO), **extra}


def launch(launcher, tmp_path: Path, *args: str, **variables):
    out, err = tmp_path / f"{len(list(tmp_path.iterdir()))}.out", tmp_path / f"{len(list(tmp_path.iterdir()))}.err"
    proc = launcher.launch([sys.executable, "-m", MODULE, *args], env(**variables), tmp_path, out, err)
    return proc, out, err


class TestFreshness:
    @pytest.mark.parametrize("path", ["spare", "fork"])
    def test_a_forked_launch_sees_what_an_exec_launch_sees(self, zygote, tmp_path, path):
        """argv, environment, cwd, descriptors, signal dispositions and mask, threads and session match exec, for a
        launch handed to the spare and for one forked on its own path (no spare: killed)."""
        assert until(lambda: len(_spares(zygote)) == 1)
        ahead = _spares(zygote)
        if path == "fork":
            os.kill(ahead[0], signal.SIGKILL)
            assert until(lambda: not _spares(zygote))
        seen = []
        for launcher in (zygote, SubprocessLauncher()):
            work = tmp_path / type(launcher).__name__
            work.mkdir()
            # A TAB and a newline in an argument and a variable: the request line's separators (one line, a TAB
            # after the zygote's part) must never be taken from them.
            proc, out, err = launch(launcher, work, "report", "x\ty\nz", FRESH_VARS="A,B,HOME", A="1\t2\n3",
                                    B="two")
            assert proc.wait(20) == 0, err.read_text()
            proc.close()
            data = json.loads(out.read_text())
            assert err.read_text() == "to stderr\n"
            seen.append(data)
        forked, execd = seen
        assert (forked["pid"] in ahead) is (path == "spare")
        for key in ("argv", "argv0", "main", "env", "signals", "mask", "threads", "threading", "session_leader",
                    "stdin_empty", "fds"):
            assert forked[key] == execd[key], key
        assert zygote.fork == "libc, 0 handler(s)"  # forked by libc's fork(): the checks above hold without os.fork's
        assert forked["threading"] == {"current_is_main": True, "main_ident": True, "new_thread_runs": True}
        assert forked["env"] == {"A": "1\t2\n3", "B": "two", "HOME": None}  # the launch's, not the zygote's
        assert forked["argv"] == ["report", "x\ty\nz"]
        assert forked["cwd"].endswith("ZygoteLauncher") and forked["fds"] == [0, 1, 2, 3]
        assert forked["pdeathsig"] == signal.SIGKILL  # set again after fork: it dies with the zygote

    def test_a_preloads_at_fork_handler_runs_and_its_signal_handler_does_not_stay(self, tmp_path):
        """A preload's at-fork handler runs in each child (as os.fork would run it), and a signal handler it
        installed is undone: every disposition equals exec's."""
        launcher = ZygoteLauncher(MODULE, ("tests.agents.forky_preload",))
        try:
            assert launcher.fork == "libc, 1 handler(s)"
            seen = []
            for each in (launcher, SubprocessLauncher()):
                work = tmp_path / type(each).__name__
                work.mkdir()
                proc, out, err = launch(each, work, "report")
                assert proc.wait(20) == 0, err.read_text()
                proc.close()
                seen.append(json.loads(out.read_text()))
            forked, execd = seen
            assert forked["at_fork"] and not execd["at_fork"]
            assert forked["signals"] == execd["signals"]
            assert forked["signals"][str(int(signal.SIGWINCH))] == "default"
        finally:
            launcher.close()

    def test_a_signal_the_preload_ignores_acts_at_once_as_under_exec(self, tmp_path):
        """SIGUSR1, which the preload ignores, sent as soon as the launch returns: it waits, blocked, for the
        child's default disposition and ends it, as it ends an exec'd one."""
        launcher = ZygoteLauncher(MODULE, ("tests.agents.forky_preload",))
        try:
            for each in (launcher, SubprocessLauncher()):
                proc, _, _ = launch(each, tmp_path, "wait", "20")
                proc.send_signal(signal.SIGUSR1)
                assert proc.wait(20) == -signal.SIGUSR1, type(each).__name__
                proc.close()
        finally:
            launcher.close()

    def test_an_at_fork_handler_that_exits_never_reaches_the_zygotes_loop(self, tmp_path):
        """A preload's after-fork handler raising SystemExit is reported and the child goes on (as os.fork does);
        it never unwinds into the zygote's loop, whose sweep would kill every other running agent."""
        launcher = ZygoteLauncher(MODULE, ("tests.agents.exiting_fork_preload",))
        try:
            first, _, _ = launch(launcher, tmp_path, "wait", "30")
            second, out, err = launch(launcher, tmp_path, "report")
            assert second.wait(20) == 0, err.read_text()
            assert json.loads(out.read_text())["threads"] == 1
            assert first.poll() is None  # still running: not swept by a child gone astray
            first.kill_session()
            assert first.wait(10) == -signal.SIGKILL
        finally:
            launcher.close()

    def test_the_moot_at_fork_handlers_are_all_the_standard_librarys(self):
        """MOOT_AT_FORK names every module of this Python's standard library that registers an at-fork handler:
        one added by a new Python must be judged before the zygote's fork skips it."""
        import sysconfig

        from chaos.zygote import MOOT_AT_FORK

        lib = Path(sysconfig.get_paths()["stdlib"])
        found = set()
        for path in lib.rglob("*.py"):
            rel = path.relative_to(lib)
            if rel.parts[0] in ("test", "idlelib", "site-packages", "lib2to3") or "tests" in rel.parts:
                continue
            if "register_at_fork(" in path.read_text(errors="replace"):
                parts = rel.with_suffix("").parts
                found.add(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
        assert found == MOOT_AT_FORK

    def test_a_signal_sent_at_once_waits_for_the_child_to_be_ready(self, zygote, tmp_path):
        """A SIGINT sent as soon as the launch returns is not lost to the zygote's dispositions (it ignores SIGINT):
        it waits, blocked, until the child's are a fresh interpreter's, and ends it by SIGINT. Under exec it ends
        the process too, by SIGINT or, when it lands while the interpreter still starts (importing ``site``), with
        exit 1 (seen under load: a fresh interpreter has no KeyboardInterrupt handling yet)."""
        for each, ended in ((zygote, {-signal.SIGINT}), (SubprocessLauncher(), {-signal.SIGINT, 1})):
            codes, still = [], []
            for _ in range(5):
                proc, _, err = launch(each, tmp_path, "wait", "20")
                proc.send_signal(signal.SIGINT)
                codes.append(proc.wait(20))
                if codes[-1] is None:  # what a future failure needs to be understood: the child's signal state
                    still.append(_signal_state(proc.pid))
                    proc.kill_session(5)
                proc.close()
            assert set(codes) <= ended, (type(each).__name__, codes, still)

    def test_the_bundled_agents_zygote_forks_with_libc_and_runs_the_ids_handler(self):
        """The bundled agent's preload registers one at-fork handler of its own (agent.session.ids reseeds its
        generator): the zygote keeps it and forks with libc."""
        launcher = ZygoteLauncher("agent", ("agent.warm",))
        try:
            assert launcher.fallback is None and launcher.fork == "libc, 1 handler(s)"
        finally:
            launcher.close()

    def test_two_children_do_not_share_random_state(self, zygote, tmp_path):
        """Each child reseeds random: two launches draw different numbers."""
        draws = []
        for _ in range(2):
            proc, out, _ = launch(zygote, tmp_path, "report")
            assert proc.wait(20) == 0
            draws.append(json.loads(out.read_text())["random"])
        assert draws[0] != draws[1]


class TestStatuses:
    @pytest.mark.parametrize("args, expected", [
        (("exit", "3"), 3), (("exit", "0"), 0), (("raise",), 1), (("interrupt",), -signal.SIGINT),
    ])
    def test_exit_statuses_are_relayed_as_subprocess_reports_them(self, zygote, tmp_path, args, expected):
        """An exit code, an uncaught exception and an uncaught KeyboardInterrupt come back as exec would give."""
        proc, _, err = launch(zygote, tmp_path, *args)
        assert proc.wait(20) == expected, err.read_text()
        if args == ("raise",):
            assert "RuntimeError: boom" in err.read_text()

    def test_a_launch_ends_when_the_zygote_reaped_it_not_when_the_harness_looked(self, zygote, tmp_path):
        """``ended`` is the zygote's reaping time (its word, as the status): before the harness asked, after the
        launch was created."""
        proc, _, err = launch(zygote, tmp_path, "exit", "0")
        assert until(lambda: zygote.status(proc.launch, 0.05) is not None)  # reaped and reported
        looked = time.monotonic()
        time.sleep(0.05)  # the harness looks late
        assert proc.wait(20) == 0, err.read_text()
        assert proc.ended is not None and proc.created < proc.ended < looked

    def test_a_reused_pid_never_inherits_an_old_launchs_status(self, zygote, tmp_path):
        """Statuses are keyed by launch, not pid: once a pid is reaped and reused (pid_max wraps in a nightly), the
        new process is not taken for the old one that exited."""
        from chaos.zygote import ZygoteProcess

        old, _, _ = launch(zygote, tmp_path, "exit", "9")
        assert old.wait(20) == 9
        # A later launch given the same pid (what the kernel does after a wrap) has its own launch id.
        reused = ZygoteProcess(zygote, old.pid, launch=old.launch + 1000)
        assert reused.poll() is None  # keyed by pid, this said 9 (its zygote never reported such a launch)

    def test_a_killed_child_reports_the_signal_and_its_session_is_swept(self, zygote, tmp_path):
        """kill_session SIGKILLs the child and its grandchild; the zygote reports -9."""
        proc, out, _ = launch(zygote, tmp_path, "sleep", "30")
        deadline = time.monotonic() + 20
        while not out.read_text() and time.monotonic() < deadline:
            time.sleep(0.01)
        grandchildren = psutil.Process(proc.pid).children()
        report = proc.kill_session()
        assert proc.wait(5) == -signal.SIGKILL and not report.survivors
        assert grandchildren and not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE
                                         for p in grandchildren)

    def test_poll_is_none_while_running_and_exit_fd_wakes_at_exit(self, zygote, tmp_path):
        """poll() answers None for a live child; its exit fd becomes readable when it ends."""
        import select

        proc, _, _ = launch(zygote, tmp_path, "sleep", "0.3")
        assert proc.poll() is None
        ready, _, _ = select.select([proc.exit_fd()], [], [], 10)
        assert ready and proc.poll() == 0


def _spares(launcher, launched=()) -> list[int]:
    """The zygote's children that are no launch: its spare (one, once it has forked it)."""
    return [c.pid for c in psutil.Process(launcher._proc.pid).children() if c.pid not in launched]


class TestSpare:
    def test_a_launch_is_handed_to_the_spare_forked_before_it(self, zygote, tmp_path):
        """The zygote keeps one child forked ahead and prepared (session, signals, descriptors, random state): a
        launch is handed to it, and the next spare is forked after the answer."""
        assert until(lambda: len(_spares(zygote)) == 1)
        spare = _spares(zygote)[0]
        proc, out, err = launch(zygote, tmp_path, "report", FRESH_VARS="A", A="handed")
        assert proc.pid == spare
        assert proc.wait(20) == 0, err.read_text()
        data = json.loads(out.read_text())
        assert data["env"] == {"A": "handed"} and data["argv"] == ["report"] and data["session_leader"]
        assert until(lambda: len(_spares(zygote, (proc.pid,))) == 1 and spare not in _spares(zygote))

    def test_a_dead_spare_is_replaced_by_a_fork_on_the_launchs_path(self, zygote, tmp_path):
        """A spare killed from outside costs its head start only: the launch forks on its own path."""
        assert until(lambda: len(_spares(zygote)) == 1)
        spare = _spares(zygote)[0]
        os.kill(spare, signal.SIGKILL)
        assert until(lambda: spare not in _spares(zygote))  # reaped by the zygote
        proc, out, err = launch(zygote, tmp_path, "report", FRESH_VARS="A", A="forked")
        assert proc.pid != spare and proc.wait(20) == 0, err.read_text()
        assert json.loads(out.read_text())["env"] == {"A": "forked"}

    def test_a_request_too_big_for_a_hand_off_forks_and_sees_all_of_it(self, zygote, tmp_path):
        """An environment larger than one hand-off message (under 512 KiB) cannot be given to the spare: that launch
        forks, whole, and the spare waits for the next."""
        big = "x" * 600_000
        assert until(lambda: len(_spares(zygote)) == 1)
        spare = _spares(zygote)[0]
        proc, out, err = launch(zygote, tmp_path, "report", FRESH_VARS="BIG", BIG=big)
        assert proc.wait(20) == 0, err.read_text()
        assert proc.pid != spare and json.loads(out.read_text())["env"] == {"BIG": big}
        second, out, err = launch(zygote, tmp_path, "report")
        assert second.pid == spare and second.wait(20) == 0, err.read_text()


class TestSpareHygiene:
    def test_nothing_the_zygote_left_in_its_buffers_reaches_a_launch(self, tmp_path):
        """A preload's unflushed print (stdout to a file: block-buffered) never lands in a launch's output files,
        neither in the first spare's launch nor in a later one."""
        old = os.environ.pop("PYTHONUNBUFFERED", None)  # buffered, as a zygote runs outside this test machine
        try:
            launcher = ZygoteLauncher(MODULE, ("tests.agents.banner_preload",), env={"PYTHONPATH": str(REPO)})
        finally:
            if old is not None:
                os.environ["PYTHONUNBUFFERED"] = old
        try:
            assert launcher.fallback is None, launcher.fallback
            for i in range(2):
                proc, out, err = launch(launcher, tmp_path, "exit", "0")
                assert proc.wait(20) == 0
                assert (out.read_text(), err.read_text()) == ("", ""), i
        finally:
            launcher.close()

    def test_a_signal_sent_to_a_waiting_spare_never_reaches_a_launch(self, zygote, tmp_path):
        """The spare waits with the zygote's signals blocked; one sent to it from outside meanwhile would hit its
        launch at start. Such a spare is discarded: the launch forks and starts with nothing pending."""
        assert until(lambda: len(_spares(zygote)) == 1)
        spare = _spares(zygote)[0]
        os.kill(spare, signal.SIGTERM)
        proc, _, err = launch(zygote, tmp_path, "wait", "0.2")
        assert proc.pid != spare and proc.wait(20) == 0, err.read_text()


def test_a_hand_off_cut_short_or_without_its_files_is_an_error_not_a_launch(tmp_path):
    """What a spare reads (chaos.zygote._spare_wait): a message with its two files is a launch; end-of-file is none;
    a message without its files, or cut short, is an error (and the launch's stderr says so)."""
    import socket

    from chaos.zygote import ZygoteError, _spare_wait

    def pair():
        return socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)

    out, err = (os.open(tmp_path / name, os.O_WRONLY | os.O_CREAT, 0o644) for name in ("out", "err"))
    sender, spare = pair()
    socket.send_fds(sender, [b'{"module": "m"}'], [out, err])
    request, got_out, got_err = _spare_wait(spare)
    assert request == {"module": "m"} and os.path.samestat(os.fstat(got_out), os.fstat(out))
    sender, spare = pair()
    sender.close()
    assert _spare_wait(spare) is None
    sender, spare = pair()
    sender.send(b'{"module": "m"}')
    with pytest.raises(ZygoteError):
        _spare_wait(spare)
    sender, spare = pair()
    sender.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
    try:
        socket.send_fds(sender, [b"x" * (1536 << 10)], [out, err])
    except OSError as exc:  # this host's net.core.wmem_max keeps a message that big from being sent at all
        pytest.skip(f"cannot send a 1.5 MiB message here: {exc}")
    with pytest.raises(ZygoteError):
        _spare_wait(spare)
    assert "cut short" in (tmp_path / "err").read_text()


class TestLifetime:
    def test_children_die_with_the_zygote(self, zygote, tmp_path):
        """SIGKILL of the zygote itself kills its children (their parent-death signal)."""
        proc, out, _ = launch(zygote, tmp_path, "sleep", "30")
        while not out.read_text():
            time.sleep(0.01)
        zygote._proc.kill()
        assert psutil.wait_procs([psutil.Process(proc.pid)], timeout=5)[1] == []

    def test_nothing_outlives_the_process_that_owns_the_zygote(self, tmp_path):
        """SIGKILL of the owning process: the zygote sweeps its children's sessions, grandchildren included."""
        script = tmp_path / "owner.py"
        script.write_text(textwrap.dedent(f"""
            import os, sys, time
            sys.path.insert(0, {str(REPO)!r})
            from chaos.zygote import ZygoteLauncher
            z = ZygoteLauncher({MODULE!r}, ({MODULE!r},))
            out = {str(tmp_path / "child.out")!r}
            p = z.launch([sys.executable, "-m", {MODULE!r}, "sleep", "60"],
                         {{"PATH": os.environ["PATH"], "PYTHONPATH": {str(REPO)!r}}}, {str(tmp_path)!r}, out, out + ".err")
            print(z._proc.pid, p.pid, flush=True)
            time.sleep(60)
        """))
        owner = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
        try:
            zygote_pid, child_pid = map(int, owner.stdout.readline().split())
            while not (tmp_path / "child.out").read_text():
                time.sleep(0.01)
            tree = [psutil.Process(zygote_pid), *psutil.Process(zygote_pid).children(recursive=True)]
            assert len(tree) >= 3  # zygote, child, grandchild sleep
            owner.kill()
            owner.wait()
            gone, alive = psutil.wait_procs(tree, timeout=2)
            assert not [p for p in alive if p.status() != psutil.STATUS_ZOMBIE]
        finally:
            owner.kill()

    def test_a_preload_that_leaves_a_thread_falls_back_to_exec(self, tmp_path):
        """A preload that starts a thread makes the zygote refuse; launches then go by exec, and say why."""
        (tmp_path / "threaded_preload.py").write_text(
            "import threading, time\nthreading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n")
        old = os.environ.get("PYTHONPATH")
        os.environ["PYTHONPATH"] = f"{tmp_path}:{REPO}"
        try:
            launcher = ZygoteLauncher(MODULE, ("threaded_preload",))
        finally:
            if old is None:
                del os.environ["PYTHONPATH"]
            else:
                os.environ["PYTHONPATH"] = old
        assert launcher.fallback and "threads running" in launcher.fallback
        proc, out, _ = launch(launcher, tmp_path, "report")
        assert proc.wait(20) == 0 and json.loads(out.read_text())["pdeathsig"] == 0  # exec'd, not forked


class TestZygoteDeath:
    def test_a_dead_zygote_is_reported_and_its_children_are_seen_killed(self, zygote, tmp_path):
        """After the zygote dies its running child reads as killed (no false hang), and later launches go by exec."""
        proc, out, _ = launch(zygote, tmp_path, "sleep", "30")
        while not out.read_text():
            time.sleep(0.01)
        zygote._proc.kill()
        assert proc.wait(10) == -signal.SIGKILL
        later, out2, _ = launch(zygote, tmp_path, "report")
        assert later.wait(20) == 0 and json.loads(out2.read_text())["pdeathsig"] == 0  # exec'd
        assert zygote.died and "died" in zygote.fallback

    def test_a_missing_cwd_is_a_launch_error_as_with_exec(self, zygote, tmp_path):
        """A cwd that does not exist raises at launch (as Popen does), instead of a child that exits 1."""
        with pytest.raises(OSError):
            zygote.launch([sys.executable, "-m", MODULE, "report"], env(), tmp_path / "missing", tmp_path / "o",
                          tmp_path / "e")

    @pytest.mark.parametrize("missing", ["no_such_module_zz", "tests.agents.no_such_module", "json"])
    def test_a_module_python_m_cannot_run_fails_with_its_words(self, tmp_path, missing):
        """Absent (top level or in a package the zygote never imported) or a package without __main__: exit 1 and
        python -m's own line, under both launchers."""
        launcher = ZygoteLauncher(missing, ("json",))
        try:
            seen = []
            for each in (launcher, SubprocessLauncher()):
                out, err = tmp_path / f"{type(each).__name__}.out", tmp_path / f"{type(each).__name__}.err"
                proc = each.launch([sys.executable, "-m", missing], env(), tmp_path, out, err)
                seen.append((proc.wait(20), err.read_text()))
                proc.close()
            assert seen[0] == seen[1] and seen[0][0] == 1 and seen[0][1].startswith(f"{sys.executable}: ")
        finally:
            launcher.close()


def test_a_worker_whose_pool_changed_size_gets_a_zygote_that_copies_ahead_as_the_new_size_says():
    """A campaign worker reused by a campaign of another size (chaos mutants) does not keep a zygote whose copying
    ahead was decided for the old one: the launcher is chosen by it too, and the first one serves again later."""
    from chaos import case
    from chaos.target import Target

    target = Target()
    try:
        case.set_loops(1)
        one, one_copies = case.shared_launcher(target), case.copies_ahead()
        case.set_loops(10_000)  # more loops than any machine's cores: no copying ahead
        many, many_copies = case.shared_launcher(target), case.copies_ahead()
        assert not many_copies and many.copy_ahead is False and one.copy_ahead is one_copies
        assert (one is many) == (one_copies == many_copies)  # distinct zygotes wherever one copies ahead
        case.set_loops(1)
        assert case.shared_launcher(target) is one
    finally:
        case.set_loops(1)


def _signal_state(pid: int) -> str:
    """The State and signal lines of /proc/PID/status (pending, blocked, ignored, caught), or why there are none."""
    try:
        with open(f"/proc/{pid}/status") as f:
            return "; ".join(line.strip() for line in f if line.startswith(("State", "SigPnd", "ShdPnd", "SigBlk",
                                                                             "SigIgn", "SigCgt")))
    except OSError as exc:
        return f"pid {pid}: {exc.strerror}"
