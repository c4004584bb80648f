"""Campaign workers: a small process pool, and the jobs a worker runs (baseline, recovery discovery, one case).

Why processes and not threads: the harness's own work per case (barrier bookkeeping, the oracle re-reading logs)
is Python, and a nightly machine has many cores; one worker process per core, each with its *own* scripted model
server (its own port, ``chaos.case.shared_server``) and its own zygote (``chaos.case.shared_launcher``), keeps
them independent. Workers are *spawned* (exec'd), never forked from the campaign process, whose threads may hold
locks.

Modelled on pytest-xdist's worker controller: the pool hands out one job at a time per worker; a worker that dies
while running job X (OOM kill, a harness bug that segfaults) is not an exception in the campaign — it becomes an
``error`` record for X ("worker died while running X") and a fresh worker takes its place.

If the campaign process itself is SIGKILLed, nothing of it may live on. Each worker asks the kernel for
``STOP_SIGNAL`` when the campaign dies (``PR_SET_PDEATHSIG``; the campaign is its direct parent); on it the worker
SIGKILLs every agent session it exec'd and exits at once. Its zygote gets its own stop signal when the worker dies, sweeps every
session it forked (and, as a child subreaper, every orphan they left) and exits; forked agents get SIGKILL when the
zygote dies. So a SIGKILL of the campaign ends the whole tree, a slow bash tool included, in milliseconds.

A case job (``run_case_job``) is the whole life of a case: run it; on failure re-run it once (a failure that does
not reproduce is ``flaky``, reported separately); shrink a reproduced failure while every invariant both runs
failed still fails; and return one JSON-ready record for the journal. Which planner rule fired on each restart is
computed here too, from the reference planner on the log as the restart found it (coverage).

Not here: which cases to run, journaling, results (``chaos.campaign``).
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import multiprocessing
import os
import shutil
import signal
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any

from chaos.records import WORKER_DIED
from chaos.report import case_record
from chaos.status import ERROR, EXPECTED, FAIL, FLAKY, NOT_REACHED, PASS

_PR_SET_PDEATHSIG = 1


# --------------------------------------------------------------------------------------------------------------
# The worker's context: what every job needs, built once per worker process


@dataclass
class WorkerConfig:
    """Picklable description of a worker's world (plain data only: paths, dicts)."""

    scenarios: dict[str, str]  # scenario name -> file path
    target: Any  # chaos.target.Target (frozen, picklable)
    cache: str  # directory of the kill-point cache (baseline facts per scenario)
    cache_keys: dict[str, str]  # scenario name -> cache file stem
    work: str  # where case directories go
    limits: dict[str, float] = field(default_factory=dict)
    shrink: bool = True
    shrink_calls: int = 30
    keep: str = "failing"
    # `chaos corpus build`: a directory where every executed case's kill prefixes are recorded (chaos.corpus).
    corpus: str | None = None


class Context:
    """Per-process state: loaded scenarios, provider-fault variants and their baselines (memoized)."""

    def __init__(self, config: WorkerConfig):
        from chaos.supervisor import Limits

        self.config = config
        self.target = config.target
        self.limits = Limits(**config.limits) if config.limits else Limits()
        self.work = Path(config.work)
        self._scenarios: dict[str, Any] = {}
        self._variants: dict[tuple[str, tuple[str, ...]], tuple[Any, Any]] = {}
        self._facts: dict[str, dict[str, Any]] = {}

    def scenario(self, name: str):
        if name not in self._scenarios:
            from chaos.scenario import load_scenario

            self._scenarios[name] = load_scenario(self.config.scenarios[name])
        return self._scenarios[name]

    def probe(self, name: str) -> bool:
        """Whether scenario ``name`` runs a Python program under the probe (chaos.scenario.ProbeScenario)."""
        from chaos.target import is_probe

        return is_probe(self.scenario(name))

    def vocabulary(self, name: str):
        """The fact names of scenario ``name``'s target (None: the session contract's)."""
        return self.scenario(name).the_target.probe.vocabulary if self.probe(name) else None

    def cached_facts(self, name: str) -> dict[str, Any]:
        """The ``facts`` discovery cached for scenario ``name`` before any case (read once per process)."""
        if name not in self._facts:
            path = Path(self.config.cache) / f"{self.config.cache_keys[name]}.json"
            self._facts[name] = json.loads(path.read_text(encoding="utf-8"))["facts"]
        return self._facts[name]

    def probe_baseline(self, name: str):
        """The crash-free result of probe scenario ``name``."""
        return self.cached_facts(name)["result"]

    def baseline_facts(self, name: str):
        """The crash-free baseline facts of contract scenario ``name``."""
        from chaos import oracle

        return oracle.BaselineFacts.from_json(self.cached_facts(name))

    def variant(self, name: str, llm: Sequence[Any]):
        """(scenario, baseline facts) for ``name`` with provider faults ``llm`` injected (memoized per process)."""
        key = (name, tuple(str(f) for f in llm))
        if key not in self._variants:
            if not llm:
                self._variants[key] = (self.scenario(name), self.baseline_facts(name))
            else:
                self._variants[key] = provider_variant(self, self.scenario(name), llm)
        return self._variants[key]


