"""Run one case: a scenario under a fault schedule, end to end, and judge it with the oracle.

This is the product's core loop in one call, ``run_case(scenario, schedule, work_dir=…)``:

1. lay down a fresh case directory: ``workspace/`` (the scenario's files), ``sessions/``, the effect witness file
   ``witness.log`` *outside* the workspace (exposed to the agent as ``CHAOS_WITNESS``), a route on the scripted model
   server (shared per process, one route per case) whose request log is written to ``requests.jsonl`` when the
   case directory is kept;
2. build the agent command from the scenario: ``run`` for each run (the first creates the session), ``compact``
   after a run that has one, ``resume`` after a fault, ``abort`` when the agent ends blocked and the scenario says
   ``then = "abort"``; every argv carries the ``{restart}`` token, which ``RestartLauncher`` expands to the
   scenario's restart flags on every launch after the first kill (the supervisor knows nothing about scenarios);
3. run it through ``chaos.supervisor`` with the schedule (kill at barriers, restart, watchdog);
4. collect the evidence: the final log, the log as each restart found it, acknowledged transactions and barriers,
   launches with the configuration each ran with, server requests, witnesses, workspace files; then run
   ``resume`` once more ("resume changes nothing"; a second time only when the first changed the log);
5. ``chaos.oracle.check`` → a ``CaseResult`` (JSON-ready for journals and reports).

The crash-free baseline (``run_baseline``) is the same with an empty schedule, run with the *correct* agent (no
``AGENT_BUGS``), itself checked by every invariant; it also yields the kill points a campaign enumerates.

Designed for campaigns that call it thousands of times in parallel worker processes: every input is picklable
(pydantic scenario, frozen dataclasses, strings), nothing is global except one lazily started scripted server per
process (re-created after a fork), every case writes only under its own directory, and the directory is removed
afterwards unless the case failed (or ``keep="all"``).

Not here: choosing schedules (chaos.schedules), killing processes (chaos.supervisor), judging (chaos.oracle),
rendering (chaos.verdict).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import atexit
import sys
import tempfile
import threading
import time
import uuid
from collections import ChainMap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from chaos import oracle, records, scratch
from chaos.faults import FACT_NAMES, case_id, parse_schedule
from chaos.divergence import first_divergence
from chaos.fakellm import ScriptedServer, write_log
from chaos.process import AgentProcess, Launcher, kill_processes, session_members
from chaos.records import CaseRun
from chaos.supervisor import SESSION, AgentCommand, Limits, Step, Supervisor, SupervisorError
from chaos.status import FAIL, PASS
from chaos.target import Target, TargetError, describe

RESTART = "{restart}"  # argv token: the scenario's restart flags after the first kill, nothing before
# Supervisor verdicts after which the files say nothing reliable about the agent: no oracle, the verdict is the status.
_NO_ORACLE = {records.HANG, records.PROTOCOL_ERROR, records.LAUNCH_ERROR, records.NOT_APPLICABLE, records.NOT_REACHED}
# Which fact names a transaction's kill point: its record type when it has one (what the transaction *does*), else
# its entry; `user` and `usage` only when alone. The same rule as chaos.schedules, so names agree everywhere.
_NAMING_ORDER = tuple(n for n in FACT_NAMES if n not in ("user", "usage")) + ("user", "usage")
PLAIN_KILL_PHASES = ("before-write", "after-sync")  # under SIGKILL after-write leaves the bytes of after-sync


# --------------------------------------------------------------------------------------------------------------
# The agent under test


@dataclass(frozen=True)
class Settings:
    """The agent configuration flags of issue 3 (None = not given)."""

    model: str | None = None
    tools: tuple[str, ...] | None = None
    replay: tuple[str, ...] = ()
    environment_identity: str | None = None
    request_timeout: float | None = None
    max_steps: int | None = None

    def argv(self) -> list[str]:
        out: list[str] = []
        if self.model is not None:
            out += ["--model", self.model]
        if self.tools is not None:
            out += ["--tools", ",".join(self.tools)]
        for item in self.replay:
            out += ["--replay", item]
        if self.environment_identity is not None:
            out += ["--environment-identity", self.environment_identity]
        if self.request_timeout is not None:
            out += ["--request-timeout", f"{self.request_timeout:g}"]
        if self.max_steps is not None:
            out += ["--max-steps", str(self.max_steps)]
        return out

    def then(self, changes: Settings) -> Settings:
        """These settings with ``changes`` applied on top (what a launch after the first kill runs with)."""
        return Settings(
            model=changes.model if changes.model is not None else self.model,
            tools=changes.tools if changes.tools is not None else self.tools,
            replay=changes.replay or self.replay,
            environment_identity=changes.environment_identity or self.environment_identity,
            request_timeout=self.request_timeout,
            max_steps=self.max_steps,
        )


def current_configuration(target: Target, settings: Settings, env: Mapping[str, str]) -> dict | None:
    """The CurrentConfiguration (SPEC §8.7, plus ``snapshot``) a launch of ``target`` with ``settings`` runs with.

    Asked from the target (``describe``), never computed by importing it; None when the target does not say (the
    oracle then reports the checks that need it as skipped) or refuses the flags (the agent will refuse them too:
    the case reports that). The environment identity is left out of the question and filled in by SPEC §8.5 (the
    flag, else ``AGENT_ENVIRONMENT_IDENTITY`` stripped of ASCII whitespace): it is outside the configuration digest
    (§8.2), so one answer serves every scenario with the same flags (one question per worker, not per case).
    """
    flags = Settings(model=settings.model, tools=settings.tools, replay=settings.replay,
                     request_timeout=settings.request_timeout, max_steps=settings.max_steps).argv()
    identity = settings.environment_identity or (env.get("AGENT_ENVIRONMENT_IDENTITY") or "").strip(" \t\n\r\f\v")
    try:
        info = describe(target, flags, environ={"AGENT_ENVIRONMENT_IDENTITY": "chaos:describe"},
                        workspace=tempfile.gettempdir())
    except TargetError:
        return None
    if info is None or not isinstance(info.current, Mapping) or not identity:
        return None
    return {**info.current, "environmentIdentity": identity}


def summary_prompt(target: Target) -> str | None:
    """The system prompt by which ``target`` asks for a compaction summary (the scripted server recognises it)."""
    try:
        info = describe(target, (), environ={"AGENT_ENVIRONMENT_IDENTITY": "chaos:describe"},
                        workspace=tempfile.gettempdir())
    except TargetError:
        return None
    return info.summary_prompt if info is not None else None


class RestartLauncher:
    """A ``Launcher`` that expands ``{restart}`` to the scenario's restart flags on every launch after the first kill.

    "After the first kill" is observed, not told: an earlier launch of this case that ended by SIGKILL. (The
    supervisor SIGKILLs only at faults; a watchdog kill ends the case, so no launch follows it.) Which launches got
    the changes is remembered by pid for the oracle.
    """

    def __init__(self, inner: Launcher, restart_args: Sequence[str]):
        self.inner = inner
        self.restart_args = list(restart_args)
        self.launched: list[tuple[AgentProcess, bool]] = []

    def killed_before(self) -> bool:
        return any(proc.poll() == -signal.SIGKILL for proc, _ in self.launched)

    def expand(self, argv: Sequence[str], restart: bool) -> list[str]:
        out: list[str] = []
        for arg in argv:
            if arg == RESTART:
                out += self.restart_args if restart else []
            else:
                out.append(arg)
        return out

    def launch(self, argv, env, cwd, stdout, stderr) -> AgentProcess:
        restart = self.killed_before()
        proc = self.inner.launch(self.expand(argv, restart), env, cwd, stdout, stderr)
        self.launched.append((proc, restart))
        return proc

    def restarted(self, pid: int) -> bool:
        return any(p.pid == pid and r for p, r in self.launched)


# --------------------------------------------------------------------------------------------------------------
# The scripted server: one per worker process, one route per case


_server_lock = threading.Lock()
_server: tuple[int, ScriptedServer] | None = None


_launchers: dict[tuple, Launcher] = {}
# How many case loops run on this machine at once: a campaign's workers; 1 for a single case (and bench/campaign.py's
# one loop). A zygote's spare copies ahead the pages its launch will write (chaos.prefault) only when that leaves a
# core idle: with every core running a loop, the copies cost more CPU than the faults they save (measured: a
# 586-case campaign on 2 workers took 20-40 % more CPU with them).
_loops = 1


def set_loops(n: int) -> None:
    """Say how many case loops (campaign workers) this machine runs at once (launchers started from then on copy
    ahead or not by it: ``copies_ahead``)."""
    global _loops
    _loops = max(1, n)


def copies_ahead() -> bool:
    """Whether this process's zygotes copy pages ahead: when its loops leave a core of this process idle."""
    return _loops < usable_cores()


