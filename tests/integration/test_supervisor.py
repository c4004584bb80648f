"""Integration tests of chaos.supervisor: real subprocesses, a real Unix socket, real SIGKILL/SIGINT, real files.

The agents are the test doubles in tests/agents/ (the supervisor is under test, not the agent).
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import pytest

from chaos import records
from chaos.faults import PHASES
from chaos.process import session_members
from chaos.records import CaseRun
from chaos.supervisor import SESSION, AgentCommand, Limits, Step, Supervisor
from tests.agents import CRASHING, FAKE, HUNG, RUDE, argv
from tests.integration import gone

PLAN = "user+runStarted,stepAttempt,assistant+usage,toolStarted,toolResult+usage,operationFinished"
PLAN_TXS = [tx.split("+") for tx in PLAN.split(",")]
LIMITS = Limits(case_seconds=30, silence_seconds=10)


def fake(plan: str = PLAN, run_extra=(), resume_extra=(), **kw) -> AgentCommand:
    """The well-behaved fake agent as a one-step command."""
    return AgentCommand.single(
        argv(FAKE, "run", "--session-dir", "s", "--plan", plan, *run_extra), argv(FAKE, "resume", SESSION, *resume_extra),
        **kw,
    )


def supervise(tmp_path: Path, command: AgentCommand, schedule: str = "", limits: Limits = LIMITS) -> CaseRun:
    run = Supervisor(command, tmp_path / "case", limits=limits).run(schedule)
    assert_nothing_survives(run)
    return run


def assert_nothing_survives(run: CaseRun) -> None:
    """No process of any launch's session is alive after the case."""
    for launch in run.launches:
        assert launch.returncode is not None, f"launch {launch.index} was never reaped"
        assert session_members(launch.pid) == [], f"processes of launch {launch.index} survived"


def committed(path: str | Path) -> list[dict]:
    """The transaction lines of a fake session file (header skipped, complete lines only)."""
    return [json.loads(x) for x in Path(path).read_bytes().split(b"\n")[1:-1]]


def facts_of(path: str | Path) -> list[list[str]]:
    return [line["facts"] for line in committed(path)]


def barrier_of(run: CaseRun, fault_index: int = 0):
    return run.barriers[run.faults[fault_index].barrier]