def provider_variant(ctx: Context, scenario, llm: Sequence[Any]):
    """The scenario with provider faults injected, and its own crash-free baseline.

    A provider fault changes what the crash-free run does (the step fails live), so the scenario's default
    expectation no longer applies. The variant's default outcome is what its own crash-free run with the correct
    agent ends with (differential testing); answer, file and effect expectations are dropped, and the scenario's
    conditional rules (which are about the durable state at the kill) are kept. The baseline is judged again with
    that expectation — by the oracle, on the same evidence, without re-running it.
    """
    from chaos import case, oracle
    from chaos.scenario import Expect, ProviderFault

    runs = list(scenario.runs)
    for f in llm:
        r = f.run - 1
        if r >= len(runs):
            continue
        run = runs[r]
        fault = ProviderFault(kind=f.kind, status=f.status, seconds=0.05 if f.kind == "delay" else None)
        if f.turn == "summary":
            if run.compact is not None:
                runs[r] = run.model_copy(update={"compact": run.compact.model_copy(update={"fault": fault})})
            continue
        turns = list(run.turns)
        if f.turn - 1 < len(turns):
            turns[f.turn - 1] = turns[f.turn - 1].model_copy(update={"fault": fault})
            runs[r] = run.model_copy(update={"turns": turns})
    variant = scenario.model_copy(update={"runs": runs})
    tag = hashlib.sha256("+".join(str(f) for f in llm).encode()).hexdigest()[:10]
    result, evidence, _ = case.execute_case(variant, (), work_dir=ctx.work / "variants",
                                            target=ctx.target.correct(), baseline=None, server=None,
                                            limits=ctx.limits, probes=2, keep="none", name=f"{scenario.name}-{tag}")
    if evidence is None:
        return variant, oracle.BaselineFacts([], {}, {}, False)
    outcome = oracle.final_outcome(evidence, evidence.final.state())
    expect = Expect(outcome=outcome if outcome.split(":")[0] in ("completed", "aborted", "failed", "blocked")
                    else "completed", when=list(scenario.expect.when))
    variant = variant.model_copy(update={"expect": expect})
    evidence.expect = expect
    results = oracle.check(evidence)
    facts = oracle.baseline_facts(evidence, results)
    return variant, facts


# --------------------------------------------------------------------------------------------------------------
# Jobs


def discover_baseline(ctx: Context, name: str, runs: int = 2) -> dict[str, Any]:
    """Run the crash-free baseline ``runs`` times with the correct agent; its transactions, facts, and agreement.

    Determinism check: every run must pass every invariant and all runs must announce the same transactions and
    leave the same normalized log (ids renamed, timestamps ignored); otherwise the scenario's cases are not run.
    """
    from chaos import case, oracle
    from chaos.schedules import Transaction, utf8_cut

    if ctx.probe(name):
        return discover_probe_baseline(ctx, name, runs)
    scenario = ctx.scenario(name)
    seen = []
    for i in range(runs):
        result, evidence, run = case.execute_case(scenario, (), work_dir=ctx.work / "baselines",
                                                  target=ctx.target.correct(), baseline=None, server=None,
                                                  limits=ctx.limits, probes=2, keep="failing",
                                                  name=f"{name}-baseline-{i + 1}")
        facts = (oracle.baseline_facts(evidence, result.invariants) if evidence is not None
                 else oracle.BaselineFacts([], {}, {}, False))
        facts.ok = facts.ok and result.ok
        seen.append((result, facts, run))
    result, facts, run = seen[0]
    data = {a.tx: a.data for a in run.acknowledged}
    starts = {b.tx: b.offset for b in run.barriers if b.phase == "before-write"}
    transactions = []
    for b in run.barriers:
        if b.phase != "after-write":
            continue
        raw = data.get(b.tx, b"")
        transactions.append(Transaction(b.tx, tuple(b.facts), tuple(b.ordinals.items()),
                                        b.offset - starts.get(b.tx, b.offset), utf8_cut(raw)).to_json())
    problems = []
    for i, (r, f, _) in enumerate(seen, start=1):
        if not r.ok:
            failed = ", ".join(x.name for x in r.failed) or r.verdict
            problems.append(f"baseline run {i} did not pass ({failed}): {r.detail}")
    layouts = [[(b.phase, tuple(b.facts)) for b in r.barriers] for _, _, r in seen]
    if any(layout != layouts[0] for layout in layouts[1:]):
        problems.append("baseline runs disagree: they announced different transactions")
    elif any(_comparable(f.normalized) != _comparable(facts.normalized) for _, f, _ in seen[1:]):
        problems.append("baseline runs disagree: their final logs differ (ids renamed, timestamps ignored)")
    return {
        "transactions": transactions,
        "facts": facts.to_json(),
        "ok": not problems,
        "problems": problems,
        "durations": [r.duration for r, _, _ in seen],
        "failures": [_failure_json(x) for r, _, _ in seen for x in r.failed],
        "case_dirs": [r.case_dir for r, _, _ in seen if r.case_dir],
    }