_cores: dict[int, float] = {}  # pid -> usable_cores(), read once per process (~0.13 ms: /proc and cgroup files)


def usable_cores() -> float:
    """The cores this process may use: its CPU affinity, lowered by a CPU quota of its cgroup (a CI container
    limited to 1.5 CPUs of a 4-core host has 1.5). Read once per process: every case's set-up asks."""
    if os.getpid() not in _cores:
        _cores[os.getpid()] = _read_cores()
    return _cores[os.getpid()]


def _read_cores() -> float:
    try:
        cores: float = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1

    def read(path: str) -> str:
        with open(path) as f:
            return f.read()

    try:
        quota = cgroup_quota(read("/proc/self/cgroup"), read)
    except OSError:
        quota = None
    return min(cores, quota) if quota is not None else cores


def cgroup_quota(cgroup: str, read) -> float | None:
    """CPU quota / period of the cgroup a ``/proc/self/cgroup`` text names (v2 ``cpu.max``; v1
    ``cpu.cfs_quota_us`` and ``cpu.cfs_period_us``), its files read with ``read(path)``; None: no quota."""
    for line in cgroup.splitlines():
        fields = line.split(":", 2)
        if len(fields) != 3:
            continue
        _, controllers, path = fields
        path = path.rstrip("/")
        try:
            if controllers == "":  # v2: "max 100000" or "150000 100000"
                quota, period = read(f"/sys/fs/cgroup{path}/cpu.max").split()[:2]
            elif "cpu" in controllers.split(","):  # v1: -1 for none
                base = f"/sys/fs/cgroup/{controllers}{path}"
                quota, period = read(f"{base}/cpu.cfs_quota_us").strip(), read(f"{base}/cpu.cfs_period_us").strip()
            else:
                continue
            if quota not in ("max", "-1") and int(period) > 0:
                return int(quota) / int(period)
        except (OSError, ValueError):
            continue
    return None


