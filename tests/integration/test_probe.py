"""The probe under the real supervisor: an unmodified stdlib program, real SIGKILLs at its durable writes, properties.

The subject is tests/agents/workflow.py (SQLite progress, an atomically replaced status file, effects witnessed
outside its state); each planted defect (WORKFLOW_BUGS) must make its property fail where the correct program holds.
"""

from __future__ import annotations

import signal
import textwrap
from dataclasses import replace

import pytest

from chaos.probe import vocabulary
from chaos.probecase import ProbeProgram, kill_points, run_probe_baseline, run_probe_case
from chaos.properties import PROPERTIES
from chaos.supervisor import Limits
from chaos.zygote import ZygoteLauncher
from tests.agents import HERE

WORKFLOW = HERE / "workflow.py"
PROGRAM = ProbeProgram(
    name="workflow", program=(str(WORKFLOW), "{case}/state"),
    vocabulary=vocabulary(("progress", "cursor"), ("status.json", "status.json.tmp"), ("effected",)),
    sqlite=("state/wf.db",), reader=(str(WORKFLOW), "--read", "{case}/state"),
    effect_bound=2,  # at-least-once: a kill between an effect and its record repeats it once
    max_launches=3)
STEP_FACTS = [["point", "effected"], ["commit", "progress", "cursor"], ["write", "status_json_tmp"],
              ["fsync", "status_json_tmp"], ["close", "status_json_tmp"], ["rename", "status_json"]]


@pytest.fixture(scope="module")
def baseline(tmp_path_factory):
    """The crash-free run's result (it must itself hold every property)."""
    return run_probe_baseline(PROGRAM, tmp_path_factory.mktemp("baseline"))