def discover_probe_baseline(ctx: Context, name: str, runs: int = 2) -> dict[str, Any]:
    """A probe scenario's crash-free runs: its kill points (the first run's barriers), its result, and agreement.

    Every run must hold every property and end with the same result (``matches-baseline`` compares with it). Runs
    may announce different barriers — a framework that writes from a background thread (LangGraph's "async"
    durability) orders them by timing —: that is said in ``notes``, and the first run's kill points are used (a
    point a case does not reach is reported ``not-reached``, never passed)."""
    from chaos.case import shared_launcher
    from chaos.probecase import run_probe_case
    from chaos.schedules import Transaction

    scenario = ctx.scenario(name)
    target = scenario.the_target
    if not target.probe.python:
        reason = (f"its interpreter environment is not prepared: run `chaos targets prepare {scenario.source}` "
                  f"({len(target.probe.requirements)} pinned requirement{'s' if len(target.probe.requirements) != 1 else ''})")
        return {"ok": False, "skipped": reason, "problems": [reason], "transactions": [], "facts": {}}
    launcher = shared_launcher(target)
    seen = []
    for i in range(runs):
        t0 = time.monotonic()
        case = run_probe_case(target.probe, (), ctx.work / "baselines", name=f"{name}-baseline-{i + 1}",
                              limits=ctx.limits, launcher=launcher, model=scenario if scenario.runs else None)
        seen.append((case, time.monotonic() - t0))
    first = seen[0][0]
    result = first.result
    problems, notes = [], []
    for i, (case, _) in enumerate(seen, start=1):
        if not case.passed:
            first_problem = next(found[0] for found in case.problems.values() if found)
            problems.append(f"baseline run {i} fails {', '.join(case.failed)}: {first_problem}")
    results = [c.result for c, _ in seen]
    if any(r != results[0] for r in results[1:]):
        problems.append(f"baseline runs disagree: their results differ ({results[0]!r} vs {results[1]!r})")
    layouts = [[(b.phase, tuple(b.facts)) for b in c.run.barriers] for c, _ in seen]
    if any(layout != layouts[0] for layout in layouts[1:]):
        notes.append("the crash-free runs announced different barriers (timing-dependent writes); the first run's "
                     "kill points are used")
    transactions = [Transaction(b.tx, tuple(b.facts), tuple(b.ordinals.items())).to_json()
                    for b in first.run.barriers if b.phase == "before-write"]
    if not transactions and not problems:
        problems.append("the crash-free run announced no durable write: nothing to kill (are the state paths "
                        "declared? does the program write through sqlite3, os.fsync, os.replace or open?)")
    from chaos.environments import installed

    return {
        "transactions": transactions, "facts": {"result": result}, "ok": not problems, "problems": problems,
        "notes": notes, "environment": installed(target.probe.requirements), "failures": [],
        "durations": [round(d, 3) for _, d in seen],
        "case_dirs": [str(c.run.case_dir and Path(c.run.case_dir).parent) for c, _ in seen],
    }


def execute_probe(ctx: Context, spec, *, name: str | None = None, keep: str | None = None) -> Outcome:
    """Run one case of a probe scenario and classify it (``chaos.probecase.classify``: the probe properties
    instead of the oracle)."""
    from chaos.case import CaseResult, shared_launcher
    from chaos.probecase import classify, run_probe_case

    scenario = ctx.scenario(spec.scenario)
    target = scenario.the_target
    t0 = time.monotonic()
    case = run_probe_case(target.probe, spec.faults, ctx.work, baseline=ctx.probe_baseline(spec.scenario),
                          limits=ctx.limits, name=name or "case", launcher=shared_launcher(target),
                          model=scenario if scenario.runs else None)
    run = case.run
    status, failures = classify(case)
    case_dir = str(Path(run.case_dir).parent) if run.case_dir else None
    if case_dir and status == PASS and (keep or ctx.config.keep) != "all":
        shutil.rmtree(case_dir, ignore_errors=True)
        case_dir = None
    result = CaseResult(spec.id, spec.scenario, list(spec.schedule), status, run.verdict or "", run.detail or "",
                        duration=round(time.monotonic() - t0, 3), case_dir=case_dir, launches=len(run.launches),
                        kills=len(run.kills), requests=case.requests, target=target.label())
    return Outcome(status, failures, result, case.evidence, run)


# Digests computed over entry ids (SPEC §8: a compaction's sourceDigest covers sourceEntryId) differ between two
# runs of the same work because the ids (UUIDv7) do; the ids themselves are renamed by normalize_log, these are not.
_ID_DERIVED = frozenset({"sourceDigest"})


