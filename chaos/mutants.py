"""``chaos mutants``: measure the harness's own detection power against the bundled agent's known-bug switches.

What it is for. A chaos harness that never fails proves nothing. This runs the same campaign once on the correct
agent and once per known-bug switch (``AGENT_BUGS``, see ``agent.bugs``) and reports, per switch, whether the
campaign caught it — the first failing case, the invariant that caught it, the shrunk schedule, and the time from
campaign start to that first detection. Mutation testing for the oracle: each switch is a mutant of the agent, and
a switch that survives its campaign is a hole in the harness (an invariant to add or sharpen, never a switch to
weaken). The correct agent's campaign must have no failure at all: a false alarm is a defect of the harness too.

How. It runs the campaign engine (``chaos.campaign``; only the case order is changed, for ``--fast``): one campaign
directory per agent under ``reports/mutants/<stamp>/`` (``correct/``, then one per switch), sharing one kill-point
cache, so the crash-free baselines (always run with the correct agent) are computed once, and one worker pool (each
campaign reconfigures its workers; their scripted servers and zygotes stay warm). A switch's campaign runs with
``fail_fast``: like a mutant killed by its first failing test, it stops dispatching after the first reproduced
failure (that failure is still re-run and shrunk, and gets its repro bundle). The correct agent's campaign runs to
the end, first; a case it did not pass is never counted as a switch's detection (it says nothing about the switch).

Scenario sets:

- default: the bundled library, as ``chaos campaign`` runs it (exhaustive depth 1 + pinned schedules; scenarios
  tagged ``regression`` contribute their pinned schedules only);
- ``SCENARIOS…``: that subset, the same way;
- ``--fast`` (what CI runs): ``FAST_SCENARIOS`` plus every regression scenario (``scenarios/regressions/<switch>.toml``
  pins one schedule that detects each switch), and a switch's campaign starts with its own regression, on one
  worker (also with explicit ``SCENARIOS…`` that include it).

"Time to first detection" is measured from the moment the switch's campaign starts (before its baseline look-up)
to the moment its first reproduced failure was journaled, i.e. after that failure's re-run and shrinking.

Output: ``MutantsResult`` (``summary.json``: per switch detected, first failing case, invariants, minimal schedule,
seconds to detection, case counts; the correct agent's totals and failures), and a rich table (``table``).

Not here: running cases (``chaos.workers``), judging (``chaos.oracle``), the switches themselves (``agent.bugs``).
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from chaos import campaign as cp
from chaos.errors import ChaosError
from chaos.files import write_atomic
from chaos.status import FAIL, FLAKY, NOT_REACHED, PASS
from chaos.workers import WorkerPool

# The few library scenarios `--fast` campaigns exhaustively: the motivating read-then-answer shape (stale calls), a
# `never` tool with a witnessed effect, and the smallest run. Cheap (40 cases), and between them they reach every
# kind of run transaction; the pinned regressions add the schedules that need restart changes, provider faults,
# torn writes or two kills.
FAST_SCENARIOS = ("plain-answer.toml", "read-then-answer.toml", "bash-deploy.toml")
SUMMARY = "summary.json"
CORRECT = "correct"


class MutantsError(ChaosError):
    """``chaos mutants`` cannot run: an unknown switch, or a campaign problem (one line each)."""

    def __init__(self, messages: str | list[str]):
        self.messages = [messages] if isinstance(messages, str) else list(messages)
        super().__init__("\n".join(self.messages))


@dataclass
class MutantsOptions:
    """What ``chaos mutants`` runs: scenario paths (empty: default set), switches (empty: all), and campaign knobs."""

    scenarios: list[str] = field(default_factory=list)
    switches: list[str] = field(default_factory=list)
    fast: bool = False
    workers: int = 0  # 0: one per CPU
    out: str = "reports/mutants"
    name: str = ""  # the run's directory under `out` (default: UTC time stamp)
    cache: str | None = None  # kill-point cache (default: <out>/.cache)
    case_seconds: float = 120.0
    keep: str = "failing"
    target: Any = None  # chaos.target.Target whose switches are exercised (None: the bundled agent)

    def the_target(self):
        from chaos.target import Target

        return (self.target or Target()).without_bugs()

    def paths(self) -> list[str]:
        """The scenario paths the campaigns load."""
        if self.scenarios:
            return list(self.scenarios)
        library = cp.bundled_scenarios()
        if not self.fast:
            return [str(library)]
        return [str(library / name) for name in FAST_SCENARIOS] + [str(library / "regressions")]

    def own_regression(self, switch: str | None) -> Path | None:
        """The regression file pinned for ``switch`` among the scenario paths (``regressions/<switch>.toml``)."""
        if switch is None:
            return None
        from chaos.scenario import scenario_files

        files, _ = scenario_files(self.paths())  # problems: the campaign reports them, one line each
        return next((f.resolve() for f in files if f.stem == switch and f.parent.name == "regressions"), None)

    def selected(self) -> list[str]:
        """The switches to run (every one the target offers, in its order, when none is named)."""
        bugs = self.known()
        unknown = [s for s in self.switches if s not in bugs]
        if unknown:
            raise MutantsError([f"--switch {s}: unknown bug switch (known: {', '.join(bugs)})" for s in unknown])
        if not bugs:
            raise MutantsError(f"target {self.the_target().name} offers no known-bug switch (its `bugs` command)")
        return [s for s in bugs if not self.switches or s in self.switches]

    def known(self) -> dict[str, dict[str, str]]:
        """The target's switches (asked from it: ``chaos.target.known_bugs``)."""
        from chaos.target import TargetError, known_bugs

        try:
            return known_bugs(self.the_target())
        except TargetError as exc:
            raise MutantsError(exc.messages) from None