class TestKill:
    def test_kill_before_write_leaves_the_announced_state(self, tmp_path):
        """A kill at before-write leaves the file exactly at the announced offset, then resume finishes the plan."""
        run = supervise(tmp_path, fake(), "toolStarted@before-write#1")
        event = barrier_of(run)
        kill = run.faults[0]
        assert (run.verdict, run.unreached) == ("exit:0", [])
        assert (event.phase, event.facts, event.tx) == ("before-write", ["toolStarted"], 4)
        assert kill.signal == "SIGKILL" and kill.snapshot_size == event.offset == kill.size_at_kill
        assert facts_of(kill.snapshot) == PLAN_TXS[:3]
        assert [(l.role, l.returncode, l.killed_by) for l in run.launches] == [
            ("step", -signal.SIGKILL, "fault"), ("resume", 0, None)]
        assert facts_of(run.session) == PLAN_TXS

    def test_kill_after_write_keeps_the_unsynced_bytes(self, tmp_path):
        """Under a plain SIGKILL the written-but-unsynced transaction stays in the file (page cache)."""
        run = supervise(tmp_path, fake(), "toolStarted@after-write#1")
        event, kill = barrier_of(run), run.faults[0]
        assert event.offset > event.synced_offset
        assert kill.snapshot_size == event.offset and kill.cut_to is None
        assert facts_of(kill.snapshot) == PLAN_TXS[:4]
        assert facts_of(run.session) == PLAN_TXS

    def test_acknowledged_bytes_are_recorded(self, tmp_path):
        """Every after-sync barrier is recorded with the transaction's exact bytes, which the final file still has."""
        run = supervise(tmp_path, fake(), "toolStarted@after-sync#1")
        final = Path(run.session).read_bytes()
        syncs = [b for b in run.barriers if b.phase == "after-sync"]
        assert [a.barrier for a in run.acknowledged] == [b.index for b in syncs]
        assert [a.tx for a in run.acknowledged] == [1, 2, 3, 4, 5, 6]  # 1-4 by the killed process, 5-6 by resume
        assert [a.launch for a in run.acknowledged] == [0, 0, 0, 0, 1, 1]
        for ack in run.acknowledged:
            assert ack.data.endswith(b"\n") and ack.data == final[ack.start:ack.end]
            assert ack.file_size == ack.end == ack.synced_offset
        kill_ack = next(a for a in run.acknowledged if a.barrier == run.faults[0].barrier)
        assert json.loads(kill_ack.data)["facts"] == ["toolStarted"]

    def test_transactions_are_counted_across_restarts(self, tmp_path):
        """A second fault is numbered in the same sequence and lands during the recovery after the first kill."""
        run = supervise(tmp_path, fake(), "tx:2@after-sync+tx:5@before-write")
        assert [barrier_of(run, i).tx for i in range(2)] == [2, 5]
        assert [run.faults[i].launch for i in range(2)] == [0, 1]
        assert [l.role for l in run.launches] == ["step", "resume", "resume"]
        assert run.verdict == "exit:0" and facts_of(run.session) == PLAN_TXS

    def test_unreached_kill_point_is_reported(self, tmp_path):
        """A fault the agent never reaches gives kill-point-not-reached and names it."""
        run = supervise(tmp_path, fake(), "toolStarted@after-sync#2")
        assert run.verdict == records.NOT_REACHED
        assert run.unreached == ["toolStarted@after-sync#2"] and run.faults == []
        assert run.launches[-1].returncode == 0

    def test_baseline_runs_once(self, tmp_path):
        """With an empty schedule the agent runs once, every barrier answered continue."""
        run = supervise(tmp_path, fake())
        assert run.verdict == "exit:0" and len(run.launches) == 1
        assert len(run.barriers) == 3 * len(PLAN_TXS)
        assert all(b.answer == {"action": "continue"} for b in run.barriers)