def _comparable(value: Any) -> Any:
    """A normalized log with id-derived digests masked, for run-to-run agreement."""
    if isinstance(value, list):
        return [_comparable(v) for v in value]
    if isinstance(value, dict):
        return {k: "<id-derived>" if k in _ID_DERIVED else _comparable(v) for k, v in value.items()}
    return value


def discover_recovery(ctx: Context, name: str, first: str) -> dict[str, Any]:
    """Run ``first`` once and report the durable state the restart found and the transactions recovery announced."""
    from chaos import case, oracle
    from chaos.schedules import Recovery, Transaction

    scenario = ctx.scenario(name)
    result, evidence, run = case.execute_case(scenario, (first,), work_dir=ctx.work / "discovery",
                                              target=ctx.target, baseline=None, server=None, limits=ctx.limits,
                                              probes=0, keep="none", name=None, diagnose=False)
    if not run.faults:
        return {"first": first, "reached": False}
    fired = run.faults[0].barrier
    snapshot = evidence.kills[0].snapshot if evidence is not None and evidence.kills else b""
    # Ids and timestamps differ run to run; the durable *state* is the log with them normalized.
    normalized = json.dumps(_comparable(oracle.normalize_log(snapshot)), sort_keys=True)
    state = "sha256:" + hashlib.sha256(normalized.encode()).hexdigest()
    transactions = [Transaction(b.tx, tuple(b.facts), tuple(b.ordinals.items()), 0, None)
                    for b in run.barriers[fired + 1:] if b.phase == "before-write"]
    return {"first": first, "reached": True, "recovery": Recovery(state, tuple(transactions)).to_json()}


def _failure_json(inv) -> dict[str, Any]:
    findings = [f.text() for f in inv.findings]
    return {"invariant": inv.name, "message": findings[0] if findings else "failed",
            "evidence": [f.to_json() for f in inv.findings]}


@dataclass
class Outcome:
    """One execution of a case spec, reduced to what the campaign needs."""

    status: str
    failures: list[dict[str, Any]]
    result: Any  # chaos.case.CaseResult
    evidence: Any
    run: Any  # chaos.records.CaseRun

    @property
    def invariants(self) -> list[str]:
        return list(dict.fromkeys(f["invariant"] for f in self.failures))


def execute(ctx: Context, spec, *, name: str | None = None, keep: str | None = None, probes: int = 2,
            target=None, diagnose: bool = True) -> Outcome:
    """Run one case spec (kill faults + provider faults) and classify it (``target``: another launcher's variant of
    the worker's target, for the launcher check)."""
    from chaos import case, records

    if ctx.probe(spec.scenario):
        return execute_probe(ctx, spec, name=name, keep=keep)
    scenario, facts = ctx.variant(spec.scenario, spec.llm)
    result, evidence, run = case.execute_case(scenario, spec.schedule, work_dir=ctx.work, target=target or ctx.target,
                                              baseline=facts, server=None, limits=ctx.limits, probes=probes,
                                              keep=keep or ctx.config.keep, name=name, diagnose=diagnose)
    if ctx.config.corpus and evidence is not None:
        from chaos.corpus import record_evidence

        record_evidence(Path(ctx.config.corpus), evidence)
    failures: list[dict[str, Any]] = []
    if result.status == case.PASS:
        status = PASS
    elif result.status == case.FAIL:
        status = FAIL
        failures = [_failure_json(x) for x in result.failed]
        if not failures:  # every invariant held but the agent did not settle (crash, exit 70, ...)
            failures = [{"invariant": "agent-exit", "message": f"{result.verdict}: {result.detail}",
                         "evidence": {"verdict": result.verdict}}]
    elif result.status in (records.HANG, records.PROTOCOL_ERROR, records.CRASH):
        status = FAIL
        failures = [{"invariant": result.status, "message": result.detail, "evidence": {"verdict": result.verdict}}]
    elif result.status in (records.NOT_REACHED, records.NOT_APPLICABLE):
        status = NOT_REACHED
    else:
        status = ERROR
    return Outcome(status, failures, result, evidence, run)


def canonical_name(facts: Sequence[str], ordinals: Mapping[str, int], phase: str) -> str:
    """The canonical kill-point text of a barrier (the naming rule of ``chaos.schedules.Transaction``)."""
    from chaos.schedules import Transaction

    tx = Transaction(0, tuple(facts), tuple(ordinals.items()))
    return str(tx.point(phase))


def reached(run) -> list[dict[str, Any]]:
    """Where each fired fault landed: its text, the canonical name of that barrier, its phase and facts."""
    out = []
    for f in run.faults:
        b = run.barriers[f.barrier]
        out.append({"fault": f.fault, "action": f.action, "point": canonical_name(b.facts, b.ordinals, b.phase),
                    "phase": b.phase, "facts": list(b.facts), "tx": b.tx})
    return out