def shared_launcher(target: Target) -> Launcher:
    """This process's launcher for ``target`` (``chaos.zygote.launcher_for``: a warm zygote where the target
    allows one, else exec), started on first use and stopped at exit; one per process, module, preload and copying
    ahead. A zygote that died (killed from outside) is replaced by a new one, once per case at most, with a
    warning."""
    # A python target's zygote imports with the target's env (its telemetry switches): part of what it is. Copying
    # ahead is fixed at its start: a worker whose pool changed its size (chaos mutants) gets the zygote it needs.
    key = (os.getpid(), target.zygote_module(), target.preload, target.interpreter(),
           target.probe.env if target.probe is not None else (), copies_ahead())
    with _server_lock:
        old = _launchers.get(key)
        if old is not None and getattr(old, "died", False):
            print(f"killpoint: {old.fallback}; starting a new zygote", file=sys.stderr)
            del _launchers[key]
        if key not in _launchers:
            from chaos.zygote import launcher_for

            launcher = launcher_for(target, warn=lambda line: print(f"killpoint: {line}", file=sys.stderr),
                                    copy_ahead=copies_ahead())
            _launchers[key] = launcher
            close = getattr(launcher, "close", None)
            if close is not None:
                atexit.register(close)
        return _launchers[key]


def shared_server() -> ScriptedServer:
    """This process's scripted model server (started on first use; a forked child starts its own)."""
    global _server
    with _server_lock:
        if _server is None or _server[0] != os.getpid():
            _server = (os.getpid(), ScriptedServer().start())
        return _server[1]


# --------------------------------------------------------------------------------------------------------------
# Results


@dataclass
class KillPointInfo:
    """One barrier the baseline reached: its transaction, phase, facts, and every kill-point text naming it."""

    point: str  # the canonical name (FACT@PHASE#N, the fact chosen as chaos.schedules does)
    tx: int
    phase: str
    facts: list[str]
    aliases: list[str]

    def to_json(self) -> dict:
        return dict(self.__dict__)


@dataclass
class CaseResult:
    """How one case ended: ``status`` (pass, fail, or the supervisor verdict that prevented judging: hang,
    protocol-error, launch-error, kill-point-not-reached, fault-not-applicable), the invariants' results, and counts.
    """

    case_id: str
    scenario: str
    schedule: list[str]
    status: str
    verdict: str
    detail: str
    invariants: list[oracle.InvariantResult] = field(default_factory=list)
    duration: float = 0.0
    case_dir: str | None = None  # kept directory (None: removed)
    launches: int = 0
    kills: int = 0
    requests: int = 0
    bugs: list[str] = field(default_factory=list)
    target: str = "bundled"  # chaos.target.Target.label() of what ran
    # chaos.divergence.Divergence.to_json() of a failing case of a contract target whose implementation's recovery
    # plan differed from the reference planner's at some kill (None: none, or not asked)
    divergence: dict | None = None
    # seconds per phase of the case: setup, supervisor (the launches), probes (convergence resumes), oracle, teardown
    timings: dict = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status == PASS

    @property
    def failed(self) -> list[oracle.InvariantResult]:
        return [r for r in self.invariants if not r.ok]

    def to_json(self) -> dict:
        out = {k: v for k, v in self.__dict__.items() if k != "invariants"}
        out["invariants"] = [r.to_json() for r in self.invariants]
        return out

    @classmethod
    def from_json(cls, value: Mapping) -> CaseResult:
        data = {k: v for k, v in value.items() if k in cls.__dataclass_fields__ and k != "invariants"}
        return cls(**data, invariants=[oracle.InvariantResult.from_json(r) for r in value.get("invariants", [])])


