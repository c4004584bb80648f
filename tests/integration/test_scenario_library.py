"""The bundled scenario library: it validates, it contains every fault family the issue asks for, and it reaches
every planner rule of SPEC §14.4, every plan type and every synthetic reason on a restart, with a case that passes.

The reachability part runs one *witness* case per rule on the correct agent (real agent subprocesses, real
SIGKILL), asks the reference planner which rule and plan it picks on the log the restart found — the same definition
``chaos campaign`` uses for its coverage report (``chaos.workers.restart_rules``) — and requires the case to pass
every invariant. The full exhaustive campaign over the library is the nightly / ``chaos campaign`` job; this is the
fast proof that the library can reach each rule at all and that the expectation there is right.
"""

from __future__ import annotations

import json
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest

from chaos.target import is_probe

REPO = Path(__file__).resolve().parents[2]
LIBRARY = REPO / "scenarios"

# rule -> (scenario file, schedule, plan variant, synthetic reasons): a case of the default campaign (an exhaustive
# kill or a pinned schedule) whose last restart the reference planner plans with that rule and that plan.
WITNESSES = {
    "P0": ("plain-answer", "operationFinished@after-sync#1", "finish:idle", ()),
    "P1.1": ("abort-model-call", "int:stepAttempt@after-sync#1+abortRequested@after-sync#1", "closeAttempt", ()),
    "P1.2": ("abort-safe-read", "int:toolStarted@after-sync#1+abortRequested@after-sync#1", "appendSynthetic",
             ("interrupted", "aborted", "aborted")),
    "P1.3": ("abort-model-call", "int:stepAttempt@after-sync#1+stepFailed@after-sync#1", "finish:aborted", ()),
    "P2": ("plain-answer", "runStarted@after-sync#1", "startStep:1", ()),
    "P3.1": ("restart-model-change", "stepAttempt@after-sync#1", "blocked:configuration_changed", ()),
    "P3.2": ("restart-environment-change", "stepAttempt@after-sync#1", "blocked:environment_changed", ()),
    "P3.3": ("plain-answer", "stepAttempt@after-sync#1", "startStep:2", ()),
    "P3.4": ("attempts-exhausted", "stepAttempt@after-sync#1+stepAttempt@after-sync#2", "blocked:attempts_exhausted",
             ()),
    "P3.5": ("provider-500", "stepFailed@after-sync#1", "finish:failed", ()),
    "P4": ("compaction", "compaction@after-sync#1", "finish:compaction", ()),
    "P5.1": ("blank-stop", "assistant@after-sync#1", "finish:failed", ()),
    "P5.2": ("read-then-answer", "assistant@after-sync#2", "finish:normal", ()),
    "P6.1": ("length-no-calls", "assistant@after-sync#1", "finish:failed", ()),
    "P6.2": ("length-with-calls", "assistant@after-sync#1", "appendSynthetic", ("truncated", "truncated")),
    "P6.3": ("length-with-calls", "synthetic@after-sync#1", "finish:truncated", ()),
    "P7.1.1": ("restart-environment-change", "toolStarted@after-sync#1", "blocked:environment_changed", ()),
    "P7.1.2": ("restart-tool-removed", "toolStarted@after-sync#1", "blocked:configuration_changed", ()),
    "P7.1.3.1": ("restart-replay-never", "toolStarted@after-sync#1", "blocked:replay_declaration_changed", ()),
    "P7.1.3.2": ("restart-model-change", "toolStarted@after-sync#1", "blocked:configuration_changed", ()),
    "P7.1.3.3": ("read-then-answer", "toolStarted@after-sync#1", "startTool:replay", ()),
    "P7.1.4": ("bash-deploy", "toolStarted@after-sync#1", "appendSynthetic", ("interrupted",)),
    "P7.2.1": ("unknown-tool", "assistant@after-sync#1", "appendSynthetic", ("unknownTool",)),
    "P7.2.2": ("invalid-arguments", "assistant@after-sync#1", "appendSynthetic", ("invalidArguments",)),
    "P7.2.3": ("restart-tool-removed", "assistant@after-sync#1", "blocked:configuration_changed", ()),
    "P7.2.4": ("read-then-answer", "assistant@after-sync#1", "startTool:start", ()),
    "P7.3": ("read-then-answer", "toolResult@after-sync#1", "startStep:1", ()),
}
# SPEC §14.2 plan variants and §5.6 synthetic reasons the witnesses must show between them.
PLAN_VARIANTS = {
    "finish:idle", "finish:normal", "finish:truncated", "finish:compaction", "finish:aborted", "finish:failed",
    "startStep:1", "startStep:2", "startTool:start", "startTool:replay", "appendSynthetic", "closeAttempt",
    "blocked:configuration_changed", "blocked:environment_changed", "blocked:replay_declaration_changed",
    "blocked:attempts_exhausted",
}
REASONS = {"invalidArguments", "unknownTool", "truncated", "aborted", "interrupted"}