class TestFaultActions:
    def test_int_delivers_sigint_and_continues(self, tmp_path):
        """int sends SIGINT at the barrier and answers continue; the agent aborts by itself and is not restarted."""
        run = supervise(tmp_path, fake(), "int:stepAttempt@after-sync#1")
        assert run.faults[0].signal == "SIGINT" and barrier_of(run).answer == {"action": "continue"}
        assert "SIGINT received" in Path(run.launches[0].stderr).read_text()
        assert [(l.role, l.returncode) for l in run.launches] == [("step", 130)]
        assert run.verdict == "exit:130"
        assert facts_of(run.session)[-1] == ["abortRequested", "operationFinished"]

    def test_ioerror_at_before_write_reaches_the_agent(self, tmp_path):
        """ioerror answers fail with the errno; the agent sees it, and a resume then recovers."""
        run = supervise(tmp_path, fake(), "ioerror(ENOSPC):toolStarted@before-write#1")
        assert barrier_of(run).answer == {"action": "fail", "errno": "ENOSPC"}
        assert "write failed: ENOSPC" in Path(run.launches[0].stderr).read_text()
        assert [(l.role, l.returncode) for l in run.launches] == [("step", 4), ("resume", 0)]
        assert run.verdict == "exit:0" and facts_of(run.session) == PLAN_TXS

    def test_ioerror_at_after_write_reaches_the_agent(self, tmp_path):
        """ioerror(EIO) at after-write is answered as an fsync failure."""
        run = supervise(tmp_path, fake(), "ioerror(EIO):assistant@after-write#1")
        assert "fsync failed: EIO" in Path(run.launches[0].stderr).read_text()
        assert run.faults[0].errno == "EIO" and run.verdict == "exit:0"

    def test_torn_keeps_b_bytes_of_the_unsynced_range(self, tmp_path):
        """torn(B) kills at after-write and cuts the file to syncedOffset + B before the restart."""
        run = supervise(tmp_path, fake(), "torn(5):toolStarted@after-write#1")
        event, kill = barrier_of(run), run.faults[0]
        assert kill.size_at_kill == event.offset
        assert kill.cut_to == event.synced_offset + 5 == kill.snapshot_size
        final = Path(run.session).read_bytes()
        # the torn line is the start of the transaction the resume rewrote in full
        assert Path(kill.snapshot).read_bytes() == final[: kill.cut_to]
        assert facts_of(run.session) == PLAN_TXS and run.verdict == "exit:0"

    def test_torn_inside_a_multibyte_character(self, tmp_path):
        """A torn cut may land inside a UTF-8 character; the file then ends in an incomplete sequence."""
        probe = supervise(tmp_path / "probe", fake())
        line = Path(probe.session).read_bytes().split(b"\n")[4] + b"\n"  # the toolStarted line
        inside = line.index("é".encode()) + 1
        run = supervise(tmp_path, fake(), f"torn({inside}):toolStarted@after-write#1")
        snapshot = Path(run.faults[0].snapshot).read_bytes()
        assert snapshot.endswith(b"\xc3") and run.verdict == "exit:0"

    def test_torn_longer_than_the_write_is_not_applicable(self, tmp_path):
        """torn(B) with B at least the unsynced length cannot tear anything and says so."""
        run = supervise(tmp_path, fake(), "torn(100000):toolStarted@after-write#1")
        assert run.verdict == records.NOT_APPLICABLE and "nothing to cut" in run.detail

    def test_powerloss_truncates_to_the_synced_offset(self, tmp_path):
        """powerloss kills at after-write and drops everything after the last syncedOffset."""
        run = supervise(tmp_path, fake(), "powerloss:toolResult@after-write#1")
        event, kill = barrier_of(run), run.faults[0]
        assert kill.cut_to == event.synced_offset == kill.snapshot_size < event.offset
        assert facts_of(kill.snapshot) == PLAN_TXS[:4]
        assert facts_of(run.session) == PLAN_TXS

    @pytest.mark.parametrize("fault", ["kill:toolStarted@after-sync#1", "powerloss:toolStarted@after-write#1"])
    def test_the_snapshot_is_the_log_the_restart_finds_even_with_a_scribbler(self, tmp_path, fault):
        """The kill's copy of the log (and a powerloss cut) is made once the whole session is gone: a process of the
        agent's session that keeps appending outside any barrier cannot make it differ from what the restart
        reads (done while the killed leader was being torn down, it differed in 9-17 of 30 runs)."""
        for i in range(6):
            saw = tmp_path / f"saw-{i}"
            found = f"import sys; open({str(saw)!r}, 'wb').write(open(sys.argv[1], 'rb').read())"
            command = AgentCommand.single(argv(FAKE, "run", "--session-dir", "s", "--plan", PLAN, "--scribbler"),
                                          (sys.executable, "-c", found, SESSION))
            run = supervise(tmp_path / f"case-{i}", command, fault)
            kill = run.faults[0]
            assert saw.read_bytes() == Path(kill.snapshot).read_bytes(), (i, kill.snapshot_size, kill.cut_to)
            if kill.cut_to is not None:
                assert kill.snapshot_size == kill.cut_to

    def test_dresume_starts_two_resumes_at_once(self, tmp_path):
        """dresume kills, then launches two resumes together; one writes, the other is refused (exit 6)."""
        run = supervise(tmp_path, fake(), "dresume:toolStarted@after-sync#1")
        pair = run.launches[1:]
        assert [l.role for l in pair] == ["dresume", "dresume"] and pair[0].generation == pair[1].generation
        assert sorted(l.returncode for l in pair) == [0, 6]
        refused = next(l for l in pair if l.returncode == 6)
        assert "locked" in Path(refused.stderr).read_text()
        assert not [b for b in run.barriers if b.launch == refused.index]
        assert run.verdict == "exit:0" and facts_of(run.session) == PLAN_TXS


