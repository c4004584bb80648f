"""One case of a program run under the probe: supervise it with a kill schedule, gather evidence, judge properties.

The thin shell around ``chaos.supervisor`` (real processes, real SIGKILL at barriers), ``chaos.probe`` (the
barriers), ``chaos.probe.inspect`` (the state each restart finds) and ``chaos.properties`` (the pure judgement).
A ``ProbeProgram`` says how to run an unmodified Python program: its argv, its state paths, its SQLite files, its
reader, its fact vocabulary and its documented effect guarantee. Every launch runs as
``python -m chaos.probe.run --state … -- PROGRAM``; every restart (after a kill) adds ``--inspect`` (the runner
records the state it finds before it runs the program). A ``chaos.zygote.ZygoteLauncher("chaos.probe.run", …)``
may fork every launch, restarts included. Effects are witnessed by the program itself in ``$CHAOS_WITNESS`` (JSON lines
with ``effect`` and ``pid``), a file outside its state; pids are mapped back to launches.

Invariant protected: the properties judge the state *at each kill* (the inspection runs before the restarted
program), and a case's schedule names only facts of the program's vocabulary (a typo fails at parse time).

Not here: campaigns over probe targets, a ``kind = "python"`` target file, shrinking, reports (issue 11 continues);
the session contract's oracle (``chaos.oracle``) does not apply to these programs — ``acknowledged-durable`` in
particular reads a session file's bytes at announced offsets, and a probe announces offsets 0.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chaos import properties
from chaos.faults import Barrier, Fault, parse_schedule
from chaos.probe.inspect import inspect_state
from chaos.records import CaseRun
from chaos.process import Launcher
from chaos.supervisor import AgentCommand, Limits, Step, Supervisor


@dataclass(frozen=True)
class ProbeProgram:
    """How to run and read one Python program under the probe. Paths are relative to the case directory; the
    word ``{case}`` in ``program`` and ``reader`` is replaced by the case directory."""

    name: str
    program: tuple[str, ...]  # PROGRAM ARGS, or -m MODULE ARGS
    vocabulary: tuple[str, ...]  # chaos.probe.vocabulary(tables, files, points)
    state: tuple[str, ...] = ("state",)
    sqlite: tuple[str, ...] = ()
    reader: tuple[str, ...] | None = None  # argv printing {"done": [...], "result": ..., "complete": bool}
    env: tuple[tuple[str, str], ...] = ()
    effect_bound: int = 1  # the program's documented guarantee: at most this many executions of one effect
    max_launches: int = 4
    properties: tuple[str, ...] = properties.PROPERTIES


@dataclass
class ProbeCase:
    """What one case did and what the properties say about it."""

    run: CaseRun
    evidence: properties.ProbeEvidence
    problems: dict[str, list[str]] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return not any(self.problems.values())

    @property
    def failed(self) -> list[str]:
        return [name for name, found in self.problems.items() if found]


def _fill(argv: Sequence[str], case: Path) -> list[str]:
    return [a.replace("{case}", str(case)) for a in argv]


def command(program: ProbeProgram, case: Path, witness: Path) -> AgentCommand:
    """The supervisor's command: the runner with the probe, and for restarts the inspection in front of it."""
    runner = [sys.executable, "-m", "chaos.probe.run"]
    for path in program.state:
        runner += ["--state", str(case / path)]
    inspect = ["--inspect", str(case / "inspections")]
    for path in program.sqlite:
        inspect += ["--sqlite", str(case / path)]
    if program.reader:
        inspect += ["--reader", json.dumps(_fill(program.reader, case))]
    argv = ["--", *_fill(program.program, case)]
    env = {**dict(program.env), "CHAOS_WITNESS": str(witness)}
    return AgentCommand(steps=(Step((*runner, *argv)),), resume=(*runner, *inspect, *argv), env=env, cwd=case,
                        settled_exits=frozenset({0}), blocked_exit=None)


def run_probe_case(program: ProbeProgram, schedule: str | Sequence[Fault], work_dir: Path | str, *,
                   baseline: Any = properties.NO_BASELINE, limits: Limits = Limits(case_seconds=60,
                   silence_seconds=20), name: str = "case", launcher: Launcher | None = None) -> ProbeCase:
    """Run ``program`` under ``schedule`` (fault texts in its vocabulary) in ``work_dir/name`` and judge it.

    ``baseline``: the crash-free run's final result (``run_probe_baseline``), for ``matches-baseline``."""
    faults = parse_schedule(schedule, program.vocabulary) if isinstance(schedule, str) else tuple(schedule)
    case = Path(work_dir).resolve() / name
    case.mkdir(parents=True, exist_ok=True)
    for path in program.state:
        (case / path).parent.mkdir(parents=True, exist_ok=True)
    witness = case / "witness.jsonl"
    witness.touch()
    run = Supervisor(command(program, case, witness), case / "supervisor", limits=limits, launcher=launcher,
                     label=f"{program.name}::{'+'.join(map(str, faults))}").run(faults)
    env = {**os.environ, **dict(program.env), "CHAOS_WITNESS": str(witness)}
    final = inspect_state([str(case / p) for p in program.sqlite], _fill(program.reader, case)
                          if program.reader else None, env, cwd=str(case))
    evidence = gather(run, witness, case / "inspections", final, baseline)
    return ProbeCase(run, evidence, properties.judge(evidence, bound=program.effect_bound,
                                                     max_launches=program.max_launches,
                                                     properties=program.properties))


def run_probe_baseline(program: ProbeProgram, work_dir: Path | str) -> Any:
    """The crash-free run's final result (the reader's ``result``); ``ValueError`` when the crash-free run itself
    does not hold every property (a baseline that fails is no reference)."""
    base = run_probe_case(program, (), work_dir, name="baseline")
    if not base.passed:
        raise ValueError(f"{program.name}: the crash-free run fails {', '.join(base.failed)}: {base.problems}")
    return (base.evidence.final.get("reader") or {}).get("result")


def kill_points(run: CaseRun, vocabulary: Sequence[str], phases: Sequence[str] = ("before-write", "after-sync"),
                ) -> list[str]:
    """Every kill point a (crash-free) run reached, one per barrier of ``phases``, named by its first fact
    (``commit@after-sync#2``): the depth-1 exhaustive schedule of a probe program. ``after-write`` is left out by
    default: for the probe it is the same moment as ``before-write``."""
    points = []
    for event in run.barriers:
        if event.phase in phases:
            named = Barrier(event.phase, tuple(event.facts), event.tx, event.ordinals).points(vocabulary)
            points.append(str(named[1] if len(named) > 1 else named[0]))
    return points


def gather(run: CaseRun, witness: Path, inspections: Path, final: dict, baseline: Any) -> properties.ProbeEvidence:
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
    return properties.ProbeEvidence(tuple(launches), tuple(effects), final, run.verdict or "", baseline)


def _error(stderr: str) -> str | None:
    """The last line of a Python traceback on a launch's stderr, if there is one."""
    try:
        lines = Path(stderr).read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return None
    if not any(l.startswith("Traceback") for l in lines):
        return None
    return next((l for l in reversed(lines) if l.strip()), None)
