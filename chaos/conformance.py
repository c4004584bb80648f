"""``chaos conformance``: check another implementation's reducer and planner against crash-prefix corpora.

What it is for. A team with its own session runtime (another language, another process) proves that it reduces and
plans exactly like the reference (``agent.session``) on every log a real crash campaign produced, through the two
inspection commands of the stable protocol (``python3 -m agent reduce|plan`` print those shapes; docs/conformance.md):

- ``CMD reduce FILE`` → stdout ``{"ok":true,"state":…}`` exit 0, or ``{"ok":false,"error":{code,line,seq?}}`` exit 1;
- ``CMD plan FILE CURRENT.json`` → stdout the RecoveryPlan (SPEC §14.2) exit 0.

Three checks per corpus entry (``chaos.corpus``): the reduction deep-equals the reference's (the contract corpus's
equality rules: member order is irrelevant, array order matters, integers stay integers; an error must match its
``code``, ``line`` and ``seq``); the plan deep-equals the reference plan for each restart configuration; and
**closed-loop convergence** (SPEC §14.5): from the prefix (its torn tail repaired, as the store's open does), the
implementation's plans are executed through the reference materialiser (``agent.session.materialize``) and validated
by the reference reducer exactly as the store's commit validates them, with *scripted* outcomes — every model step
answers ``stop`` with a fixed text, every compaction a fixed summary, every tool a fixed successful output — and the
implementation is asked again on the grown log, until the operation is idle or the plan is ``blocked``. A plan the
store rejects, a plan the materialiser cannot execute, a plan returned again after its facts were appended or a
state seen before (a cycle), or no end within the bound fails, with the prefix, the step and the plan.

Failures are grouped by the reference rule (SPEC §14.4 id) and by a *divergence signature*: a short text that
describes both plans relative to the state (``describe_divergence``), free of IDs so equal defects group together.

Pure parts (comparison, descriptions, the closed loop given a plan callback, grouping) are functions over data; the
runner (``run_conformance``) calls the implementation as a real subprocess per prefix, with a timeout, from a small
thread pool. It imports only ``agent.session`` of the agent (the rule of the house for ``chaos``).
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import tempfile
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from chaos.corpus import Corpus, PlanCheck, Prefix
from chaos.divergence import describe_divergence, describe_plan, entry_kinds, telling_line

DEFAULT_TIMEOUT = 30.0
DEFAULT_BOUND = 64  # plans per closed loop; SPEC §14.5 bounds a step at 2k+3 plans, scripted answers end the run
PLAN_TYPES = ("finish", "startStep", "startTool", "appendSynthetic", "closeAttempt", "blocked")
# Scripted outcomes of the closed loop (documented in docs/conformance.md): the run always ends after one answer.
SCRIPTED_ANSWER = "Scripted final answer (chaos conformance closed loop)."
SCRIPTED_SUMMARY = "Scripted summary (chaos conformance closed loop)."
SCRIPTED_TOOL_OUTPUT = "scripted tool output (chaos conformance closed loop)"

REDUCE, PLAN, LOOP = "reduce", "plan", "closed-loop"


class ConformanceError(Exception):
    """A usage problem (no implementation command, an executable that does not exist); one line, exit 2."""


# --------------------------------------------------------------------------------------------------------------
# JSON equality with the contract corpus's rules


def json_equal(expected: Any, actual: Any) -> bool:
    """Deep equality of parsed JSON: member order irrelevant, array order relevant, ``null`` ≠ absent, a boolean is
    never a number, and where the expected value is an integer the actual one must be an integer too."""
    return first_difference(expected, actual) is None


def first_difference(expected: Any, actual: Any, path: str = "") -> str | None:
    """``None`` when equal (``json_equal``), else ``PATH: expected X, got Y`` for the first difference found."""
    here = path or "(top)"
    if isinstance(expected, bool) or isinstance(actual, bool):
        if type(expected) is not type(actual) or expected != actual:
            return f"{here}: expected {_clip(expected)}, got {_clip(actual)}"
        return None
    if isinstance(expected, (int, float)) and isinstance(actual, (int, float)):
        # "Integers compare as integers": 1.0 where 1 is expected is a difference; 1 where 1.0 is, is not.
        if (isinstance(expected, int) and not isinstance(actual, int)) or expected != actual:
            return f"{here}: expected {_clip(expected)}, got {_clip(actual)}"
        return None
    if isinstance(expected, dict) and isinstance(actual, dict):
        for key in expected:
            if key not in actual:
                return f"{path}.{key}: missing (expected {_clip(expected[key])})" if path else f"{key}: missing"
        for key in actual:
            if key not in expected:
                return f"{path + '.' if path else ''}{key}: unexpected member ({_clip(actual[key])})"
        for key in expected:
            diff = first_difference(expected[key], actual[key], f"{path}.{key}" if path else key)
            if diff:
                return diff
        return None
    if isinstance(expected, list) and isinstance(actual, list):
        for i, (e, a) in enumerate(zip(expected, actual)):
            diff = first_difference(e, a, f"{path}[{i}]")
            if diff:
                return diff
        if len(expected) != len(actual):
            return f"{here}: expected {len(expected)} items, got {len(actual)}"
        return None
    if type(expected) is not type(actual) or expected != actual:
        return f"{here}: expected {_clip(expected)}, got {_clip(actual)}"
    return None


def _clip(value: Any, n: int = 80) -> str:
    text = json.dumps(value, ensure_ascii=False, sort_keys=True) if not isinstance(value, str) else json.dumps(value)
    return text if len(text) <= n else text[: n - 1] + "…"


def _generic_path(diff: str) -> str:
    """The path of a ``first_difference`` text with array indices dropped, for grouping (``transcript[].content``)."""
    import re

    return re.sub(r"\[\d+\]", "[]", diff.split(":", 1)[0])


def reduce_problem(expected: Mapping[str, Any], actual: Any) -> tuple[str, str] | None:
    """How a parsed ``reduce`` output disagrees with the expected one: (signature, detail), or None.

    An expected error matches on ``code`` and ``line``, and on ``seq`` exactly when the expected error has one (the
    implementation must not report a ``seq`` the reference does not)."""
    if not isinstance(actual, dict) or not isinstance(actual.get("ok"), bool):
        return "reduce: output is not {ok, state|error}", f"got {_clip(actual)}"
    if expected.get("ok") is True:
        if actual["ok"] is not True:
            return ("reduce: rejects a log the reference reduces",
                    f"implementation error {_clip(actual.get('error'))}")
        diff = first_difference(expected.get("state"), actual.get("state"), "state")
        if diff:
            return f"reduce: state differs at {_generic_path(diff)}", diff
        return None
    want = expected.get("error") or {}
    if actual["ok"] is not False:
        return (f"reduce: accepts a log the reference rejects ({want.get('code')})",
                f"expected error {_clip(want)}")
    got = actual.get("error")
    if not isinstance(got, dict):
        return "reduce: error is not an object", f"got {_clip(got)}"
    for member in ("code", "line"):
        if not json_equal(want.get(member), got.get(member)):
            return (f"reduce: error {member} differs (reference {want.get('code')})",
                    f"expected {_clip(want)}, got {_clip(got)}")
    if ("seq" in want) != ("seq" in got) or ("seq" in want and not json_equal(want["seq"], got["seq"])):
        return (f"reduce: error seq differs (reference {want.get('code')})",
                f"expected {_clip(want)}, got {_clip(got)}")
    return None


def plan_shape_problem(value: Any) -> str | None:
    """None when ``value`` looks like a RecoveryPlan (an object with a known ``type``), else why not. The members
    are judged by the comparison and by the materialiser, not here."""
    if not isinstance(value, dict):
        return f"not a JSON object: {_clip(value, 40)}"
    if value.get("type") not in PLAN_TYPES:
        return f"unknown plan type {_clip(value.get('type'), 40)}"
    return None


# --------------------------------------------------------------------------------------------------------------
# Closed-loop convergence (SPEC §14.5): pure, given a function that asks the implementation for the next plan


@dataclass
class LoopResult:
    """How a closed loop ended: ``pass`` (idle or blocked), ``fail`` or ``skipped``; the steps it took."""

    status: str
    end: str  # "idle", "blocked <reason>", or what went wrong
    steps: int
    signature: str = ""  # for failures: ID-free, for grouping
    plan: Any = None  # the plan of the failing step
    step: int | None = None  # the failing step (0 = the plan for the prefix itself)
    trace: list[str] = field(default_factory=list)  # one description per executed plan


def scripted_outcome(plan: Mapping[str, Any]) -> dict[str, Any] | None:
    """The scripted outcome for a plan that consults the model or runs a tool (None for the others)."""
    from agent.session.materialize import (
        assistant_answer,
        compaction_summary,
        tool_result,
    )

    if plan.get("type") == "startStep":
        if plan.get("stepKind") == "compaction":
            return compaction_summary(SCRIPTED_SUMMARY)
        return assistant_answer({"role": "assistant", "content": SCRIPTED_ANSWER}, "stop")
    if plan.get("type") == "startTool":
        return tool_result(SCRIPTED_TOOL_OUTPUT)
    return None


class _MemoryStore:
    """The store's commit (SPEC §13.3 steps 2–4, 8) in memory: complete the facts, serialize them as the store does,
    parse the exact bytes strictly and stage them in the reference reducer; rejected → ``CorruptionError``."""

    _encode = json.JSONEncoder(ensure_ascii=False, allow_nan=False, sort_keys=True, separators=(",", ":")).encode

    def __init__(self, data: bytes):
        from agent.session.framing import committed_lines, parse_line
        from agent.session.reducer import Reducer

        lines, repaired = committed_lines(data)
        self.reducer = Reducer()
        self.reducer.apply_header(parse_line(lines[0], 1), 1)
        for number in range(2, len(lines) + 1):
            self.reducer.apply(parse_line(lines[number - 1], number), number)
        self.log = bytearray(data[:repaired])  # the open's repair: a torn tail is cut before anything is appended

    def state(self):
        return self.reducer.export(len(self.log))

    def commit(self, facts: list[dict]) -> None:
        from agent.session.errors import CorruptionError
        from agent.session.framing import parse_line
        from agent.session.ids import allocate_id

        reducer = self.reducer
        seq, line, now = reducer.next_seq, reducer.next_line, time.time_ns() // 1_000_000
        completed = []
        for i, fact in enumerate(facts):
            if isinstance(fact, dict):
                fact = dict(fact, seq=seq + i, timestamp=now)
                if fact.get("id") is None:
                    fact["id"] = allocate_id()
            completed.append(fact)
        try:
            # One fact is written as an object, several (or none: the reducer says EMPTY_TRANSACTION) as an array.
            text = self._encode(completed[0] if len(completed) == 1 else completed)
            data = text.encode("utf-8") + b"\n"
        except (ValueError, TypeError, RecursionError):
            raise CorruptionError("MALFORMED_JSON", line) from None
        reducer.adopt(reducer.stage(parse_line(text, line), line))
        self.log += data


def snapshot_for(data: bytes, digest: str) -> dict | None:
    """A configurationSnapshot with ``digest`` recorded in the log (a ``stepAttempt``), for corpora whose
    configurations carry no snapshot (the contract's planner fixtures); None when the log has none."""
    for raw in data.split(b"\n")[1:]:
        try:
            value = json.loads(raw)
        except (ValueError, RecursionError):  # RecursionError: a line nested deeper than json parses
            continue
        for fact in value if isinstance(value, list) else [value]:
            record = fact.get("record") if isinstance(fact, dict) else None
            if isinstance(record, dict) and record.get("type") == "stepAttempt" \
                    and record.get("configurationDigest") == digest:
                return record.get("configurationSnapshot")
    return None


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def closed_loop(data: bytes, current: Mapping[str, Any], snapshot: Mapping[str, Any] | None, first_plan: Any,
                ask: Callable[[bytes], tuple[Any, str | None]], *, bound: int = DEFAULT_BOUND) -> LoopResult:
    """Execute the implementation's plans from the prefix ``data`` until idle or blocked (SPEC §14.5).

    ``first_plan`` is the implementation's plan for ``data`` itself; ``ask(log)`` returns (plan, None) or (None,
    why) for a grown log. Plans go through the reference materialiser with scripted outcomes and are validated
    like the store's commit. Pure apart from what ``ask`` does.
    """
    from agent.session.errors import CorruptionError
    from agent.session.ids import allocate_id
    from agent.session.materialize import MaterializeError, transactions_for_plan

    try:
        store = _MemoryStore(data)
    except CorruptionError as exc:
        return LoopResult("skipped", f"the prefix does not reduce ({exc.code})", 0)
    if snapshot is None:
        snapshot = snapshot_for(bytes(store.log), current.get("configurationDigest"))
    configured = {**current, "snapshot": snapshot} if snapshot is not None else dict(current)
    state = store.state()
    seen_states = {_state_digest(state): 0}
    seen_plans: dict[str, int] = {}
    trace: list[str] = []
    plan, why = first_plan, None
    for step in range(bound + 1):
        if state["operation"]["kind"] == "idle":
            return LoopResult("pass", "idle", step, trace=trace)
        if step == bound:
            break

        def fail(end: str, signature: str, step: int = step, plan: Any = plan) -> LoopResult:
            return LoopResult("fail", end, step, f"closed loop: {signature}", plan, step, trace)

        if plan is None:
            return fail(f"no plan at step {step}: {why}", f"implementation failed ({why})")
        problem = plan_shape_problem(plan)
        entries = entry_kinds(bytes(store.log))
        described = describe_plan(state, plan, entries=entries)
        if problem:
            return fail(f"step {step}: {problem}", f"not a plan ({problem.split(':')[0]})")
        if plan["type"] == "blocked":
            trace.append(described)
            return LoopResult("pass", f"blocked {plan.get('reason')}", step, trace=trace)
        key = _canonical(plan)
        if key in seen_plans:
            return fail(f"cycle: step {step} returned the plan of step {seen_plans[key]} again, after its facts "
                        f"were appended", f"cycle, {described} returned again after it was executed")
        seen_plans[key] = step
        if plan["type"] == "startStep" and snapshot is None:
            return LoopResult("skipped", "no configurationSnapshot behind the configuration digest", step,
                              trace=trace)
        try:
            transactions = transactions_for_plan(state, plan, configured, allocate_id,
                                                 outcome=scripted_outcome(plan))
        except (MaterializeError, KeyError, IndexError, TypeError, ValueError, AttributeError) as exc:
            return fail(f"step {step}: the reference materialiser cannot execute it: {type(exc).__name__}: {exc}",
                        f"{described} cannot be executed by the reference materialiser")
        for n, facts in enumerate(transactions, 1):
            try:
                store.commit(facts)
            except CorruptionError as exc:
                where = f"code {exc.code}, line {exc.line}" + (f", seq {exc.seq}" if exc.seq is not None else "")
                return fail(f"step {step}: the reference store rejected transaction {n}/{len(transactions)} "
                            f"({where})", f"{described} rejected by the reference store ({exc.code})")
        trace.append(described)
        state = store.state()
        digest = _state_digest(state)
        if digest in seen_states:
            return fail(f"cycle: the state after step {step} is the state of step {seen_states[digest]}",
                        f"cycle, {described} leaves the state unchanged")
        seen_states[digest] = step + 1
        if state["operation"]["kind"] == "idle":
            return LoopResult("pass", "idle", step + 1, trace=trace)
        plan, why = ask(bytes(store.log))
    return LoopResult("fail", f"no idle or blocked state within {bound} plans", bound,
                      f"closed loop: no idle or blocked state within {bound} plans", plan, bound, trace)


def _state_digest(state: Mapping[str, Any]) -> str:
    from agent.session.digests import canonical_json

    try:
        return hashlib.sha256(canonical_json(dict(state))).hexdigest()
    except ValueError:
        return hashlib.sha256(_canonical(dict(state)).encode("utf-8", "surrogatepass")).hexdigest()


# --------------------------------------------------------------------------------------------------------------
# Results and grouping


@dataclass
class Failure:
    """One failed check: which corpus entry, which check, the reference rule, the signature and the details."""

    kind: str  # reduce | plan | closed-loop
    corpus: str
    prefix: str  # the prefix key (content address, or fixtures/<name>)
    origin: str
    rule: str  # the reference rule of the check ("reduce" for reduce checks)
    signature: str
    detail: str
    configuration: str | None = None
    step: int | None = None  # closed loop: the failing step (0 = the prefix's own plan)
    plan: Any = None  # the implementation's plan (plan and closed-loop failures)
    expected: Any = None  # the reference plan (plan failures)

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}