def _scenarios() -> list:
    from chaos.scenario import load_scenarios

    scenarios, problems = load_scenarios([LIBRARY])
    assert problems == []
    # The bundled agent's library: the framework targets (probe scenarios) are tested in test_frameworks.py.
    return [s for s in scenarios if not is_probe(s)]


def test_every_scenario_file_validates():
    """`chaos validate scenarios/` accepts every file of the library (regressions included) and exits 0."""
    proc = subprocess.run([sys.executable, "-m", "chaos.cli", "validate", str(LIBRARY)], capture_output=True,
                          text=True, cwd=REPO)
    files = sorted(LIBRARY.rglob("*.toml"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip() == f"OK: {len(files)} scenario(s) valid"
    assert len(files) >= 30


def test_the_library_contains_every_fault_family_the_issue_names():
    """Provider faults, restart changes, I/O faults at write and fsync, double resume, aborts, and a torn tail and
    a power loss at every kind of transaction all appear in the library."""
    from chaos.faults import parse_fault

    scenarios = _scenarios()
    provider = {(t.fault.kind, t.fault.status) for s in scenarios for r in s.runs for t in r.turns if t.fault}
    assert {("http", 429), ("http", 500), ("timeout", None), ("drop", None), ("malformed", None)} <= provider
    finishes = {(t.effective_finish_reason, bool(t.tool_calls)) for s in scenarios for r in s.runs for t in r.turns}
    assert {("length", True), ("length", False), ("stop", False), ("tool_calls", True)} <= finishes
    restart = [s.restart for s in scenarios]
    assert any(r.model for r in restart) and any(r.environment_identity for r in restart)
    assert any(d.startswith("read=never") for r in restart for d in r.replay)
    assert any(d.startswith("read=safe:") for r in restart for d in r.replay)
    assert all(r.then == "abort" for r in restart if r.changes_configuration)
    faults = [parse_fault(f) for s in scenarios for sch in s.schedules for f in sch.faults]
    io = {(f.errno, f.point.phase) for f in faults if f.action == "ioerror"}
    assert {("ENOSPC", "before-write"), ("EIO", "before-write"), ("ENOSPC", "after-write"),
            ("EIO", "after-write")} <= io
    assert any(f.action == "dresume" for f in faults) and any(f.action == "int" for f in faults)
    kinds = {"runStarted", "stepAttempt", "assistant", "toolStarted", "toolResult", "operationFinished",
             "synthetic", "stepFailed", "abortRequested", "compactionStarted", "compaction"}
    for action in ("torn", "powerloss"):
        assert kinds <= {f.point.fact for f in faults if f.action == action}, action
    assert any(r.compact for s in scenarios for r in s.runs)
    regressions = [s for s in scenarios if s.source and "regressions" in s.source.parts]
    assert any(sch.faults == ["assistant@after-sync#2"] for s in regressions for sch in s.schedules)


@cache
def _context(tmp: str):
    from chaos.target import Target
    from chaos.workers import Context, WorkerConfig

    config = WorkerConfig(scenarios={}, target=Target(), cache=str(Path(tmp) / "cache"), cache_keys={},
                          work=str(Path(tmp) / "work"), shrink=False, keep="failing")
    (Path(tmp) / "cache").mkdir(parents=True, exist_ok=True)
    return Context(config)


def _with_baseline(ctx, name: str) -> None:
    """Register scenario ``name`` with the context and cache its crash-free baseline (once per process)."""
    if name in ctx.config.cache_keys:
        return
    from chaos.case import run_baseline
    from chaos.scenario import load_scenario

    path = LIBRARY / f"{name}.toml"
    baseline = run_baseline(load_scenario(path), work_dir=Path(ctx.config.work) / "baselines", keep="failing")
    assert baseline.ok, [f.text() for r in baseline.result.failed for f in r.findings]
    (Path(ctx.config.cache) / f"{name}.json").write_text(json.dumps({"facts": baseline.facts.to_json()}))
    ctx.config.scenarios[name] = str(path)
    ctx.config.cache_keys[name] = name


def _restart_plans(evidence) -> list[dict]:
    """The reference planner's plan on the log each SIGKILL restart found (as ``chaos.workers.restart_rules``)."""
    from agent.session.planner import plan_recovery
    from agent.session.reducer import reduce_session

    plans = []
    for kill in evidence.kills:
        after = [l for l in evidence.launches if l.index > kill.launch]
        plans.append(plan_recovery(reduce_session(kill.snapshot), after[0].current))
    return plans


def _variant(plan: dict) -> str:
    kind = plan["type"]
    if kind == "finish":
        if plan["outcome"] != "completed":
            return f"finish:{plan['outcome']}"
        return "finish:" + (plan.get("completion") or "compaction") if "finalEntryId" in plan else "finish:idle"
    if kind == "startStep":
        return f"startStep:{plan['attempt']}"
    if kind == "startTool":
        return f"startTool:{plan['mode']}"
    if kind == "blocked":
        return f"blocked:{plan['reason']}"
    return kind


def test_the_witness_table_covers_every_rule_plan_type_and_synthetic_reason():
    """The witness table names every SPEC §14.4 rule once, and its plans cover every plan variant and reason."""
    from chaos.campaign import PLANNER_RULES

    from chaos.faults import parse_schedule
    from chaos.scenario import load_scenario

    assert list(WITNESSES) == list(PLANNER_RULES)
    assert {w[2] for w in WITNESSES.values()} == PLAN_VARIANTS
    assert {r for w in WITNESSES.values() for r in w[3]} == REASONS
    # Each witness is a case of the *default* campaign: a single plain kill at a phase the exhaustive policy
    # enumerates (the witness run proves the baseline reaches it), or one of the scenario's pinned schedules.
    for rule, (name, schedule, _, _) in WITNESSES.items():
        faults = parse_schedule(schedule)
        pinned = [list(s.faults) for s in load_scenario(LIBRARY / f"{name}.toml").schedules]
        exhaustive = len(faults) == 1 and faults[0].action == "kill" and faults[0].point.phase in (
            "before-write", "after-sync")
        assert exhaustive or schedule.split("+") in pinned, rule


@pytest.mark.slow
@pytest.mark.parametrize("rule", list(WITNESSES))
def test_a_witness_case_reaches_each_planner_rule_and_passes(rule, tmp_path_factory):
    """The witness case of each SPEC §14.4 rule passes every invariant, and its last restart is planned by that rule
    with the expected plan (variant and synthetic reasons)."""
    from chaos.schedules import spec_from_id
    from chaos.status import PASS
    from chaos.workers import execute, restart_rules

    name, schedule, variant, reasons = WITNESSES[rule]
    ctx = _context(str(tmp_path_factory.getbasetemp() / "library"))
    _with_baseline(ctx, name)
    outcome = execute(ctx, spec_from_id(f"{name}::{schedule}"))
    assert outcome.status == PASS, outcome.failures or outcome.result.detail
    rules = restart_rules(outcome.evidence)
    assert rules and rules[-1] == rule, rules
    plan = _restart_plans(outcome.evidence)[-1]
    assert _variant(plan) == variant, plan
    assert tuple(r["reason"] for r in plan.get("results", ())) == reasons, plan


@pytest.mark.slow
def test_a_never_tool_interrupted_by_an_earlier_kill_keeps_its_loose_expectation(tmp_path_factory):
    """After a depth-2 schedule (kill with the deploy pending, kill again before the run finishes) the last log shows
    the deploy `interrupted`, not pending; the `interrupted:bash` rule applies and the case passes."""
    from agent.session.reducer import reduce_session
    from chaos.scenario import condition_holds
    from chaos.schedules import spec_from_id
    from chaos.status import PASS
    from chaos.workers import execute

    ctx = _context(str(tmp_path_factory.getbasetemp() / "library"))
    _with_baseline(ctx, "bash-deploy")
    outcome = execute(ctx, spec_from_id("bash-deploy::toolStarted@after-sync#1+operationFinished@before-write#1"))
    assert outcome.status == PASS, outcome.failures or outcome.result.detail
    last = reduce_session(outcome.evidence.kills[-1].snapshot)
    assert condition_holds("interrupted:bash", last) and not condition_holds("pending", last)
    resolved = ctx.scenario("bash-deploy").expect.resolve(last)
    assert resolved.conditions == ("interrupted:bash",) and resolved.effects == {"call_deploy": (0, 1)}