class TestSteps:
    def test_later_steps_use_the_announced_session(self, tmp_path):
        """A second step's argv gets the session path from the first hello."""
        second = "user+runStarted,operationFinished"
        cmd = AgentCommand(
            steps=(Step(argv(FAKE, "run", "--session-dir", "s", "--plan", PLAN)),
                   Step(argv(FAKE, "run", "--session", SESSION, "--plan", second))),
            resume=argv(FAKE, "resume", SESSION),
        )
        run = supervise(tmp_path, cmd, "toolResult@after-sync#1")
        assert [l.role for l in run.launches] == ["step", "resume", "step"]
        assert run.launches[2].argv[-3] == run.session
        assert facts_of(run.session) == PLAN_TXS + [["user", "runStarted"], ["operationFinished"]]

    def test_a_step_whose_work_was_lost_is_issued_again(self, tmp_path):
        """A kill before the step's first write leaves nothing to recover, so the step is re-issued after resume."""
        second = "user+runStarted,operationFinished"
        again = argv(FAKE, "run", "--session", SESSION, "--plan", second)
        cmd = AgentCommand(
            steps=(Step(argv(FAKE, "run", "--session-dir", "s", "--plan", PLAN)), Step(again, again=again)),
            resume=argv(FAKE, "resume", SESSION),
        )
        run = supervise(tmp_path, cmd, f"tx:{len(PLAN_TXS) + 1}@before-write")
        assert [l.role for l in run.launches] == ["step", "step", "resume", "again"]
        assert facts_of(run.session) == PLAN_TXS + [["user", "runStarted"], ["operationFinished"]]

    def test_step_with_durable_work_is_not_issued_again(self, tmp_path):
        """A kill after the step's first write is recovered by resume alone."""
        again = argv(FAKE, "run", "--session", SESSION, "--plan", "user")
        cmd = AgentCommand(steps=(Step(argv(FAKE, "run", "--session-dir", "s", "--plan", PLAN), again=again),),
                           resume=argv(FAKE, "resume", SESSION))
        run = supervise(tmp_path, cmd, "tx:1@after-write")
        assert [l.role for l in run.launches] == ["step", "resume"]

    def test_blocked_exit_runs_abort(self, tmp_path):
        """A process that ends blocked (exit 3) is followed by the abort command when one is configured."""
        cmd = fake(resume_extra=("--exit-code", "3"), abort=argv(FAKE, "abort", SESSION))
        run = supervise(tmp_path, cmd, "toolStarted@after-sync#1")
        assert [(l.role, l.returncode) for l in run.launches] == [("step", -9), ("resume", 3), ("abort", 0)]
        assert run.verdict == "exit:0"