@dataclass
class Tally:
    """Per corpus: what was checked and what agreed, and the planner rules the checked entries reach."""

    name: str
    path: str
    kind: str
    prefixes: int = 0
    reduce_checked: int = 0
    reduce_agree: int = 0
    plans_checked: int = 0
    plans_agree: int = 0
    loops_checked: int = 0
    loops_pass: int = 0
    loops_skipped: int = 0
    rules: list[str] = field(default_factory=list)
    rules_missing: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["rules_reached"] = f"{len(self.rules)}/{len(self.rules) + len(self.rules_missing)}"
        return out


@dataclass
class Report:
    """The result of a conformance run; ``to_json`` is the ``--json`` file."""

    impl: list[str]
    tallies: list[Tally]
    failures: list[Failure]
    duration: float = 0.0
    stopped: bool = False  # --fail-fast stopped dispatching after a failure
    options: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.failures

    def by_rule(self) -> dict[str, dict[str, Any]]:
        """Failures per reference rule (``reduce`` for reduce checks), with the signatures seen under it."""
        return group_by_rule(self.failures)

    def by_signature(self) -> dict[str, dict[str, Any]]:
        """Failures per divergence signature, with the rules and a few example origins."""
        return group_by_signature(self.failures)

    def to_json(self) -> dict[str, Any]:
        return {"impl": self.impl, "ok": self.ok, "duration": round(self.duration, 3), "stopped": self.stopped,
                "options": self.options, "corpora": [t.to_json() for t in self.tallies],
                "failures": [f.to_json() for f in self.failures], "byRule": self.by_rule(),
                "bySignature": self.by_signature()}