# --------------------------------------------------------------------------------------------------------------
# The engine, with the switch's own regression first (--fast)


class OwnRegressionFirst(cp.Campaign):
    """The campaign engine with one scenario's cases moved to the front of the case list.

    CI wants the answer, not the search: with ``--fast`` a switch's fail-fast campaign starts with the schedule
    pinned for it, so it stops after one case, that case's re-run and its shrinking. Without ``--fast`` every
    campaign runs the engine's own order and knows nothing about where the defect is.
    """

    def __init__(self, *args: Any, first: Path, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.first = first

    def cases(self) -> Iterator[Any]:
        names = {e.name for e in self.entries if e.path == self.first}
        cases = list(super().cases())  # exhaustive mode: a finite list
        return iter([c for c in cases if c.scenario in names] + [c for c in cases if c.scenario not in names])


def run_one(options: cp.CampaignOptions, *, first: Path | None, reporter: cp.Reporter,
            command: Sequence[str], pool: WorkerPool | None = None) -> cp.CampaignResult:
    """One campaign through the engine (``chaos.campaign.run_campaign``'s steps; ``first``: a scenario file whose
    cases run before all others; ``pool``: workers shared with the other campaigns)."""
    if first is None:
        result = cp.run_campaign(options, reporter=reporter, command=command, workers=options.workers or None,
                                 pool=pool)
        assert isinstance(result, cp.CampaignResult)
        return result
    options.check()
    directory = Path(options.out) / options.name
    if (directory / "campaign.json").exists():
        raise cp.CampaignError(f"{directory}: a campaign already ran here; choose another --name")
    directory.mkdir(parents=True, exist_ok=True)
    result = OwnRegressionFirst(options, directory, reporter, command=command, first=first, pool=pool).run()
    assert isinstance(result, cp.CampaignResult)
    return result


# --------------------------------------------------------------------------------------------------------------
# Results


@dataclass
class Detection:
    """The first reproduced failure of a switch's campaign, in journal (finishing) order."""

    case: str
    scenario: str
    schedule: list[str]
    invariants: list[str]  # every invariant that failed in that case, in oracle order
    invariant: str  # the one shrinking kept failing (the first of ``invariants`` without shrinking)
    message: str  # that invariant's first finding
    minimal: list[str]  # the shrunk schedule
    seconds: float  # from campaign start to the failure's journal record
    cases_run: int  # journal records up to and including it
    bundle: str | None = None  # its repro bundle directory, when the report wrote one

    @classmethod
    def of(cls, records: Sequence[dict[str, Any]], started: float, directory: Path,
           shared: frozenset[str] = frozenset()) -> Detection | None:
        """The first failure of ``records`` whose case id is not in ``shared`` (cases the correct agent did not
        pass: a failure both agents have says nothing about the switch)."""
        from chaos.bundle import bundle_dir

        for n, record in enumerate(records, 1):
            if record.get("status") != FAIL or record["id"] in shared:
                continue
            failures = record.get("failures") or []
            invariants = list(dict.fromkeys(f["invariant"] for f in failures))
            kept = (record.get("shrink") or {}).get("invariant") or (invariants[0] if invariants else "?")
            message = next((f.get("message", "") for f in failures if f["invariant"] == kept), "")
            bundle = bundle_dir(directory, record["id"])
            return cls(
                case=record["id"], scenario=record.get("scenario", ""), schedule=list(record.get("schedule") or []),
                invariants=invariants, invariant=kept, message=message,
                minimal=list(record.get("minimal") or record.get("schedule") or []),
                seconds=round(max(0.0, float(record.get("finished_at", started)) - started), 2), cases_run=n,
                bundle=str(bundle) if (bundle / "bundle.json").is_file() else None,
            )
        return None


@dataclass
class AgentRun:
    """One campaign of ``chaos mutants``: the correct agent (``switch`` None) or one switch."""

    switch: str | None
    campaign: str  # its directory
    duration: float
    cases: dict[str, int]
    baselines_ok: bool
    detection: Detection | None = None
    failures: list[dict[str, Any]] = field(default_factory=list)  # deduplicated groups (correct agent: false alarms)
    flaky: list[dict[str, Any]] = field(default_factory=list)
    errors: list[dict[str, Any]] = field(default_factory=list)
    interrupted: bool = False
    scenarios: list[str] = field(default_factory=list)  # the scenario names the campaign loaded
    not_passed: list[str] = field(default_factory=list)  # case ids that failed, were flaky or errored

    @property
    def detected(self) -> bool:
        return self.detection is not None

    @property
    def clean(self) -> bool:
        """No failure, no flaky failure, no harness error, every baseline sound: what the correct agent must show."""
        c = self.cases
        return (self.baselines_ok and not self.interrupted and not c.get(FAIL) and not c.get(FLAKY)
                and not c.get("error"))

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["detected"] = self.detected
        return out


@dataclass
class MutantsResult:
    """Everything ``chaos mutants`` found (``summary.json``)."""

    started: str
    duration: float
    fast: bool
    scenarios: list[str]
    command: list[str]
    directory: str
    correct: AgentRun
    switches: list[AgentRun]
    versions: dict[str, Any] = field(default_factory=dict)
    bugs: dict[str, dict[str, str]] = field(default_factory=dict)  # the target's switches: layer, description
    target: dict[str, Any] = field(default_factory=dict)

    @property
    def survivors(self) -> list[str]:
        return [r.switch for r in self.switches if not r.detected and r.switch is not None]

    @property
    def interrupted(self) -> bool:
        return self.correct.interrupted or any(r.interrupted for r in self.switches)

    @property
    def ok(self) -> bool:
        """Every switch detected and not a single failure on the correct agent."""
        return self.correct.clean and not self.survivors and not self.interrupted

    def to_json(self) -> dict[str, Any]:
        switches = []
        for r in self.switches:
            item = r.to_json()
            about = self.bugs.get(r.switch or "", {})
            item["layer"] = about.get("layer", "")
            item["description"] = about.get("description", "")
            switches.append(item)
        return {
            "ok": self.ok, "started": self.started, "duration": self.duration, "fast": self.fast,
            "scenarios": self.scenarios, "command": self.command, "directory": self.directory,
            "survivors": self.survivors, "correct": self.correct.to_json(), "switches": switches,
            "versions": self.versions, "target": self.target,
        }


def _agent_run(switch: str | None, result: cp.CampaignResult, directory: Path, started: float,
               shared: frozenset[str] = frozenset()) -> AgentRun:
    run = AgentRun(switch=switch, campaign=str(directory), duration=result.duration, cases=dict(result.cases),
                   baselines_ok=all(b.get("ok") for b in result.baselines.values()),
                   failures=[{k: v for k, v in g.items() if k != "cases"} for g in result.failures],
                   flaky=list(result.flaky), errors=list(result.errors), interrupted=result.interrupted,
                   scenarios=list(result.baselines))
    run.detection = Detection.of(result.records, started, directory, shared)
    run.not_passed = sorted(r["id"] for r in result.records if r.get("status") not in (PASS, NOT_REACHED))
    return run


# --------------------------------------------------------------------------------------------------------------
# Running


class QuietReporter(cp.Reporter):
    """Campaign progress reduced to what a mutants run needs: baseline messages (a scenario whose crash-free run
    fails is not campaigned, which the user must see) and nothing per case — one line per campaign comes after it.
    The engine's case count and ETA are left out: a switch's fail-fast campaign stops long before that estimate."""

    def message(self, text: str) -> None:
        if text.lower().startswith("baseline"):
            self.write(text)

    def case(self, record: dict[str, Any]) -> None:
        self.done += 1

    def line(self) -> str:
        return ""


def run_mutants(options: MutantsOptions, *, say: Callable[[str], None] = lambda text: None,
                command: Sequence[str] = ()) -> MutantsResult:
    """Run the correct agent's campaign, then one campaign per switch; write ``summary.json``; return the result.

    ``say`` gets one progress line per campaign. Raises ``MutantsError`` (unknown switch, campaign usage problems).
    Callers in a script must guard it with ``if __name__ == "__main__":`` (campaign workers use a forkserver).
    """
    switches = options.selected()
    paths = options.paths()
    out = Path(options.out)
    stamp = options.name or "mutants-" + _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%d-%H%M%S")
    run_dir = out / stamp
    if cp.name_problem(stamp):  # `--name ../../x` would write outside --out
        raise MutantsError(cp.name_problem(stamp))
    if run_dir.exists():
        raise MutantsError(f"{run_dir}: exists; choose another --name")
    cache = options.cache or str(out / ".cache")
    t0 = time.monotonic()
    started_at = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")

    def campaign(switch: str | None, shared: frozenset[str] = frozenset()) -> AgentRun:
        label = switch or CORRECT
        first = options.own_regression(switch) if options.fast else None
        opts = cp.CampaignOptions(
            # One worker for a campaign that starts with its own regression: the case, its re-run and its shrinking
            # are a serial chain, and a second worker would only start cases the fail-fast stop then discards
            # (failing too, they would be re-run and shrunk as well).
            scenarios=paths, workers=1 if first is not None else options.workers, fail_fast=switch is not None,
            name=label, out=str(run_dir),
            cache=cache, keep=options.keep, case_seconds=options.case_seconds,
            target=options.the_target().with_bugs([switch] if switch else []).to_json(),
            # The switches' campaigns are one history series (same target without switches): replaying one
            # switch's failures first in the next would falsify its time to first detection.
            replay=False, history=False,
        )
        started = time.time()  # journal records carry wall-clock `finished_at`
        try:
            result = run_one(opts, first=first, reporter=QuietReporter(say), command=command, pool=pool)
        except cp.CampaignError as exc:
            raise MutantsError(exc.messages) from None
        directory = run_dir / label
        _render(result, directory, say)
        run = _agent_run(switch, result, directory, started, shared)
        say(_progress_line(run))
        return run

    say(f"mutants: {len(paths)} scenario path(s){' (--fast)' if options.fast else ''}, correct agent + "
        f"{len(switches)} switch(es), campaigns under {run_dir}")
    # One pool for every campaign: a switch's --fast campaign is one failing case, its re-run and its shrinking
    # (~0.1-0.3 s of cases), and starting its worker, scripted server and zygote again cost ~0.6 s more each.
    # Each campaign still gets its own world (WorkerPool.reconfigure): scenarios, target, case directory.
    pool = WorkerPool(None, options.workers or os.cpu_count() or 1)
    try:
        correct = campaign(None)
        # A case the correct agent did not pass proves nothing about a switch: it is not counted as a detection.
        shared = frozenset(correct.not_passed)
        runs: list[AgentRun] = []
        for switch in switches:
            if correct.interrupted or (runs and runs[-1].interrupted):
                break
            runs.append(campaign(switch, shared))
    finally:
        pool.close()
    result = MutantsResult(
        started=started_at, duration=round(time.monotonic() - t0, 2), fast=options.fast,
        scenarios=correct.scenarios, command=list(command), directory=str(run_dir),
        correct=correct, switches=runs, versions=cp.versions(), bugs=options.known(),
        target=options.the_target().to_json(),
    )
    text = json.dumps(result.to_json(), indent=2, ensure_ascii=False) + "\n"
    for path in (run_dir / SUMMARY, out / SUMMARY):
        write_atomic(path, text)
    return result


def _render(result: cp.CampaignResult, directory: Path, say: Callable[[str], None]) -> None:
    """The campaign's own report (and a repro bundle per failure); a report that cannot be written is one line."""
    from chaos.report.render import render_result

    try:
        notes = render_result(result, directory).notes
    except (ChaosError, OSError) as exc:
        say(f"  report for {directory.name}: not written: {exc}")
        return
    for note in notes:
        say(f"  note: {note}")


def _progress_line(run: AgentRun) -> str:
    c = run.cases
    counts = (f"{c.get('done', 0)} case(s), {c.get('fail', 0)} failed, {c.get('flaky', 0)} flaky, "
              f"{c.get('error', 0)} error")
    if run.switch is None:
        verdict = "clean" if run.clean else "FALSE ALARM"
        return f"  correct agent: {counts} in {run.duration:.1f}s: {verdict}"
    if run.detection is None:
        return f"  {run.switch}: SURVIVED ({counts} in {run.duration:.1f}s)"
    d = run.detection
    return f"  {run.switch}: detected by {d.invariant} after {d.seconds:.1f}s ({d.cases_run} case(s)): {d.case}"


# --------------------------------------------------------------------------------------------------------------
# Rendering


def table(result: MutantsResult):
    """The rich table: one row per switch (detected, invariant, first failing case, shrunk schedule, time)."""
    from rich.table import Table

    t = Table(title=f"chaos mutants{' --fast' if result.fast else ''}: {len(result.scenarios)} scenario(s)",
              title_justify="left")
    t.add_column("switch", no_wrap=True)
    t.add_column("detected", no_wrap=True)
    t.add_column("caught by")
    t.add_column("first failing case", overflow="fold")
    t.add_column("shrunk schedule", overflow="fold")
    t.add_column("detected after", justify="right", no_wrap=True)
    for run in result.switches:
        d = run.detection
        if d is None:
            t.add_row(run.switch, "[bold red]no[/]", "", "", "", f"{run.cases.get('done', 0)} cases, "
                      f"{run.duration:.1f}s")
            continue
        others = [i for i in d.invariants if i != d.invariant]
        caught = d.invariant + (f" (+{', '.join(others)})" if others else "")
        t.add_row(run.switch, "[green]yes[/]", caught, d.case, "+".join(d.minimal),
                  f"{d.seconds:.1f}s ({d.cases_run} case{'' if d.cases_run == 1 else 's'})")
    return t


def verdict_lines(result: MutantsResult) -> list[str]:
    """The lines after the table: the correct agent's campaign, survivors, where the summary is."""
    c = result.correct
    lines = []
    if c.clean:
        lines.append(f"correct agent: {c.cases.get('done', 0)} case(s), no failure ({c.duration:.1f}s)")
    else:
        lines.append(f"correct agent: FALSE ALARM — {c.cases.get('fail', 0)} failed, "
                     f"{c.cases.get('flaky', 0)} flaky, {c.cases.get('error', 0)} harness error(s)"
                     + ("" if c.baselines_ok else ", a baseline failed") + f" (see {c.campaign})")
        for g in c.failures:
            lines.append(f"  FAIL {g['invariant']} ×{g['count']}: {g['example']}: {g.get('message', '')}")
        for f in c.flaky:
            lines.append(f"  FLAKY {f['id']} ({', '.join(f.get('invariants') or [])})")
        for e in c.errors:
            lines.append(f"  ERROR {e['id']}: {e.get('detail', '')}")
    if result.survivors:
        lines.append(f"SURVIVED: {', '.join(result.survivors)} — no campaign case failed with the switch on "
                     "(an oracle gap, or a scenario set that never reaches the defect)")
    if result.interrupted:
        lines.append("interrupted: the result is incomplete")
    detected = sum(1 for r in result.switches if r.detected)
    lines.append(f"{detected}/{len(result.switches)} switch(es) detected in {result.duration:.1f}s; "
                 f"summary: {Path(result.directory).parent / SUMMARY}")
    return lines