def restart_rules(evidence) -> list[str]:
    """The SPEC §14.4 rule the reference planner picks on the log each restart found (one per SIGKILL)."""
    if evidence is None:
        return []
    from agent.session.errors import CorruptionError
    from agent.session.planner import plan_rule
    from agent.session.reducer import reduce_session

    rules = []
    for kill in evidence.kills:
        after = [l for l in evidence.launches if l.index > kill.launch and l.role in ("resume", "dresume", "again",
                                                                                       "abort", "step")]
        current = after[0].current if after else None
        if current is None:
            continue
        try:
            rules.append(plan_rule(reduce_session(kill.snapshot), current))
        except (CorruptionError, ValueError, KeyError):  # PlannerInputError is a ValueError
            rules.append("unplannable")  # the prefix does not reduce: log-reduces reports it with evidence
    return rules


def failure_keys(failures: Sequence[Mapping], spec, landed: Sequence[Mapping]) -> list[list[str]]:
    """Dedup keys ``[invariant, fault action, fact name]``, fault = the spec's last fault (the one that matters)."""
    if spec.faults:
        last = spec.faults[-1]
        action = last.action
        where = next((r for r in reversed(landed) if r["fault"] == str(last)), None)
        fact = where["point"].split("@")[0] if where else (last.point.fact or f"tx:{last.point.tx}")
    elif spec.llm:
        action, fact = "llm", spec.llm[-1].kind
    else:
        action, fact = "none", "none"
    return [list(k) for k in dict.fromkeys((f["invariant"], action, fact) for f in failures)]


def run_case_job(ctx: Context, case_id: str, origin: str, index: int) -> dict[str, Any]:
    """The whole life of one case: run, re-run on failure, shrink; returns the journal record."""
    from chaos.case import case_slug
    from chaos.schedules import spec_from_id

    scenario_name = case_id.partition("::")[0]
    spec = spec_from_id(case_id, origin=origin, index=index, vocabulary=ctx.vocabulary(scenario_name))
    slug = case_slug(case_id)
    first = execute(ctx, spec, name=slug)
    record = _record(ctx, spec, first)
    if first.status != FAIL:
        return record
    scenario = ctx.scenario(spec.scenario)
    if ctx.probe(spec.scenario) and scenario.expected(first.failures):
        # A confirmed finding pinned as a regression scenario: reported with its reason, not counted. No re-run:
        # failing again or not, the case is an expected failure (`chaos run` re-runs it on demand). A failure the
        # finding does not name (a hang, another property) goes on as any failure.
        record["status"] = EXPECTED
        record["detail"] = f"expected failure: {' '.join(scenario.expect_failure.split())}"
        return case_record(**record)
    again = execute(ctx, spec, name=f"{slug}.rerun")
    # Both evidences: a flaky verdict names what the first run saw and what the re-run saw instead.
    record["rerun"] = {"status": again.status, "invariants": again.invariants,
                       "case_dir": _rel(ctx, again.result.case_dir), "failures": again.failures}
    common = [i for i in first.invariants if i in again.invariants]
    if not common:
        record["status"] = FLAKY
        return case_record(**record)
    if ctx.config.shrink and not ctx.probe(spec.scenario):
        record.update(_shrink(ctx, spec, common, slug))
        if record["minimal_id"] == spec.id:  # already minimal: the first run's directory is the minimal case's
            record["minimal_case_dir"], record["minimal_reached"] = record["case_dir"], record["reached"]
            record["shrink"]["invariants"] = first.invariants
    minimal = spec_from_id(record["minimal_id"], origin="shrunk") if record.get("minimal_id") else spec
    # The minimal schedule stands for the invariants its own run failed (every one the re-run confirmed, since the
    # shrink kept only such candidates); one the first run alone failed keeps the schedule that failed it.
    shrunk = set((record.get("shrink") or {}).get("invariants") or first.invariants)
    record["keys"] = [*failure_keys([f for f in record["failures"] if f["invariant"] in shrunk], minimal,
                                    record.get("minimal_reached") or record["reached"]),
                      *failure_keys([f for f in record["failures"] if f["invariant"] not in shrunk], spec,
                                    record["reached"])]
    return case_record(**record)  # checked again: the re-run and shrinking filled their fields