def _rule_key(rule: str) -> tuple:
    from chaos.campaign import PLANNER_RULES

    return (0, PLANNER_RULES.index(rule), "") if rule in PLANNER_RULES else (1, 0, rule)


def group_by_rule(failures: Iterable[Failure]) -> dict[str, dict[str, Any]]:
    """``{rule: {"count": n, "kinds": {kind: n}, "signatures": {signature: n}}}`` in SPEC order. Pure."""
    groups: dict[str, dict[str, Any]] = {}
    for f in failures:
        g = groups.setdefault(f.rule, {"count": 0, "kinds": Counter(), "signatures": Counter()})
        g["count"] += 1
        g["kinds"][f.kind] += 1
        g["signatures"][f.signature] += 1
    return {rule: {"count": g["count"], "kinds": dict(g["kinds"]), "signatures": dict(g["signatures"].most_common())}
            for rule, g in sorted(groups.items(), key=lambda kv: _rule_key(kv[0]))}


def group_by_signature(failures: Iterable[Failure], examples: int = 3) -> dict[str, dict[str, Any]]:
    """``{signature: {"count", "kind", "rules", "examples"}}``, most frequent first. Pure."""
    groups: dict[str, dict[str, Any]] = {}
    for f in failures:
        g = groups.setdefault(f.signature, {"count": 0, "kind": f.kind, "rules": [], "examples": []})
        g["count"] += 1
        if f.rule not in g["rules"]:
            g["rules"].append(f.rule)
        if len(g["examples"]) < examples:
            g["examples"].append({"corpus": f.corpus, "prefix": f.prefix, "origin": f.origin, "detail": f.detail,
                                  **({"step": f.step} if f.step is not None else {})})
    return dict(sorted(groups.items(), key=lambda kv: (-kv[1]["count"], kv[0])))