class TestWatchdog:
    def test_hung_agent_is_a_hang_and_leaves_no_process(self, tmp_path):
        """An agent silent after a barrier is reported hang; it and its grandchild (own process group) are killed."""
        pidfile = tmp_path / "grandchild.pid"
        cmd = AgentCommand.single(argv(HUNG, "--barrier", "--pidfile", str(pidfile)), argv(HUNG, "--pidfile", "x"))
        run = supervise(tmp_path, cmd, "tx:3@after-sync", Limits(case_seconds=30, silence_seconds=0.5))
        assert run.verdict == records.HANG and "silent for 0.5s after barrier tx:1@before-write" in run.detail
        assert run.launches[0].killed_by == "watchdog"
        grandchild = int(pidfile.read_text())
        assert gone(grandchild)
        assert run.unreached == ["tx:3@after-sync"]

    def test_grandchild_that_left_the_session_is_killed_too(self, tmp_path):
        """A child that called setsid is still killed: the process tree is taken before the leader dies."""
        pidfile = tmp_path / "grandchild.pid"
        cmd = AgentCommand.single(argv(HUNG, "--escape", "--pidfile", str(pidfile)), ())
        run = supervise(tmp_path, cmd, "", Limits(case_seconds=30, silence_seconds=0.5))
        grandchild = int(pidfile.read_text())
        assert run.verdict == records.HANG
        assert gone(grandchild)

    def test_agent_that_never_connects_is_a_hang(self, tmp_path):
        """Silence counts from the launch, so an agent that never says hello is a hang too."""
        cmd = AgentCommand.single(argv(HUNG, "--silent", "--pidfile", str(tmp_path / "p")), ())
        run = supervise(tmp_path, cmd, "", Limits(case_seconds=30, silence_seconds=0.5))
        assert run.verdict == records.HANG and "since its launch" in run.detail

    def test_case_wall_clock_limit(self, tmp_path):
        """The per-case wall-clock limit ends a case even when the silence limit is longer."""
        cmd = AgentCommand.single(argv(HUNG, "--pidfile", str(tmp_path / "p")), ())
        run = supervise(tmp_path, cmd, "", Limits(case_seconds=0.5, silence_seconds=60))
        assert run.verdict == records.HANG and "wall-clock" in run.detail

    def test_crash_by_foreign_signal(self, tmp_path):
        """An agent killed by a signal the supervisor did not send is a crash, and is not restarted."""
        run = supervise(tmp_path, AgentCommand.single(argv(CRASHING, "--signal", "SIGSEGV"), argv(FAKE, "resume")))
        assert run.verdict == records.CRASH and "SIGSEGV" in run.detail
        assert len(run.launches) == 1 and run.launches[0].returncode == -signal.SIGSEGV

    def test_an_agent_dead_by_its_own_signal_before_the_kill_landed_is_a_crash(self, tmp_path):
        """An agent that sent the barrier a kill fires at and then died by its own SIGSEGV is a crash, not a kill.

        Pinned order: the launcher relays the exit late (as the zygote does) and the SIGKILL is sent only once the
        agent is dead, so the supervisor finds a barrier of a process that already ended."""
        from chaos.process import PopenProcess, SubprocessLauncher

        class DeadBeforeTheKill(PopenProcess):
            def __init__(self, proc):
                super().__init__(proc._popen, proc.created)
                self.signalled = False

            def exit_fd(self):
                return None  # polled: the exit is relayed only through poll()

            def poll(self):
                return super().poll() if self.signalled else None

            def send_signal(self, sig):
                self._popen.wait(10)  # the agent dies by itself right after its barrier: wait for that first
                self.signalled = True
                super().send_signal(sig)

        class Launcher(SubprocessLauncher):
            def launch(self, *args):
                return DeadBeforeTheKill(super().launch(*args))

        command = AgentCommand.single(argv(CRASHING, "--signal", "SIGSEGV", "--no-wait"), argv(FAKE, "resume"))
        run = Supervisor(command, tmp_path / "case", limits=LIMITS, launcher=Launcher()).run(
            "runStarted@before-write#1")
        assert_nothing_survives(run)
        assert run.verdict == records.CRASH and "SIGSEGV" in run.detail, (run.verdict, run.detail)
        assert run.faults == [] and run.launches[0].killed_by is None
        assert run.launches[0].returncode == -signal.SIGSEGV and len(run.launches) == 1
        # One that exited by itself (status 0) past the barrier it was to be killed at: the kill never happened,
        # so the case is not reached, never a pass.
        command = AgentCommand.single(argv(CRASHING, "--exit", "0", "--no-wait"), argv(FAKE, "resume"))
        run = Supervisor(command, tmp_path / "case2", limits=LIMITS, launcher=Launcher()).run(
            "runStarted@before-write#1")
        assert_nothing_survives(run)
        assert run.verdict == records.NOT_REACHED and run.unreached == ["runStarted@before-write#1"], run.verdict
        assert run.faults == [] and run.launches[0].returncode == 0

    def test_an_int_fault_at_an_agent_that_already_ended_is_not_sent(self, tmp_path):
        """An `int` fault whose barrier is read once its agent has exited by itself is withdrawn: not reached, not
        a pass, and no SIGINT recorded."""
        from chaos.process import PopenProcess, SubprocessLauncher

        class EndedFirst(PopenProcess):  # once past its barrier, the agent's exit comes before the supervisor looks
            def __init__(self, proc, stderr):
                super().__init__(proc._popen, proc.created)
                self.stderr = stderr

            def poll(self):
                if "past the hello" in Path(self.stderr).read_text():  # crashing.py --no-wait, before its barrier
                    self._popen.wait(10)
                return super().poll()

        class Launcher(SubprocessLauncher):
            def launch(self, argv, env, cwd, stdout, stderr):
                return EndedFirst(super().launch(argv, env, cwd, stdout, stderr), stderr)

        command = AgentCommand.single(argv(CRASHING, "--exit", "0", "--no-wait"), argv(FAKE, "resume"))
        run = Supervisor(command, tmp_path / "case", limits=LIMITS, launcher=Launcher()).run(
            "int:runStarted@before-write#1")
        assert_nothing_survives(run)
        assert run.verdict == records.NOT_REACHED and run.unreached == ["int:runStarted@before-write#1"], run.verdict
        assert run.faults == []

    def test_unexpected_exit_code(self, tmp_path):
        """An exit code outside the settled set ends the case as exit:<code>."""
        run = supervise(tmp_path, AgentCommand.single(argv(CRASHING, "--exit", "1"), argv(FAKE, "resume")),
                        "tx:9@after-sync")
        assert run.verdict == "exit:1" and len(run.launches) == 1

    def test_process_left_behind_is_a_straggler(self, tmp_path):
        """A process the agent leaves in its session after exiting is killed and reported."""
        run = supervise(tmp_path, fake(run_extra=("--leave-behind",)))
        assert run.verdict == "exit:0"
        assert [(s.name, s.launch, s.found) for s in run.stragglers] == [("sleep", 0, "after-exit")]
        assert gone(run.stragglers[0].pid)