@dataclass
class Baseline:
    """The crash-free run of a scenario with the correct agent: its result, what cases compare against, and the
    kill points it reached."""

    result: CaseResult
    facts: oracle.BaselineFacts
    killpoints: list[KillPointInfo]

    @property
    def ok(self) -> bool:
        return self.result.ok

    def schedules(self, phases: Sequence[str] = PLAIN_KILL_PHASES) -> list[tuple[str, ...]]:
        """Depth-1 schedules: one plain kill at every reached kill point of ``phases``."""
        return [(k.point,) for k in self.killpoints if k.phase in phases]

    def to_json(self) -> dict:
        return {"result": self.result.to_json(), "facts": self.facts.to_json(),
                "killpoints": [k.to_json() for k in self.killpoints]}

    @classmethod
    def from_json(cls, value: Mapping) -> Baseline:
        return cls(CaseResult.from_json(value["result"]), oracle.BaselineFacts.from_json(value["facts"]),
                   [KillPointInfo(**k) for k in value["killpoints"]])


def killpoints(run: CaseRun) -> list[KillPointInfo]:
    """Every barrier of ``run`` as a kill point (all three phases), in the order they were announced."""
    out = []
    for b in run.barriers:
        present = [f for f in _NAMING_ORDER if f in b.ordinals]
        name = present[0] if present else b.facts[0]
        out.append(KillPointInfo(f"{name}@{b.phase}#{b.ordinals[name]}", b.tx, b.phase, list(b.facts), b.points()))
    return out


# --------------------------------------------------------------------------------------------------------------
# Running


def case_slug(text: str) -> str:
    """A directory name for a case id (``::``, ``#``, ``@``, parentheses, ``+`` become ``_``-separated)."""
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_")
    if len(slug) > 80:
        slug = slug[:60] + "_" + hashlib.sha256(text.encode()).hexdigest()[:12]
    return slug or "case"


def _settings(scenario) -> tuple[Settings, Settings]:
    """(first-launch settings, restart changes) of a scenario."""
    agent = scenario.agent
    first = Settings(model=agent.model, tools=tuple(agent.tools), environment_identity=agent.environment_identity,
                     request_timeout=agent.request_timeout, max_steps=agent.max_steps)
    r = scenario.restart
    changes = Settings(model=r.model, tools=tuple(r.tools) if r.tools is not None else None, replay=tuple(r.replay),
                       environment_identity=r.environment_identity)
    return first, changes


def build_command(scenario, target: Target, *, session_dir: Path, workspace: Path, base_url: str,
                  env: Mapping[str, str]) -> AgentCommand:
    """The supervisor's command for a scenario: one step per run/compaction, resume and (optionally) abort, from the
    target's argv templates (``{session}``/``{restart}`` stay for the supervisor and the restart launcher)."""
    first, _ = _settings(scenario)
    flags = first.argv() + ["--base-url", base_url]
    where = {"session_dir": str(session_dir), "workspace": str(workspace)}
    steps: list[Step] = []
    for kind, index in scenario.operations():
        if kind == "run":
            prompt = scenario.runs[index].prompt
            again = target.argv("run_again", flags=flags, prompt=prompt, **where)
            argv = target.argv("run", flags=flags, prompt=prompt, **where) if not steps else again
            # A run whose every write was destroyed by a fault is issued again, as its user would (supervisor).
            steps.append(Step(argv, again))
        else:
            argv = target.argv("compact", flags=flags, **where)
            steps.append(Step(argv, argv))
    resume = target.argv("resume", flags=flags, **where)
    abort = target.argv("abort", flags=flags, **where) if scenario.restart.then == "abort" else None
    return AgentCommand(steps=tuple(steps), resume=resume, abort=abort, env=dict(env),
                        settled_exits=frozenset(target.settled_exits), blocked_exit=target.blocked_exit,
                        locked_exit=target.locked_exit)


def _environment(scenario, target: Target, witness: Path, base_url: str) -> dict[str, str]:
    env = target.environment()
    env.update({
        "CHAOS_WITNESS": str(witness),
        "OPENAI_BASE_URL": base_url,
        "OPENAI_API_KEY": "chaos-scripted",
        # A stable identity, not the workspace path: every case (and the baseline) runs in its own directory, and
        # a path-derived identity would make equal work look different (toolStarted.environmentIdentity) and make
        # a move indistinguishable from a scenario's deliberate environment change.
        "AGENT_ENVIRONMENT_IDENTITY": f"chaos:{scenario.name}",
    })
    return env