# --------------------------------------------------------------------------------------------------------------
# The implementation as a subprocess


@dataclass
class Invocation:
    """One run of the implementation command."""

    returncode: int | None  # None: timed out (killed)
    stdout: bytes
    stderr: str
    seconds: float


class Implementation:
    """``CMD reduce FILE`` / ``CMD plan FILE CURRENT.json`` as real subprocesses with a timeout."""

    def __init__(self, argv: Sequence[str], *, timeout: float = DEFAULT_TIMEOUT, env: Mapping[str, str] | None = None):
        if not argv:
            raise ConformanceError("--impl: empty command")
        import shutil

        exe = argv[0]
        # A directory is "executable" (searchable) to os.access: isfile, or Popen fails later with EACCES.
        if shutil.which(exe) is None and not (os.sep in exe and os.path.isfile(exe) and os.access(exe, os.X_OK)):
            raise ConformanceError(f"--impl: cannot run {exe!r}: no such executable"
                                   + (" (it is a directory)" if os.path.isdir(exe) else ""))
        self.argv = list(argv)
        self.timeout = timeout
        self.env = dict(os.environ if env is None else env)
        self._live: set[subprocess.Popen] = set()  # invocations running now (pool threads): what stop() kills
        self._lock = threading.Lock()
        self._stopped = False

    def run(self, args: Sequence[str]) -> Invocation:
        t0 = time.monotonic()
        with self._lock:
            if self._stopped:  # the run was stopped (Ctrl-C, SIGTERM): no new process
                return Invocation(None, b"", "stopped", 0.0)
            # Its own session, so a timeout kills a wrapper script's children too.
            proc = subprocess.Popen([*self.argv, *args], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, env=self.env, start_new_session=True)
            self._live.add(proc)
        try:
            out, err = proc.communicate(timeout=self.timeout)
            code: int | None = proc.returncode
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            out, err = proc.communicate()
            code = None
        finally:
            with self._lock:
                self._live.discard(proc)
        return Invocation(code, out, err.decode("utf-8", "replace"), time.monotonic() - t0)

    def stop(self) -> None:
        """Start nothing more and SIGKILL the process group of every invocation running now (their threads then
        see them end at once)."""
        with self._lock:
            self._stopped = True
            for proc in self._live:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass

    def reduce(self, path: Path) -> Invocation:
        return self.run(["reduce", str(path)])

    def plan(self, path: Path, current: Path) -> Invocation:
        return self.run(["plan", str(path), str(current)])