class TestProtocol:
    @pytest.mark.parametrize(
        ("mode", "message"),
        [
            ("garbage", "malformed line"),
            ("deep", "malformed line"),
            ("version", "protocol version 2"),
            ("pid", "is not the connecting process"),
            ("order", "without a before-write"),
            ("seq", "does not match 2 facts"),
            ("nohello", "first message must be hello"),
            ("toolong", "line longer than"),
            ("oneway", "hello oneway must be true or false"),
            ("nul", "hello session must be a non-empty path"),
        ],
    )
    def test_protocol_violation_is_a_verdict(self, tmp_path, mode, message):
        """A protocol violation ends the case as protocol-error naming the problem, with no process left."""
        run = supervise(tmp_path, AgentCommand.single(argv(RUDE, mode), argv(RUDE, mode)), "tx:1@after-sync")
        assert run.verdict == records.PROTOCOL_ERROR and message in run.detail
        assert run.launches[0].killed_by == "watchdog"


class TestOneWay:
    """An agent that offers it (hello ``oneway``) waits only at after-sync and at the phases of the faults to fire."""

    @staticmethod
    def oneway() -> AgentCommand:
        return fake(run_extra=("--oneway",), resume_extra=("--oneway",))

    def test_it_waits_at_after_sync_and_only_reports_the_rest(self, tmp_path):
        """A kill at an after-sync: before-write and after-write are recorded unanswered, without a file size; every
        after-sync waited, its bytes acknowledged; the kill and the recovery are those of an agent that waits."""
        run = supervise(tmp_path, self.oneway(), "toolStarted@after-sync#1")
        assert run.verdict == "exit:0" and facts_of(run.session) == PLAN_TXS
        assert {(b.phase, b.waited) for b in run.barriers} == {("before-write", False), ("after-write", False),
                                                               ("after-sync", True)}
        assert all(b.answer is None and b.file_size is None for b in run.barriers if not b.waited)
        assert [a.tx for a in run.acknowledged] == [1, 2, 3, 4, 5, 6]
        assert barrier_of(run).phase == "after-sync" and facts_of(run.faults[0].snapshot) == PLAN_TXS[:4]

    def test_a_kill_before_write_still_lands_before_the_write(self, tmp_path):
        """A fault at before-write makes the agent wait at every before-write: killed there, nothing is written."""
        run = supervise(tmp_path, self.oneway(), "toolStarted@before-write#1")
        event, kill = barrier_of(run), run.faults[0]
        assert all(b.waited for b in run.barriers if b.phase == "before-write" and b.launch == 0)
        assert kill.snapshot_size == event.offset == kill.size_at_kill
        assert facts_of(kill.snapshot) == PLAN_TXS[:3] and facts_of(run.session) == PLAN_TXS

    def test_resumes_at_once_wait_everywhere(self, tmp_path):
        """The resumes of a dresume generation are held in lockstep (their hellos too), so they are told nothing and
        wait at every barrier; the first launch, alone, still waits only where its fault can fire."""
        run = supervise(tmp_path, self.oneway(), "dresume:toolStarted@after-sync#1")
        pair = {l.index for l in run.launches[1:]}
        assert len(pair) == 2 and run.verdict == "exit:0" and facts_of(run.session) == PLAN_TXS
        assert all(b.waited for b in run.barriers if b.launch in pair)
        assert any(b.launch in pair for b in run.barriers)
        assert not all(b.waited for b in run.barriers if b.launch == 0)

    def test_an_agent_that_does_not_offer_it_waits_everywhere(self, tmp_path):
        """Without ``oneway`` in its hello, every barrier is answered and measured, as protocol 1 always was."""
        run = supervise(tmp_path, fake(), "toolStarted@after-sync#1")
        assert all(b.waited and b.file_size is not None for b in run.barriers)