def launcher_check_job(ctx: Context, case_id: str, origin: str, index: int) -> dict[str, Any]:
    """Run one case under the zygote and under exec; the differences in verdict and transcript (ids renamed)."""
    import dataclasses

    from chaos import oracle
    from chaos.schedules import spec_from_id

    spec = spec_from_id(case_id, origin=origin, index=index)
    seen = {}
    for launcher in ("zygote", "exec"):
        outcome = execute(ctx, spec, name=f"{launcher}-{spec.index}", keep="none",
                          target=dataclasses.replace(ctx.target, launcher=launcher))
        final = outcome.evidence.final if outcome.evidence is not None else b""
        seen[launcher] = {
            "status": str(outcome.status), "invariants": outcome.invariants, "verdict": outcome.result.verdict,
            "transcript": _comparable(oracle.normalize_log(final)), "rules": restart_rules(outcome.evidence),
            "duration": outcome.result.duration,
        }
    a, b = seen["zygote"], seen["exec"]
    differences = [f"{key}: zygote {a[key]!r}, exec {b[key]!r}" for key in ("status", "invariants", "verdict")
                   if a[key] != b[key]]
    if a["transcript"] != b["transcript"]:
        differences.append("transcript: the final logs differ (ids renamed, timestamps ignored)")
    return {"id": spec.id, "scenario": spec.scenario, "action": spec.faults[0].action if spec.faults else "none",
            "differences": differences, "rules": sorted(set(a["rules"]) | set(b["rules"])),
            "durations": {"zygote": a["duration"], "exec": b["duration"]}, "status": a["status"]}


def _shrink(ctx: Context, spec, invariants: list[str], slug: str) -> dict[str, Any]:
    """Shrink ``spec`` while a candidate still fails every one of ``invariants`` (those the first run and its
    re-run both failed): the minimal schedule then stands for each failure group the case is counted in, and its
    bundle reproduces each of them (shrinking on one alone could drop the others: a group would name a minimal
    schedule that never failed its invariant)."""
    from chaos.shrink import shrink

    shrink_dir = f"{slug}.shrink"
    kept: dict[str, Outcome] = {}

    def still_fails(candidate) -> bool:
        # No first divergence per candidate: the record carries the first run's, and the bundle falls back to it.
        outcome = execute(ctx, candidate, name=f"{shrink_dir}-{len(kept) + 1:02d}", diagnose=False)
        kept[candidate.id] = outcome
        return all(invariant in outcome.invariants for invariant in invariants)

    # The campaign's --budget ends at config.deadline (chaos.campaign.CampaignWorkerConfig); a shrink cut short
    # there keeps the best schedule so far ("exhausted" in the record). Other configs (the plugin) have none.
    result = shrink(spec, still_fails, max_calls=ctx.config.shrink_calls,
                    deadline=getattr(ctx.config, "deadline", None))
    minimal = kept.get(result.case.id)
    for cid, outcome in kept.items():  # keep the minimal case's directory only
        if cid != result.case.id and outcome.result.case_dir:
            shutil.rmtree(outcome.result.case_dir, ignore_errors=True)
    out: dict[str, Any] = {
        "minimal": list(result.case.schedule) + [str(f) for f in result.case.llm],
        "minimal_id": result.case.id,
        # invariant: the first the candidates had to fail (each of ``invariants`` too); invariants (below): what the
        # minimal run itself failed.
        "shrink": {"invariant": invariants[0], "calls": result.calls, "steps": result.steps,
                   "exhausted": result.exhausted},
    }
    if minimal is not None:
        out["minimal_case_dir"] = _rel(ctx, minimal.result.case_dir)
        out["minimal_reached"] = reached(minimal.run)
        out["shrink"]["invariants"] = minimal.invariants  # what the minimal run itself failed
    return out


def _rel(ctx: Context, path: str | None) -> str | None:
    if not path:
        return None
    try:
        return str(Path(path).relative_to(ctx.work.parent))
    except ValueError:
        return path


def _record(ctx: Context, spec, outcome: Outcome) -> dict[str, Any]:
    result, run = outcome.result, outcome.run
    landed = reached(run)
    restarts = sum(1 for l in run.launches if l.role in ("resume", "dresume"))
    probe = ctx.probe(spec.scenario)  # a probe case: no planner rules, no agent bug switches
    return case_record(**{
        "id": spec.id,
        "scenario": spec.scenario,
        "schedule": list(spec.schedule) + [str(f) for f in spec.llm],
        "origin": spec.origin,
        "index": spec.index,
        "first": spec.first,
        "status": outcome.status,
        "verdict": result.verdict,
        "detail": result.detail,
        "failures": outcome.failures,
        "duration": result.duration,
        "kills": result.kills,
        "restarts": restarts,
        "launches": result.launches,
        "requests": result.requests,
        "reached": landed,
        "fired": len(run.faults) == len(spec.faults),
        "rules": [] if probe else restart_rules(outcome.evidence),
        "case_dir": _rel(ctx, result.case_dir),
        "bugs": [] if probe else list(ctx.target.bugs),
        "target": result.target,
        "divergence": result.divergence,
        "tags": list(ctx.scenario(spec.scenario).tags),
        "minimal": None,
        "keys": failure_keys(outcome.failures, spec, landed),
        "run": run.to_json() if outcome.status == FAIL else None,
    })


# --------------------------------------------------------------------------------------------------------------
# The worker process and the pool