def run_case(scenario, schedule: Sequence[str] | str = (), *, work_dir: Path | str, target: Target = Target(),
             baseline: Baseline | oracle.BaselineFacts | None = None, server: ScriptedServer | None = None,
             limits: Limits | None = None, probes: int = 2, keep: str = "failing", name: str | None = None,
             ) -> CaseResult:
    """Run ``scenario`` under ``schedule`` (fault texts, or ``"F1+F2"``) and judge it.

    The case directory is ``work_dir/<case slug>`` (``name`` overrides the slug); it is removed afterwards unless
    ``keep`` is ``"all"``, or ``"failing"`` and the case did not pass (``"none"``: always removed). ``baseline``
    enables the differential and exactly-once checks. Never raises for agent misbehaviour; raises ``ChaosError``
    only when the harness itself cannot run (bad schedule text, socket).
    """
    result, _, _ = execute_case(scenario, schedule, work_dir=Path(work_dir), target=target, baseline=baseline,
                                server=server, limits=limits, probes=probes, keep=keep, name=name)
    return result


def run_baseline(scenario, *, work_dir: Path | str, target: Target = Target(), server: ScriptedServer | None = None,
                 limits: Limits | None = None, keep: str = "failing") -> Baseline:
    """The crash-free run with the correct agent (``target`` without its bugs), judged by every invariant."""
    result, evidence, run = execute_case(scenario, (), work_dir=Path(work_dir), target=target.correct(),
                                         baseline=None, server=server, limits=limits, probes=2, keep=keep, name=None)
    facts = (oracle.baseline_facts(evidence, result.invariants) if evidence is not None
             else oracle.BaselineFacts([], {}, {}, False))
    facts.ok = facts.ok and result.ok
    return Baseline(result, facts, killpoints(run))


def execute_case(scenario, schedule, *, work_dir: Path, target: Target, baseline, server, limits, probes: int,
                 keep: str, name: str | None, diagnose: bool = True) -> tuple[CaseResult, oracle.Evidence | None, CaseRun]:
    """``run_case`` with everything it saw: (result, the oracle's evidence or None when not judged, the CaseRun).
    ``diagnose=False`` skips the first divergence of a failure (one ``plan`` process per kill): shrink candidates
    and discovery runs need only the verdict."""
    t0 = time.monotonic()
    faults = parse_schedule(schedule) if isinstance(schedule, str) else parse_schedule(list(schedule))
    cid = case_id(scenario.name, faults)
    # Absolute: the agent runs with the case directory as its cwd, so a relative --workspace/--session-dir (e.g.
    # `chaos run`'s default `--reports reports`) would name a path that does not exist from there.
    # In scratch (chaos.scratch: tmpfs, behind a link of this name) unless every case is kept anyway.
    case_dir = fresh_dir(Path(work_dir).resolve(), name or case_slug(cid if faults else f"{cid}::baseline"),
                         make=scratch.make if keep != "all" else Path.mkdir)
    seen: list = []  # the case's recorded model requests, once its route is removed
    try:
        return _execute_in(case_dir, scenario, faults, cid, t0, target=target, baseline=baseline, server=server,
                           limits=limits, probes=probes, keep=keep, diagnose=diagnose, seen=seen)
    except BaseException:
        # The harness failed mid-case: its files stay for whoever looks, with what the model server saw.
        try:
            if seen:
                write_log(case_dir / "requests.jsonl", seen, append=False)
        except OSError:
            pass
        finally:
            scratch.settle(case_dir, keep=True)
        raise