def test_crash_free_run_announces_every_durable_write(tmp_path, baseline):
    """Each step announces its point, its SQLite commit with the tables written, and the status file's write,
    fsync, close and rename, each with three phases in order; the result is the program's own."""
    case = run_probe_case(PROGRAM, (), tmp_path, baseline=baseline)
    assert case.passed and baseline == 123
    phases = [b.phase for b in case.run.barriers]
    assert phases == ["before-write", "after-write", "after-sync"] * (len(phases) // 3)
    assert [b.facts for b in case.run.barriers if b.phase == "before-write"] == STEP_FACTS * 3
    assert all(b.offset == b.synced_offset == 0 for b in case.run.barriers)
    assert case.run.launches[0].hello["state"] == [str((tmp_path / "case" / "state").resolve())]


@pytest.mark.parametrize("point", ["effected@after-sync#1", "commit@before-write#2", "commit@after-sync#1",
                                   "write@before-write#1", "write@after-sync#1", "rename@before-write#2",
                                   "status_json@after-sync#3"])
def test_correct_program_holds_every_property_under_a_real_kill(tmp_path, baseline, point):
    """Killed by SIGKILL at a barrier and restarted, the correct workflow holds every property."""
    case = run_probe_case(PROGRAM, point, tmp_path, baseline=baseline)
    first = case.run.launches[0]
    assert (first.returncode, first.killed_by) == (-signal.SIGKILL, "fault")
    assert [l.role for l in case.run.launches] == ["step", "resume"]
    assert case.problems == {name: [] for name in PROPERTIES}


@pytest.mark.slow
def test_correct_program_holds_at_every_kill_point(tmp_path, baseline):
    """Killed at every before-write and after-sync barrier its crash-free run reaches, the correct workflow holds
    every property each time."""
    points = kill_points(run_probe_case(PROGRAM, (), tmp_path, name="discover").run)
    assert len(points) == 2 * len(STEP_FACTS) * 3 and points[:2] == ["point@before-write#1", "point@after-sync#1"]
    failing = {}
    for i, point in enumerate(points):
        case = run_probe_case(PROGRAM, point, tmp_path, baseline=baseline, name=f"k{i}")
        if not case.passed or case.run.faults[0].signal != "SIGKILL":
            failing[point] = case.problems
    assert failing == {}


@pytest.mark.parametrize("bug, point, prop, says", [
    ("rerun-recorded", "commit@after-sync#1", "recorded-not-redone", "already recorded it as done"),
    ("retry-effect", "effected@after-sync#1", "effects-bounded", "ran 3 times"),
    ("no-transaction", "commit@after-sync#1", "matches-baseline", "final result 23, the crash-free run's is 123"),
    ("write-in-place", "write@before-write#1", "state-loads", "JSONDecodeError"),
    ("stop-early", "effected@after-sync#2", "completes", "does not record the program as finished"),
])
def test_planted_defect_fails_its_property(tmp_path, baseline, bug, point, prop, says):
    """Each planted defect, killed where it matters, fails its property with evidence."""
    program = replace(PROGRAM, env=(("WORKFLOW_BUGS", bug),))
    case = run_probe_case(program, point, tmp_path, baseline=baseline)
    assert case.run.faults and case.run.faults[0].signal == "SIGKILL"
    assert prop in case.failed, case.problems
    assert any(says in problem for problem in case.problems[prop]), case.problems[prop]


LATE_SIBLINGS = (("WORKFLOW_BUGS", "no-lock"), ("WORKFLOW_LATE_SIBLINGS", "1.5"))


def test_concurrent_resumes_run_in_lockstep(tmp_path, baseline):
    """After dresume(3) the supervisor holds the first resume at its barrier while the two others still run (they
    spin 1.5 s before reading the state): all three read it before any records the step, so the lock-free
    workflow's triple effect shows every time, however the machine schedules them."""
    program = replace(PROGRAM, env=LATE_SIBLINGS, properties=(*PROPERTIES, "consume-once"))
    case = run_probe_case(program, "dresume(3):point@after-sync#2", tmp_path, baseline=baseline)
    assert [l.role for l in case.run.launches] == ["step", "dresume", "dresume", "dresume"]
    assert any("'b' ran 3 times in 3 concurrent resumes" in p for p in case.problems["consume-once"]), case.problems
    assert max(b.held for b in case.run.barriers) >= 1.0  # the first resume waited out its siblings' spin


def test_without_lockstep_a_late_sibling_hides_the_race(tmp_path, baseline):
    """The lockstep switched off (Limits.hold_seconds = 0), the first resume finishes while its siblings spin and
    the same lock-free workflow passes consume-once: the hold is what makes the check see the race."""
    program = replace(PROGRAM, env=LATE_SIBLINGS, properties=(*PROPERTIES, "consume-once"))
    case = run_probe_case(program, "dresume(3):point@after-sync#2", tmp_path, baseline=baseline,
                          limits=Limits(case_seconds=60, silence_seconds=20, hold_seconds=0))
    assert case.problems["consume-once"] == [] and all(b.held == 0 for b in case.run.barriers)


def test_zygote_forks_every_launch_restarts_included(tmp_path, baseline):
    """Under the zygote launcher (module chaos.probe.run) the first launch and the inspected restart are forked,
    and the correct program still holds every property."""
    launcher = ZygoteLauncher("chaos.probe.run", ("sqlite3", "chaos.probe.inspect"))
    try:
        case = run_probe_case(PROGRAM, "commit@after-sync#2", tmp_path, baseline=baseline, launcher=launcher)
        assert launcher.fallback is None
        assert all(launcher.accepts(l.argv) for l in case.run.launches)
    finally:
        launcher.close()
    assert [l.role for l in case.run.launches] == ["step", "resume"]
    assert case.evidence.launches[1].inspection["reader"]["done"] == ["a", "b"]
    assert case.problems == {name: [] for name in PROPERTIES}


def test_ioerror_answer_makes_the_wrapped_call_fail(tmp_path, baseline):
    """A fail(EIO) answer at an fsync barrier makes os.fsync raise EIO in the program without syncing."""
    case = run_probe_case(PROGRAM, "ioerror(EIO):fsync@before-write#1", tmp_path, baseline=baseline)
    first = case.evidence.launches[0]
    assert first.returncode == 1 and "OSError: [Errno 5]" in first.error and "injected by chaos" in first.error
    assert case.failed == ["state-loads"]  # the program does not survive a failed fsync; the restart finishes


def test_failed_commit_and_cuts_that_mean_nothing(tmp_path, baseline):
    """fail(EIO) at a commit makes it raise sqlite3.DatabaseError; powerloss at a probe barrier is not applicable
    (the probe announces no unsynced byte range)."""
    case = run_probe_case(PROGRAM, "ioerror(EIO):commit@before-write#1", tmp_path, baseline=baseline, name="eio")
    assert "sqlite3.DatabaseError: not authorized" in case.evidence.launches[0].error
    case = run_probe_case(PROGRAM, "powerloss:commit@after-write#1", tmp_path, baseline=baseline, name="cut")
    assert case.run.verdict == "fault-not-applicable"


def test_every_commit_path_of_sqlite3_is_announced(tmp_path):
    """commit(), `with conn:`, a COMMIT statement through a cursor, executescript and a connection of the program's
    own factory are barriers naming the tables written, and a program's own authorizer still runs."""
    program_file = tmp_path / "commits.py"
    program_file.write_text(textwrap.dedent("""
        import sqlite3, sys
        conn = sqlite3.connect(sys.argv[1])
        conn.execute("CREATE TABLE a (x)"); conn.execute("CREATE TABLE b (x)")
        seen = []
        conn.set_authorizer(lambda *args: (seen.append(args[0]), 0)[1])
        conn.execute("INSERT INTO a VALUES (1)"); conn.commit()
        with conn:
            conn.execute("INSERT INTO b VALUES (1)")
        cur = conn.cursor()
        cur.execute("BEGIN"); cur.execute("UPDATE a SET x = 2"); cur.execute("DELETE FROM b"); cur.execute("COMMIT")
        conn.execute("INSERT INTO a VALUES (3)")
        conn.executescript("INSERT INTO b VALUES (4);")
        assert seen, "the program's authorizer was not called"
        class Mine(sqlite3.Connection):
            pass
        other = sqlite3.connect(sys.argv[1], 5.0, 0, "DEFERRED", True, Mine)  # the factory given by position
        assert isinstance(other, Mine)
        other.execute("INSERT INTO b VALUES (5)"); other.commit()
    """))
    program = ProbeProgram("commits", (str(program_file), "{case}/db.sqlite"), vocabulary(("a", "b")),
                           properties=("completes",), max_launches=1)
    case = run_probe_case(program, (), tmp_path)
    assert case.run.verdict == "exit:0", case.run.detail
    assert [b.facts for b in case.run.barriers if b.phase == "before-write"] == [
        ["commit", "a"], ["commit", "b"], ["commit", "a", "b"], ["commit", "a"], ["commit", "b"]]


def test_each_thread_has_its_own_barrier_stream(tmp_path):
    """Two threads writing at once each announce on their own connection: no protocol error, every barrier seen."""
    program_file = tmp_path / "threads.py"
    program_file.write_text(textwrap.dedent("""
        import os, sys, threading
        os.makedirs(sys.argv[1], exist_ok=True)
        def work(name):
            for _ in range(5):
                with open(os.path.join(sys.argv[1], name), "a") as f:
                    f.write("x"); f.flush(); os.fsync(f.fileno())
        ts = [threading.Thread(target=work, args=(n,)) for n in ("one", "two")]
        [t.start() for t in ts]; [t.join() for t in ts]
    """))
    program = ProbeProgram("threads", (str(program_file), "{case}/state"), vocabulary(files=("one", "two")),
                           properties=(), max_launches=1)
    case = run_probe_case(program, (), tmp_path)
    assert case.run.verdict == "exit:0", case.run.detail
    assert sorted(b.facts[1] for b in case.run.barriers if b.facts[0] == "fsync" and b.phase == "after-sync") == [
        "one"] * 5 + ["two"] * 5
    assert len(case.run.launches[0].hello) and len({b.pid for b in case.run.barriers}) == 1