def parse_output(inv: Invocation, expected_exits: Sequence[int], timeout: float) -> tuple[Any, str | None]:
    """The JSON value an invocation printed, or (None, a short ID-free reason) — timeout, exit code, not JSON."""
    if inv.returncode is None:
        return None, f"timeout after {timeout:g}s"
    last = [telling_line(inv.stderr)]
    try:
        value = json.loads(inv.stdout.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        if inv.returncode not in expected_exits:
            return None, f"exit {inv.returncode}" + (f": {last[0][:160]}" if last[0] else "")
        return None, "stdout is not one JSON document"
    if inv.returncode not in expected_exits:
        return value, f"exit {inv.returncode} (expected {' or '.join(map(str, expected_exits))})"
    return value, None


# --------------------------------------------------------------------------------------------------------------
# The runner


@dataclass
class Options:
    """What to check and how."""

    timeout: float = DEFAULT_TIMEOUT
    jobs: int = 0  # 0: os.cpu_count()
    reduce: bool = True
    closed_loop: bool = True
    bound: int = DEFAULT_BOUND
    fail_fast: bool = False


def run_conformance(impl: Implementation, corpora: Sequence[Corpus], options: Options | None = None, *,
                    progress: Callable[[int, int, int], None] | None = None) -> Report:
    """Check ``impl`` against every corpus: one job per prefix (its reduce check, then each of its plan checks and
    closed loops), run by a small thread pool; returns the report."""
    from chaos.campaign import PLANNER_RULES

    options = options or Options()
    t0 = time.monotonic()
    jobs: list[tuple[Corpus, Prefix, list[PlanCheck]]] = []
    for corpus in corpora:
        by_prefix: dict[str, list[PlanCheck]] = defaultdict(list)
        for check in corpus.checks:
            by_prefix[check.prefix].append(check)
        for key, prefix in corpus.prefixes.items():
            jobs.append((corpus, prefix, by_prefix.get(key, [])))
    tallies = {c.name: Tally(c.name, c.path, c.kind, prefixes=len(c.prefixes),
                             rules=[r for r in PLANNER_RULES if r in c.rules()]
                             + sorted(r for r in c.rules() if r not in PLANNER_RULES),
                             rules_missing=[r for r in PLANNER_RULES if r not in c.rules()]) for c in corpora}
    if jobs:
        _preflight(impl, jobs, options)
    failures: list[Failure] = []
    lock = threading.Lock()
    stop = threading.Event()
    done = [0]

    with tempfile.TemporaryDirectory(prefix="chaos-conformance-") as tmp:
        def work(n: int, job: tuple[Corpus, Prefix, list[PlanCheck]]) -> None:
            if stop.is_set():
                return
            corpus, prefix, checks = job
            counts, found = _check_prefix(impl, corpus, prefix, checks, Path(tmp) / str(n), options)
            with lock:
                tally = tallies[corpus.name]
                for name, value in counts.items():
                    setattr(tally, name, getattr(tally, name) + value)
                failures.extend(found)
                done[0] += 1
                if found and options.fail_fast:
                    stop.set()
                if progress is not None:
                    progress(done[0], len(jobs), len(failures))

        workers = options.jobs or os.cpu_count() or 2
        with ThreadPoolExecutor(max_workers=workers) as pool:
            try:
                for future in [pool.submit(work, n, job) for n, job in enumerate(jobs)]:
                    future.result()
            except BaseException:
                # Ctrl-C or SIGTERM (chaos.cli.Stopped) in this thread: the pool's exit would otherwise wait for
                # every queued check. Queued ones are dropped, running ones killed; the pool then ends in a moment.
                stop.set()
                pool.shutdown(wait=False, cancel_futures=True)
                impl.stop()
                raise
    failures.sort(key=lambda f: (_rule_key(f.rule), f.signature, f.corpus, f.origin))
    return Report(list(impl.argv), list(tallies.values()), failures, time.monotonic() - t0, stop.is_set(),
                  {"timeout": options.timeout, "reduce": options.reduce, "closedLoop": options.closed_loop,
                   "bound": options.bound, "failFast": options.fail_fast})


def _preflight(impl: Implementation, jobs: Sequence[tuple[Corpus, Prefix, list[PlanCheck]]],
               options: Options) -> None:
    """Ask the implementation about the first and the last prefix once before the corpus: a command that answers
    nothing at all to either (a non-zero exit with empty stdout: a missing script, an interpreter that cannot load
    it) would otherwise fail every check, one process start each, for a minute or more. Two different inputs failing
    the same way is the command, not its answer to one log (that one is judged like any other). ``ConformanceError``
    (a usage error) then; any answer, right or wrong, lets the run go on."""
    asked = []
    with tempfile.TemporaryDirectory(prefix="chaos-conformance-") as tmp:
        for n, index in enumerate(dict.fromkeys((0, len(jobs) - 1))):
            _, prefix, checks = jobs[index]
            if not options.reduce and not checks:
                continue
            log = Path(tmp) / f"prefix-{n}.jsonl"
            log.write_bytes(prefix.data)
            if options.reduce:
                inv, question = impl.reduce(log), "reduce FILE"
            else:
                current = Path(tmp) / f"current-{n}.json"
                current.write_text(json.dumps(checks[0].current), encoding="utf-8")
                inv, question = impl.plan(log, current), "plan FILE CURRENT.json"
            if inv.returncode in (None, 0) or inv.stdout.strip():
                return  # an answer: the run is judged
            asked.append((question, inv.returncode, telling_line(inv.stderr)))
    if asked and len({(code, why) for _, code, why in asked}) == 1:
        question, code, why = asked[0]
        raise ConformanceError(f"--impl: `{' '.join(impl.argv)} {question}` exited {code} and printed nothing"
                               f" on stdout{f': {why}' if why else ''} (is the command right?)")


def _check_prefix(impl: Implementation, corpus: Corpus, prefix: Prefix, checks: list[PlanCheck], work: Path,
                  options: Options) -> tuple[Counter, list[Failure]]:
    """The reduce check of one prefix, then each plan check and its closed loop. Runs in a pool thread."""
    from agent.session.errors import CorruptionError
    from agent.session.reducer import reduce_session

    work.mkdir(parents=True, exist_ok=True)
    log = work / "prefix.jsonl"
    log.write_bytes(prefix.data)
    counts: Counter = Counter()
    failures: list[Failure] = []

    def failure(kind: str, rule: str, signature: str, detail: str, **more: Any) -> None:
        failures.append(Failure(kind, corpus.name, prefix.key, prefix.origin if kind == REDUCE else more.pop("origin"),
                                rule, signature, detail, **more))

    if options.reduce:
        counts["reduce_checked"] += 1
        value, why = parse_output(impl.reduce(log), (0, 1), impl.timeout)
        problem = (f"reduce: {why.split(':')[0]}", why) if why and value is None else \
            reduce_problem(prefix.expected, value)
        if problem is None and why:  # right JSON, wrong exit code
            problem = (f"reduce: {why.split(' (')[0]} with ok:{str(value.get('ok')).lower()}", why)
        if problem is None:
            counts["reduce_agree"] += 1
        else:
            failure(REDUCE, REDUCE, *problem)
    try:
        reference = reduce_session(prefix.data)
    except CorruptionError:
        return counts, failures  # no plan checks exist for a prefix that does not reduce
    entries = entry_kinds(prefix.data)
    for i, check in enumerate(checks):
        current_path = work / f"current-{i}.json"
        current_path.write_text(json.dumps(check.current), encoding="utf-8")
        counts["plans_checked"] += 1
        plan, why = parse_output(impl.plan(log, current_path), (0,), impl.timeout)
        where = {"origin": check.origin, "configuration": check.configuration}
        if why:
            failure(PLAN, check.rule, f"reference {check.rule}: plan {why.split(':')[0]}", why,
                    plan=plan, expected=check.plan, **where)
            plan = None if plan_shape_problem(plan) else plan
        elif not json_equal(check.plan, plan):
            same_type = isinstance(plan, Mapping) and plan.get("type") == check.plan.get("type")
            detail = first_difference(check.plan, plan) if same_type else f"implementation plan {_clip(plan, 200)}"
            failure(PLAN, check.rule, describe_divergence(reference, check.plan, check.rule, plan, entries=entries),
                    detail or "", plan=plan, expected=check.plan, **where)
        else:
            counts["plans_agree"] += 1
        if not options.closed_loop:
            continue
        step_log = work / f"loop-{i}.jsonl"

        def ask(data: bytes, _current: Path = current_path, _log: Path = step_log) -> tuple[Any, str | None]:
            _log.write_bytes(data)
            value, reason = parse_output(impl.plan(_log, _current), (0,), impl.timeout)
            return (None, reason) if reason else (value, None)

        if plan is None:
            continue  # no plan to start from: the plan failure above says why
        counts["loops_checked"] += 1
        loop = closed_loop(prefix.data, check.current, check.snapshot, plan, ask, bound=options.bound)
        if loop.status == "pass":
            counts["loops_pass"] += 1
        elif loop.status == "skipped":
            counts["loops_skipped"] += 1
        else:
            failure(LOOP, check.rule, loop.signature, loop.end, step=loop.step, plan=loop.plan, **where)
    return counts, failures


# --------------------------------------------------------------------------------------------------------------
# Rendering


def render(report: Report, console: Any, *, limit: int = 20) -> None:
    """The table per corpus, then failures grouped by reference rule and by signature (rich)."""
    from rich.table import Table

    table = Table(title=f"chaos conformance: {' '.join(report.impl)}", title_justify="left")
    for name, justify in (("corpus", "left"), ("prefixes", "right"), ("reduce agree", "right"),
                          ("plans agree", "right"), ("closed loop pass", "right"), ("planner rules", "right"),
                          ("rules not reached", "left")):
        table.add_column(name, justify=justify, overflow="fold")
    for t in report.tallies:
        loop = f"{t.loops_pass}/{t.loops_checked}" + (f" ({t.loops_skipped} skipped)" if t.loops_skipped else "")
        if not report.options.get("closedLoop", True):
            loop = "skipped"
        table.add_row(t.name, str(t.prefixes),
                      f"{t.reduce_agree}/{t.reduce_checked}" if report.options.get("reduce", True) else "skipped",
                      f"{t.plans_agree}/{t.plans_checked}", loop,
                      f"{len(t.rules)}/{len(t.rules) + len(t.rules_missing)} rules",
                      ", ".join(t.rules_missing) or "—")
    console.print(table)
    if report.failures:
        console.print(f"[bold red]{len(report.failures)} failure(s)[/] by reference rule:")
        for rule, g in report.by_rule().items():
            kinds = ", ".join(f"{k} {n}" for k, n in g["kinds"].items())
            console.print(f"  [bold]{rule}[/] ×{g['count']} ({kinds})")
            for signature, n in list(g["signatures"].items())[:5]:
                console.print(f"    {n}× {signature}", markup=False)
        console.print("by divergence signature:")
        for signature, g in list(report.by_signature().items())[:limit]:
            console.print(f"  {g['count']}× [{', '.join(g['rules'])}] {signature}", markup=False)
            for ex in g["examples"][:2]:
                step = f", step {ex['step']}" if "step" in ex else ""
                console.print(f"      e.g. {ex['corpus']}: {ex['origin']} (prefix {ex['prefix'][:16]}{step}): "
                              f"{ex['detail']}", markup=False)
    verdict = "[bold green]PASS[/]" if report.ok else "[bold red]FAIL[/]"
    stopped = " (stopped at the first failure: --fail-fast)" if report.stopped else ""
    console.print(f"{verdict} in {report.duration:.1f}s{stopped}")