def _execute_in(case_dir: Path, scenario, faults, cid: str, t0: float, *, target: Target, baseline, server, limits,
                probes: int, keep: str, diagnose: bool,
                seen: list) -> tuple[CaseResult, oracle.Evidence | None, CaseRun]:
    """``execute_case`` in its case directory, made (``t0``: when the case began); ``seen`` gets the case's recorded
    model requests once its route is removed (execute_case's log of a case the harness failed)."""
    workspace, sessions, witness = case_dir / "workspace", case_dir / "sessions", case_dir / "witness.log"
    workspace.mkdir()
    sessions.mkdir()
    witness.touch()
    for rel, content in scenario.workspace.items():
        path = workspace / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content, encoding="utf-8")

    srv = server or shared_server()
    key = f"{case_slug(cid)}-{uuid.uuid4().hex[:12]}"
    # No request log while the case runs: written beside its other files if the case is kept (~0.27 ms a request
    # on the agent's path, for a directory nearly every case discards); the records themselves are taken before
    # each answer, in memory, as the oracle's evidence.
    base_url = srv.add_case(key, scenario, summary_prompt=summary_prompt(target))
    env = _environment(scenario, target, witness, base_url)
    command = build_command(scenario, target, session_dir=sessions, workspace=workspace, base_url=base_url, env=env)
    first, changes = _settings(scenario)
    launcher = RestartLauncher(shared_launcher(target), changes.argv())
    limits = limits or Limits()
    clock = [("setup", time.monotonic())]  # where a case's time goes (bench/campaign.py reads it)
    # The environment identity a launch reads (the case's variables over the harness's), for the oracle's question;
    # a view, not a copy of ~100 variables (~50 µs) per case.
    environ = ChainMap(env, os.environ)
    early: Judgement | None = None  # the oracle's judgement made while the first probe ran
    overlapped = 0.0  # seconds of oracle work inside the probe phase (counted as oracle time, not probe time)
    hidden = 0.0  # ... of which behind a probe still running when it ended (off a case's critical path)
    try:
        run = Supervisor(command, case_dir, launcher=launcher, limits=limits, label=cid).run(faults)
        clock.append(("supervisor", time.monotonic()))
        probe_results = []
        if run.verdict not in _NO_ORACLE and run.session and os.path.isfile(run.session):
            restart = bool(run.kills)
            argv = launcher.expand([*command.resume], restart)
            argv = [a.replace(SESSION, run.session) for a in argv]
            # Convergence probes: one more resume must change nothing. A second one runs only when the first
            # changed the log (to show whether it keeps changing it): after a probe that changed nothing, another
            # starts from the same bytes under the same configuration and can only repeat it (bench/campaign.py:
            # ~8-9 ms per probe under the zygote, 120-140 ms by exec: a quarter of an exec'd case's time).
            for i in range(probes):
                started = _start_probe(launcher.inner, argv, run.session, env, case_dir, i)
                try:
                    if i == 0:
                        # The probe is a process of its own: the oracle judges what the supervisor left meanwhile
                        # (on the other core). The judgement stands only if the probe changed none of what it read
                        # (the log, the witness, the requests, the expected files); else it is made again below.
                        t = time.monotonic()
                        try:
                            early = _judge(cid, scenario, target, run, launcher, command, first, changes, environ,
                                           srv.requests(key), witness, workspace, baseline, started.before)
                        except Exception:  # noqa: BLE001 - e.g. a file the probe removed mid-read: judged after
                            early = None
                        done = time.monotonic()
                        overlapped = done - t
                        # Hidden: the part of the oracle's work the probe's life covered. A probe already reaped
                        # covered it up to its end when its reaper says when (the zygote); else (exec) none of it.
                        hidden = hidden_behind(t, done, started.proc.ended if started.proc.poll() is not None
                                               else done)
                finally:  # whatever the oracle raised, the probe is waited for (or killed): it never outlives us
                    probe_results.append(_finish_probe(started, limits))
                if probe_results[-1].sha_before == probe_results[-1].sha_after:
                    break
    finally:
        seen.extend(srv.remove_case(key))
    requests = list(seen)
    clock.append(("probes", time.monotonic()))

    detail = run.detail
    if run.verdict.startswith("exit:") and int(run.verdict[5:]) not in command.settled_exits and run.launches:
        # An unsettled exit (70: a rejected transaction, 8: the planner command failed…) is explained by the
        # agent's own last words: its stderr tail goes with the verdict into every report.
        tail = _tail(run.launches[-1].stderr)
        detail = f"{detail}; stderr: {' | '.join(tail)}" if tail else detail
    result = CaseResult(cid, scenario.name, [str(f) for f in run.schedule], "", run.verdict, detail,
                        launches=len(run.launches), kills=len(run.kills), requests=len(requests),
                        bugs=list(target.bugs), target=target.label())
    evidence = None
    if run.verdict in _NO_ORACLE:
        result.status = run.verdict
    else:
        if early is not None and early.still_true(requests, witness, workspace, probe_results):
            judgement = early.with_probes(probe_results)
        else:
            judgement = _judge(cid, scenario, target, run, launcher, command, first, changes, environ, requests,
                               witness, workspace, baseline, None, probe_results)
        evidence = judgement.evidence
        # Only the invariants the target declares apply (a target that cannot meet one says so in its file).
        result.invariants = [r for r in judgement.results if r.name in target.invariants]
        settled = run.verdict.startswith("exit:") and int(run.verdict[5:]) in command.settled_exits
        result.status = PASS if settled and all(r.ok for r in result.invariants) else FAIL
        if result.status == FAIL and target.kind == "contract" and diagnose:
            # The engineer's first question: which recovery decision went wrong (failing cases only: a few).
            found = first_divergence(target, evidence)
            result.divergence = found.to_json() if found is not None else None
    clock.append(("oracle", time.monotonic()))
    kept = keep == "all" or (keep == "failing" and not result.ok)
    scratch.settle(case_dir, kept)  # a kept case is a plain directory under its name from here on
    if kept:
        result.case_dir = str(case_dir)
        (case_dir / "result.json").write_text(json.dumps(result.to_json(), indent=1, ensure_ascii=False))
        (case_dir / "caserun.json").write_text(json.dumps(run.to_json(), indent=1, ensure_ascii=False))
        write_log(case_dir / "requests.jsonl", requests, append=False)
        if evidence is not None and evidence.final.reduction is not None:
            # The final SessionState (transcript, active context, operation) for a person reading the case.
            (case_dir / "final-state.json").write_text(json.dumps(evidence.final.reduction, indent=1,
                                                                  ensure_ascii=False))
    clock.append(("teardown", time.monotonic()))
    start = t0
    for phase, at in clock:
        result.timings[phase] = at - start
        start = at
    result.timings["probes"] -= overlapped  # the oracle's work during the probe is oracle time
    result.timings["oracle"] += overlapped
    result.timings["oracle-hidden"] = hidden
    result.timings = {phase: round(seconds, 4) for phase, seconds in result.timings.items()}
    result.duration = round(time.monotonic() - t0, 3)
    return result, evidence, run