# The signal a worker gets when the campaign process dies (PR_SET_PDEATHSIG) or when the pool stops it mid-case:
# not SIGKILL, so that it can sweep what it started first; not SIGTERM or SIGINT, which a CI runner may send to the
# whole process group and which the campaign itself handles.
STOP_SIGNAL = signal.SIGUSR2
CONFIGURE = "configure"  # the first item of a worker message that is not a job


def _stop_now(signum, frame) -> None:  # noqa: ARG001 - signal API
    """Sweep every agent session this worker started by exec (a zygote sweeps its own when this process is gone)
    and exit at once: nothing of a dead campaign may go on launching or running agents."""
    from chaos import scratch
    from chaos.process import sweep_launched

    sweep_launched()
    scratch.drop()  # the cases it was running are not results (a --resume runs them again): no RAM kept for them
    os._exit(1)


def _die_with_parent(parent: int) -> None:
    signal.signal(STOP_SIGNAL, _stop_now)
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, STOP_SIGNAL)
    except (OSError, AttributeError):  # not Linux: the campaign's own cleanup is all there is
        pass
    if os.getppid() != parent:  # the campaign died before the request was in place: the signal will never come
        _stop_now(STOP_SIGNAL, None)


def _ignore(signum, frame) -> None:  # noqa: ARG001 - signal API
    """A worker's SIGINT, SIGTERM or SIGHUP: nothing (see worker_main)."""


def worker_main(config: WorkerConfig, conn: Connection, parent: int, loops: int = 1) -> None:
    """Worker loop: receive ``(job_id, kind, args)``, send ``(job_id, "ok"|"error", payload)``; ``None`` stops it;
    ``(CONFIGURE, config, loops)`` starts the next campaign's world (no answer). ``loops``: how many workers the
    pool runs (see chaos.case.set_loops)."""
    from chaos.case import set_loops

    _die_with_parent(parent)
    set_loops(loops)
    # Ctrl-C, a CI runner's SIGTERM to the process group and a hang-up (the terminal closed) are the campaign's to
    # handle: it stops on them (chaos.cli.Stopped) and closes its pool, so each worker sweeps what it launched. Each
    # gets a handler that does nothing, not SIG_IGN: an ignored signal stays ignored across exec (POSIX), and a target
    # a worker execs would start deaf to the ``int`` fault's SIGINT; a caught one is reset to the default by exec, so
    # an exec'd target starts with them at their defaults.
    signal.signal(signal.SIGINT, _ignore)
    signal.signal(signal.SIGTERM, _ignore)
    signal.signal(signal.SIGHUP, _ignore)
    ctx = Context(config)
    jobs: dict[str, Callable[..., dict[str, Any]]] = {
        "baseline": lambda name: discover_baseline(ctx, name),
        "recovery": lambda name, first: discover_recovery(ctx, name, first),
        "case": lambda cid, origin, index: run_case_job(ctx, cid, origin, index),
        "launcher-check": lambda cid, origin, index: launcher_check_job(ctx, cid, origin, index),
    }
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return
        if message is None:
            return
        if message[0] == CONFIGURE:
            # Another campaign on the same pool (chaos mutants: one per switch): its scenarios, target, cache and
            # case directory replace the last one's. What stays is this process's scripted server and zygotes
            # (chaos.case): a target's switches reach its agents through each launch's environment, never
            # through what the zygote imported (agent.bugs reads AGENT_BUGS when a run starts).
            _, config, loops = message
            set_loops(loops)
            ctx = Context(config)
            continue
        job_id, kind, args = message
        try:
            reply = (job_id, "ok", jobs[kind](*args))
        except Exception:  # a harness defect: report it as this job's error, keep the worker alive
            reply = (job_id, "error", traceback.format_exc(limit=8))
        try:
            conn.send(reply)
        except OSError:  # the campaign is gone (an interrupt it did not wait out): nobody to tell, nothing to print
            return
        except Exception:  # the payload cannot be sent (pickled): this job's error, as any harness defect
            try:
                conn.send((job_id, "error", traceback.format_exc(limit=8)))
            except OSError:
                return


@dataclass
class _Worker:
    process: Any
    conn: Connection
    job: tuple | None = None
    generation: int = 0  # of the pool's config this worker has


