"""One case of a program run under the probe: supervise it with a kill schedule, gather evidence, judge properties.

The thin shell around ``chaos.supervisor`` (real processes, real SIGKILL at barriers), ``chaos.probe`` (the
barriers), ``chaos.probe.inspect`` (the state each restart finds) and ``chaos.properties`` (the pure judgement).
A ``ProbeProgram`` (chaos.target) says how to run an unmodified Python program: its interpreter, argv, state paths,
SQLite files, reader, fact vocabulary and documented effect guarantee. Every launch runs as
``PYTHON -m chaos.probe.run --state … -- PROGRAM``; every restart (after a kill) adds ``--inspect`` (the runner
records, from a copy, the state it finds before it runs the program), and the final state is inspected by one more
runner launch (``--only``). A ``chaos.zygote.ZygoteLauncher("chaos.probe.run", …)`` may fork every launch, restarts
and inspections included. Effects are witnessed by the program itself in ``$CHAOS_WITNESS`` (JSON lines with
``effect`` and ``pid``), a file outside its state; pids are mapped back to launches. A scenario's scripted model is
served on this process's scripted server (``OPENAI_BASE_URL``).

Invariant protected: the properties judge the state *at each kill* (the inspection runs before the restarted
program), and a case's schedule names only facts of the program's vocabulary (a typo fails at parse time).

Not here: the campaign over probe scenarios (chaos.campaign, chaos.workers); the session contract's oracle
(``chaos.oracle``) does not apply to these programs — ``acknowledged-durable`` in particular reads a session file's
bytes at announced offsets, and a probe announces offsets 0.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chaos import properties
from chaos.faults import Fault, parse_schedule
from chaos.probe.inspect import exception_line
from chaos.process import Launcher, SubprocessLauncher
from chaos.case import fresh_dir
from chaos.records import CaseRun
from chaos.supervisor import AgentCommand, Limits, Step, Supervisor
from chaos.target import ProbeProgram, TargetError

__all__ = ["ProbeProgram", "ProbeCase", "run_probe_case", "run_probe_baseline", "kill_points", "command"]
INSPECT_SECONDS = 120.0  # the final inspection: a reader that imports a framework by exec takes seconds


@dataclass
class ProbeCase:
    """What one case did and what the properties say about it."""

    run: CaseRun
    evidence: properties.ProbeEvidence
    problems: dict[str, list[str]] = field(default_factory=dict)
    requests: int = 0  # requests the scripted model answered

    @property
    def passed(self) -> bool:
        return not any(self.problems.values())

    @property
    def failed(self) -> list[str]:
        return [name for name, found in self.problems.items() if found]

    @property
    def result(self) -> Any:
        """The final state's result as the target's reader says it (None without a reading)."""
        return (self.evidence.final.get("reader") or {}).get("result")


def _fill(argv: Sequence[str], case: Path) -> list[str]:
    return [a.replace("{case}", str(case)) for a in argv]


def _python(program: ProbeProgram) -> str:
    if not program.python:
        raise TargetError(f"target {program.name}: its interpreter environment is not prepared "
                          f"(run: chaos targets prepare)")
    return program.python


def _runner(program: ProbeProgram, case: Path) -> list[str]:
    runner = [_python(program), "-m", "chaos.probe.run"]
    for path in program.state:
        runner += ["--state", str(case / path)]
    return runner


def _inspect_args(program: ProbeProgram, case: Path, into: Path) -> list[str]:
    """``--inspect`` options: the state paths copied, the SQLite files checked, the reader (``{case}`` is left for
    the runner to fill with the copy's directory)."""
    args = ["--inspect", str(into), "--case", str(case)]
    for path in program.state:
        args += ["--copy", path]
    for path in program.sqlite:
        args += ["--sqlite", path]
    if program.reader:
        args += ["--reader", json.dumps(list(program.reader))]
    return args


def environment(program: ProbeProgram, case: Path, base_url: str | None = None) -> dict[str, str]:
    """The whole environment of a launch of the program in ``case``: this process's, the program's own (``{case}``
    in a value names the case directory: a framework's storage directory, say), the witness file, the probe's path
    in a foreign interpreter, and the scripted model's address when the scenario has one."""
    env = {k: v for k, v in os.environ.items() if k != "CHAOS_CONTROL"}
    env.update({k: v.replace("{case}", str(case)) for k, v in program.env})
    env["CHAOS_WITNESS"] = str(case / "witness.jsonl")
    env.update(program.interpreter_env())  # a foreign interpreter imports the probe, and only the probe
    if base_url:
        env["OPENAI_BASE_URL"] = base_url
        env["OPENAI_API_KEY"] = "killpoint-scripted"  # the scripted server checks no key; SDKs insist on one
    return env


def command(program: ProbeProgram, case: Path, env: Mapping[str, str]) -> AgentCommand:
    """The supervisor's command: the runner with the probe, and for restarts the inspection in front of it."""
    runner = _runner(program, case)
    argv = ["--", *_fill(program.program, case)]
    keep = ["--keep"] if "recovery-deterministic" in program.properties else []  # recover_again starts from it
    resume = (*runner, *_inspect_args(program, case, case / "inspections"), *keep, *argv)
    return AgentCommand(steps=(Step((*runner, *argv)),), resume=resume, env=dict(env), cwd=case,
                        settled_exits=frozenset({0}), blocked_exit=None)


def inspect_final(program: ProbeProgram, case: Path, env: Mapping[str, str], launcher: Launcher,
                  name: str = "final") -> dict:
    """The inspection record of the case's state now, by a runner launch with ``--only`` through ``launcher`` (a
    zygote forks it with the framework already imported)."""
    into = case / "inspections" / name
    argv = [*_runner(program, case), *_inspect_args(program, case, into), "--only", "--",
            *_fill(program.program, case)]
    proc = launcher.launch(argv, env, case, case / f"{name}.out", case / f"{name}.err")
    try:
        code = proc.wait(INSPECT_SECONDS)
        if code is None:
            return {"integrity": {}, "reader": None,
                    "reader_error": f"the inspection did not finish within {INSPECT_SECONDS:.0f} s"}
    finally:
        proc.kill_session()
        proc.close()
    record = into / f"{proc.pid}.json"
    if code != 0 or not record.exists():
        err = case / f"{name}.err"
        tail = (exception_line(err.read_text(errors="replace").splitlines()) if err.exists() else None) or ""
        return {"integrity": {}, "reader": None, "reader_error": f"the inspection exited {code}: {tail}"}
    return json.loads(record.read_text(encoding="utf-8"))


def run_probe_case(program: ProbeProgram, schedule: str | Sequence[Fault], work_dir: Path | str, *,
                   baseline: Any = properties.NO_BASELINE, limits: Limits = Limits(case_seconds=60,
                   silence_seconds=20), name: str = "case", launcher: Launcher | None = None,
                   model: Any = None) -> ProbeCase:
    """Run ``program`` under ``schedule`` (fault texts in its vocabulary) in ``work_dir/name`` and judge it.

    ``baseline``: the crash-free run's final result (``run_probe_baseline``), for ``matches-baseline``. ``model``:
    a scripted chat-completions model (an object with ``name`` and ``runs``, chaos.scenario.Run), served on this
    process's scripted server for the case's launches."""
    faults = parse_schedule(schedule, program.vocabulary) if isinstance(schedule, str) else tuple(schedule)
    # A new directory (name-2, -3… when taken): never the state of an earlier run of the same case (a resumed
    # campaign, a repeated `chaos run`), which the program would resume from.
    case = fresh_dir(Path(work_dir).resolve(), name)
    for path in program.state:
        (case / path).parent.mkdir(parents=True, exist_ok=True)
    witness = case / "witness.jsonl"
    witness.touch()
    launcher = launcher or SubprocessLauncher()
    server = key = None
    requests: list = []
    if model is not None and getattr(model, "runs", None):
        from chaos.case import shared_server

        server, key = shared_server(), f"probe-{uuid.uuid4().hex[:12]}"
        base_url = server.add_case(key, model, log_path=case / "requests.jsonl")
    else:
        base_url = None
    env = environment(program, case, base_url)
    try:
        run = Supervisor(command(program, case, env), case / "supervisor", limits=limits, launcher=launcher,
                         label=f"{program.name}::{'+'.join(map(str, faults))}").run(faults)
        final = inspect_final(program, case, env, launcher)
        again = properties.NO_BASELINE
        if "recovery-deterministic" in program.properties and run.kills:
            again = recover_again(program, case, run, base_url, launcher, limits)
    finally:
        if server is not None:
            requests = server.remove_case(key)
    evidence = gather(run, witness, case / "inspections", final, baseline, again)
    return ProbeCase(run, evidence, properties.judge(evidence, bound=program.effect_bound,
                                                     max_launches=program.max_launches,
                                                     properties=program.properties), requests=len(requests))


def recover_again(program: ProbeProgram, case: Path, run: CaseRun, base_url: str | None, launcher: Launcher,
                  limits: Limits) -> Any:
    """Recover the durable state of the case's last kill a second time, in another directory, without faults;
    its final result (``recovery-deterministic``), or a text saying why it has none. The state is the untouched copy
    the restart after that kill took before it ran anything (chaos.probe.inspect)."""
    killed = [l.index for l in run.launches if l.killed_by is not None]
    later = [l for l in run.launches if killed and l.index > killed[-1]]
    copy = case / "inspections" / f"{later[0].pid}.case" if later else None
    if copy is None or not copy.is_dir():
        return properties.NO_BASELINE  # the case ended at its kill: there is no recovery to compare with
    again = case / "again"
    if again.exists():
        shutil.rmtree(again)
    shutil.copytree(copy, again, symlinks=True)
    env = environment(program, again, base_url)  # its own witness (not the case's evidence), its own {case}
    argv = [*_runner(program, again), "--", *_fill(program.program, again)]
    code = None
    for attempt in range(program.max_launches):
        proc = launcher.launch(argv, env, again, case / f"again-{attempt}.out", case / f"again-{attempt}.err")
        try:
            code = proc.wait(limits.case_seconds)
        finally:
            proc.kill_session()
            proc.close()
        if code == 0:
            break
    if code != 0:
        return f"<the second recovery did not finish: {'no exit' if code is None else f'exit {code}'}>"
    record = inspect_final(program, again, env, launcher, name="final")
    if record.get("reader_error"):
        return f"<the second recovery's state could not be read: {record['reader_error']}>"
    return (record.get("reader") or {}).get("result")


def run_probe_baseline(program: ProbeProgram, work_dir: Path | str) -> Any:
    """The crash-free run's final result (the reader's ``result``); ``ValueError`` when the crash-free run itself
    does not hold every property (a baseline that fails is no reference)."""
    base = run_probe_case(program, (), work_dir, name="baseline")
    if not base.passed:
        raise ValueError(f"{program.name}: the crash-free run fails {', '.join(base.failed)}: {base.problems}")
    return base.result


def kill_points(run: CaseRun, phases: Sequence[str] = ("before-write", "after-sync")) -> list[str]:
    """Every kill point a (crash-free) run reached, one per barrier of ``phases``, named as a campaign names them
    (``chaos.schedules.Transaction``: the probe's first fact, ``commit@after-sync#2``): the depth-1 exhaustive
    schedule of a probe program. ``after-write`` is left out: for the probe it is the same moment as
    ``before-write``."""
    from chaos.schedules import Transaction

    return [str(Transaction(e.tx, tuple(e.facts), tuple(e.ordinals.items())).point(e.phase))
            for e in run.barriers if e.phase in phases]


def classify(case: ProbeCase) -> tuple[str, list[dict[str, Any]]]:
    """The one verdict of a probe case (campaign, ``chaos run``): its status (chaos.status) and failures
    (``{"invariant": property or verdict, "message", "evidence"}``).

    A hang, protocol error or crash is a failure of its own (never hidden by a property that holds); a schedule
    whose kill point was never reached is ``not-reached`` unless a fault that did fire left a property failing; a
    launch error is the harness's ``error``; a program that ended with another exit and no failing property fails
    as ``program-exit``."""
    from chaos import records
    from chaos.status import ERROR, FAIL, NOT_REACHED, PASS

    run = case.run
    failures = [{"invariant": prop, "message": found[0], "evidence": found}
                for prop, found in case.problems.items() if found]
    if run.verdict == records.LAUNCH_ERROR:
        return ERROR, []
    if run.verdict in (records.NOT_REACHED, records.NOT_APPLICABLE):
        return (FAIL, failures) if failures and run.faults else (NOT_REACHED, [])
    if run.verdict in (records.HANG, records.PROTOCOL_ERROR, records.CRASH):
        failures.insert(0, {"invariant": run.verdict, "message": run.detail, "evidence": {"verdict": run.verdict}})
    elif not (run.verdict or "").startswith("exit:"):
        return ERROR, []
    elif run.verdict != "exit:0" and not failures:
        failures.append({"invariant": "program-exit", "message": f"{run.verdict}: {run.detail}",
                         "evidence": {"verdict": run.verdict}})
    return (FAIL if failures else PASS), failures


def gather(run: CaseRun, witness: Path, inspections: Path, final: dict, baseline: Any,
           again: Any = properties.NO_BASELINE) -> properties.ProbeEvidence:
    """The evidence of a finished case, from the supervisor's record and the files the case left."""
    by_pid = {l.pid: l.index for l in run.launches}
    effects = []
    for line in witness.read_text(encoding="utf-8").splitlines():
        try:
            item = json.loads(line)
            effects.append((str(item["effect"]), by_pid.get(item["pid"], -1)))
        except (ValueError, KeyError, TypeError):
            effects.append((f"<unreadable witness line {line[:60]!r}>", -1))
    launches = []
    for l in run.launches:
        record = inspections / f"{l.pid}.json"
        inspection = json.loads(record.read_text(encoding="utf-8")) if record.exists() else None
        launches.append(properties.LaunchEvidence(l.index, l.role, l.returncode, l.killed_by is not None,
                                                  _error(l.stderr), inspection))
    return properties.ProbeEvidence(tuple(launches), tuple(effects), final, run.verdict or "", baseline, again)


def _error(stderr: str) -> str | None:
    """The last line of a Python traceback on a launch's stderr, if there is one."""
    try:
        lines = Path(stderr).read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return None
    if not any(l.startswith("Traceback") for l in lines):
        return None
    return exception_line(lines)