def hidden_behind(start: float, done: float, probe_ended: float | None) -> float:
    """Seconds of oracle work (from ``start`` to ``done``) that a convergence probe's life covered: up to the probe's
    end (``done`` when it still ran then); none when its end is not known (exec: Popen reaps when asked)."""
    return 0.0 if probe_ended is None else max(0.0, min(done, probe_ended) - start)


def fresh_dir(parent: Path, name: str, make=Path.mkdir) -> Path:
    """A new directory ``parent/name`` (``name-2``, ``-3``… when taken): never reuse or delete another run's case.
    ``make`` creates it or raises FileExistsError (chaos.scratch.make: a link to a scratch directory)."""
    for n in range(1, 10_000):
        path = parent / (name if n == 1 else f"{name}-{n}")
        path.parent.mkdir(parents=True, exist_ok=True)  # a name may hold a sub-directory ("<slug>.shrink/01")
        try:
            make(path)
            return path
        except FileExistsError:
            continue
    raise SupervisorError(f"no free case directory name under {parent} for {name}")


def _tail(path: str | None, lines: int = 6) -> list[str]:
    """The last ``lines`` non-blank lines of a launch's stderr file (empty when it is gone)."""
    if not path:
        return []
    text = _read(path).decode("utf-8", errors="replace")
    return [line.strip() for line in text.splitlines() if line.strip()][-lines:]


def _read(path: str | Path) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError:
        return b""  # gone (or never created): the oracle reports what the bytes say


@dataclass
class _StartedProbe:
    """A convergence probe on its way: its process, and the log as it found it."""

    proc: AgentProcess
    session: str
    before: bytes  # the log as the probe found it
    out: Path


def _start_probe(launcher: Launcher, argv: list[str], session: str, env: Mapping[str, str], case_dir: Path,
                 index: int) -> _StartedProbe:
    """Start one more ``resume`` after the case (no checkpoint channel): it must change nothing."""
    before = _read(session)
    out, err = case_dir / "launches" / f"probe-{index + 1}.stdout", case_dir / "launches" / f"probe-{index + 1}.stderr"
    penv = {k: v for k, v in {**os.environ, **env}.items() if k != "CHAOS_CONTROL"}
    return _StartedProbe(launcher.launch(argv, penv, case_dir, out, err), session, before, out)


def _finish_probe(probe: _StartedProbe, limits: Limits) -> oracle.Probe:
    """Wait for a started probe (killed at the silence limit); what it did to the log."""
    proc = probe.proc
    try:
        code = proc.wait(limits.silence_seconds)
    finally:
        if proc.poll() is None:
            proc.kill_session(limits.kill_seconds)
        # No process of the case outlives it: the probe's session (e.g. a bash tool it started) goes too.
        kill_processes(lambda: session_members(proc.session_id), limits.kill_seconds)
        proc.close()
    after = _read(probe.session)
    return oracle.Probe(code, probe.out.read_text(errors="replace"), oracle.sha(probe.before), oracle.sha(after),
                        len(probe.before), len(after))