class WorkerPool:
    """``size`` worker processes; ``submit`` queues jobs, ``results`` yields ``(job, status, payload)`` as they end.

    A worker that dies mid-job yields ``(job, WORKER_DIED, message)`` for that job and is replaced. ``reconfigure``
    hands an idle pool to the next campaign: its workers (their interpreters, scripted servers and zygotes: about
    0.6 s a worker to start) serve one campaign after another.
    """

    def __init__(self, config: WorkerConfig | None, size: int):
        self.config = config  # None: given by ``reconfigure`` before the first job
        self.size = max(1, size)
        # spawn (exec), not fork or forkserver: the worker's parent is then the campaign process itself, so the
        # parent-death signal fires when the campaign dies (a forkserver in between kept every worker alive, with
        # its cases and agents, after a SIGKILL of the campaign), and no lock of the campaign's threads is inherited.
        self.ctx = multiprocessing.get_context("spawn")
        self.workers: list[_Worker] = []
        self.queue: list[tuple] = []
        self._next = 0
        self._generation = 0  # of the config: a worker gets the current one before its next job

    def reconfigure(self, config: WorkerConfig, size: int) -> WorkerPool:
        """Serve the next campaign: ``config`` for every job from now on, at most ``size`` busy workers (workers
        beyond it stay idle, started). Only between campaigns: a job still queued or running would meet a world
        it was not planned in."""
        if self.pending:
            raise RuntimeError("WorkerPool.reconfigure with jobs queued or running")
        self.config, self.size, self._generation = config, max(1, size), self._generation + 1
        for w in list(self.workers):
            if not self._configure(w):  # now, not at its next job: a worker that died while idle is found early
                self._drop(w)
        return self

    def _configure(self, w: _Worker) -> bool:
        """Give ``w`` the current config unless it has it; False when it died meanwhile (idle: nothing of it to
        report, the caller drops it and a new one takes its place)."""
        if w.generation == self._generation:
            return True
        try:
            w.conn.send((CONFIGURE, self.config, self.size))  # a pipe keeps order: before any later job
        except OSError:
            return False
        w.generation = self._generation
        return True

    def _drop(self, w: _Worker) -> None:
        self.workers.remove(w)
        w.process.join(1)
        w.conn.close()

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _spawn(self) -> _Worker:
        if self.config is None:
            raise RuntimeError("WorkerPool: a job before any config (reconfigure first)")
        parent, child = self.ctx.Pipe()
        process = self.ctx.Process(target=worker_main, args=(self.config, child, os.getpid(), self.size),
                                   daemon=True)
        process.start()
        child.close()
        worker = _Worker(process, parent, generation=self._generation)
        self.workers.append(worker)
        return worker

    def submit(self, kind: str, *args: Any) -> tuple:
        job = (self._next, kind, args)
        self._next += 1
        self.queue.append(job)
        return job

    @property
    def busy(self) -> int:
        return sum(1 for w in self.workers if w.job is not None)

    @property
    def pending(self) -> int:
        return len(self.queue) + self.busy

    def _dispatch(self) -> None:
        while self.queue:
            if self.busy >= self.size:
                return
            idle = next((w for w in self.workers if w.job is None), None)
            if idle is None:
                idle = self._spawn()  # with the current config
            elif not (idle.process.is_alive() and self._configure(idle)):
                # Died while idle (only a busy worker is watched, by next_result): dropped, and the job goes to
                # another worker or a new one.
                self._drop(idle)
                continue
            job = self.queue.pop(0)
            idle.job = job
            try:
                idle.conn.send(job)
            except OSError:  # it died just now: next_result sees it gone and reports the job, as any death mid-job
                pass

    def next_result(self, timeout: float | None = None) -> tuple[tuple, str, Any] | None:
        """Wait for one finished job (None on timeout or when nothing is pending)."""
        self._dispatch()
        active = [w for w in self.workers if w.job is not None]
        if not active:
            return None
        handles = [w.conn for w in active] + [w.process.sentinel for w in active]
        ready = wait(handles, timeout)
        for w in active:
            if w.conn in ready:
                try:
                    job_id, status, payload = w.conn.recv()
                except (EOFError, OSError):
                    return self._died(w)
                job, w.job = w.job, None
                self._dispatch()
                return job, status, payload
        for w in active:
            if w.process.sentinel in ready:
                return self._died(w)
        return None

    def _died(self, w: _Worker) -> tuple[tuple, str, Any]:
        job = w.job
        w.process.join(1)
        code = w.process.exitcode
        self.workers.remove(w)
        w.conn.close()
        self._dispatch()
        return job, WORKER_DIED, f"worker process died (exit {code}) while running {job[1]} {job[2]}"

    def cancel_queued(self) -> list[tuple]:
        """Drop jobs not started yet (fail-fast, budget) and return them."""
        dropped, self.queue = self.queue, []
        return dropped

    def close(self, timeout: float = 5.0) -> None:
        """Stop every worker: a polite ``None``, then SIGKILL for any that does not exit (e.g. mid-case)."""
        for w in self.workers:
            if w.job is None:
                try:
                    w.conn.send(None)
                except OSError:
                    pass
        for w in self.workers:
            if w.job is not None:
                # A worker mid-case would finish it first; its case is not journaled, so nothing is lost by stopping
                # it now (resume runs the case again). STOP_SIGNAL makes it sweep its agents before it exits.
                try:
                    os.kill(w.process.pid, STOP_SIGNAL)
                except OSError:
                    pass
            w.process.join(timeout)
            if w.process.is_alive():
                w.process.kill()
                w.process.join(timeout)
            w.conn.close()
        self.workers.clear()