def test_wait_phases_are_after_sync_and_those_of_the_faults_to_fire():
    """wait_phases: after-sync always, plus the phase of every pending fault."""
    from chaos.faults import parse_schedule
    from chaos.supervisor import wait_phases

    assert wait_phases(()) == {"after-sync"}
    assert wait_phases(parse_schedule("toolStarted@before-write#1+int:tx:3@after-write")) == set(PHASES)
    assert wait_phases(parse_schedule("kill:tx:2@after-sync")) == {"after-sync"}


class TestSocketAndRecords:
    def test_deep_case_directory_gets_a_short_socket(self, tmp_path):
        """A case directory too deep for AF_UNIX's 108-byte sun_path still works, via a short temp socket."""
        deep = tmp_path / ("d" * 60) / ("e" * 60)
        run = Supervisor(fake(), deep, limits=LIMITS).run("tx:2@after-sync")
        assert run.verdict == "exit:0" and len(os.fsencode(run.socket)) < 108
        assert not str(run.socket).startswith(str(deep)) and not Path(run.socket).parent.exists()

    def test_case_run_round_trips_through_json(self, tmp_path):
        """A CaseRun with kills and acknowledged bytes survives to_json/from_json unchanged."""
        run = supervise(tmp_path, fake(), "torn(3):assistant@after-write#1+tx:6@after-sync")
        text = json.dumps(run.to_json())
        back = CaseRun.from_json(json.loads(text))
        assert back == run and len(back.kills) == 2 and back.acknowledged[0].data == run.acknowledged[0].data


def test_a_launch_ends_when_its_reaper_says_else_when_the_supervisor_saw_it():
    """life_end: the zygote's reaping time relative to the case, else now; never after now nor before the case."""
    from chaos.supervisor import life_end

    assert life_end(5.0, 1000.0 + 3.25, 1000.0) == 3.25
    assert life_end(5.0, None, 1000.0) == 5.0
    assert life_end(5.0, 1000.0 + 7.0, 1000.0) == 5.0
    assert life_end(5.0, 999.0, 1000.0) == 0.0