@dataclass
class Judgement:
    """The oracle's evidence and its results over it."""

    evidence: oracle.Evidence
    results: list[oracle.InvariantResult]

    def still_true(self, requests: Sequence, witness: Path, workspace: Path, probes: Sequence[oracle.Probe]) -> bool:
        """True when the probes changed nothing this judgement read: the log (each probe's before == after, and
        the first probe found the bytes judged), the requests (recorded in order, never removed: the count
        tells), the witness and the expected files."""
        ev = self.evidence
        return (bool(probes) and all(p.sha_before == p.sha_after for p in probes)
                and oracle.sha(ev.final_log) == probes[0].sha_before and len(requests) == len(ev.requests)
                and _witness_lines(witness) == ev.witness and _files(ev.files, workspace) == ev.files)

    def with_probes(self, probes) -> "Judgement":
        """This judgement completed with the probes' results: ``converges`` is the only invariant that reads them.
        (The evidence is updated in place: its cached parse of the log stays valid, the log did not change.)"""
        self.evidence.probes = list(probes)
        self.results = [oracle.CHECKS[r.name](self.evidence) if r.name == "converges" else r for r in self.results]
        return self


def _files(names, workspace: Path) -> dict[str, str | None]:
    """The text of each named workspace file, None when absent."""
    out: dict[str, str | None] = {}
    for rel in names:
        path = workspace / rel
        try:  # is_file first: never open a FIFO or a device an agent left there (a read could block)
            out[rel] = path.read_text(encoding="utf-8", errors="replace") if path.is_file() else None
        except OSError:  # removed between the two calls (a probe still running)
            out[rel] = None
    return out


def _witness_lines(witness: Path) -> list[str]:
    """The witness file's lines (every external effect a tool reported), empty when there is none."""
    return witness.read_text(errors="replace").splitlines() if witness.is_file() else []


def _judge(cid, scenario, target: Target, run: CaseRun, launcher: RestartLauncher, command: AgentCommand,
           first: Settings, changes: Settings, environ: Mapping[str, str], requests, witness: Path, workspace: Path,
           baseline, final: bytes | None, probes=()) -> Judgement:
    """Collect the evidence (``final``: the log's bytes, else read now) and run every invariant over it."""
    currents = (current_configuration(target, first, environ),
                current_configuration(target, first.then(changes), environ))
    evidence = collect_evidence(cid, scenario, run, launcher, currents, requests, witness, workspace, list(probes),
                                baseline, final=final)
    return Judgement(evidence, oracle.check(evidence))


def collect_evidence(cid: str, scenario, run: CaseRun, launcher: RestartLauncher, currents, requests, witness: Path,
                     workspace: Path, probes, baseline, *, final: bytes | None = None) -> oracle.Evidence:
    """Turn what the supervisor, the server and the files say into the oracle's ``Evidence`` (``final``: the log's
    bytes when the caller already read them)."""
    if final is None:
        final = Path(run.session).read_bytes() if run.session and os.path.isfile(run.session) else b""
    kills = []
    for f in run.kills:
        snapshot = Path(f.snapshot).read_bytes() if f.snapshot and os.path.isfile(f.snapshot) else b""
        kills.append(oracle.Kill(f.fault, f.launch, snapshot, f.action, f.barrier))
    launches = []
    for l in run.launches:
        restart = launcher.restarted(l.pid)
        stdout = Path(l.stdout).read_text(errors="replace") if os.path.isfile(l.stdout) else ""
        launches.append(oracle.LaunchInfo(l.index, l.role, l.returncode, l.killed_by is not None, stdout,
                                          currents[1] if restart else currents[0], restart))
    expected = set(scenario.expect.files)
    for rule in scenario.expect.when:
        expected |= set(rule.files or {})
    files = _files(sorted(expected), workspace)
    if isinstance(baseline, Baseline):
        baseline = baseline.facts
    ev = oracle.Evidence(
        case_id=cid,
        schedule=tuple(run.schedule),
        final_log=final,
        kills=kills,
        fired=[oracle.Fired(f.action, f.fault, f.launch, f.barrier) for f in run.faults],
        acknowledged=[oracle.Ack(a.tx, a.launch, a.seq_first, a.seq_last, a.start, a.end, a.synced_offset,
                                 a.file_size, a.data) for a in run.acknowledged],
        barriers=[oracle.Barrier(b.index, b.launch, b.phase, list(b.facts), b.seq_first, b.seq_last, b.offset,
                                 b.synced_offset, b.file_size) for b in run.barriers],
        launches=launches,
        requests=[r.to_json() for r in requests],
        witness=_witness_lines(witness),
        probes=list(probes),
        expect=scenario.expect,
        prompts=[r.prompt for r in scenario.runs],
        files=files,
        restart_changes=scenario.restart.changes_configuration,
        baseline=baseline,
    )
    return ev
