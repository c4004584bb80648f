"""``chaos campaign``: run many cases in parallel, journal them, and summarize them as one ``CampaignResult``.

What users run: the README's Quick-start (``chaos campaign`` alone: every bundled scenario, exhaustive depth 1), CI
(``--tag``/``--shard K/N`` per job, then ``chaos report merge``), and nightly (``--nightly``: every fault action,
depth 2, a time budget). The engine, in order:

1. **Library**: load the scenario files (``--tag`` filters), hash each file, and key the agent (its command, and
   for the bundled agent the digest of its source, so an edited agent never reuses stale kill points).
2. **Kill points, computed once and cached** on disk per (scenario file hash, agent): the crash-free baseline is
   run *twice* with the correct agent; both runs must pass every invariant and agree (same transactions, same
   normalized log), else the scenario's cases are not run and the result says why. The cache file is published
   first-writer-wins (``link``), so every shard and every pytest-xdist worker of one machine sees the same list.
   ``--depth 2`` also caches, per (scenario, agent incl. bugs), each first kill's recovery: the durable state it
   leaves and the transactions recovery announces.
3. **Case list**: the policies of ``chaos.schedules`` (exhaustive + torn + depth 2, or random), then ``--shard``.
4. **Run**: a ``chaos.workers.WorkerPool`` (default: one worker per CPU), each case in its own directory with its own
   scripted-server route; every finished case is appended to the fsynced journal (``chaos.journal``) before it
   counts, so ``--resume DIR`` after a crash of the harness continues without redoing or losing a case.
   ``--budget`` covers everything (baselines, depth-2 discovery, cases, shrinking: ``CampaignWorkerConfig.deadline``);
   ``--duration`` stops a random campaign when it is reached; ``--fail-fast`` stops after the first reproduced
   failure. Cases that failed or were flaky in earlier runs of the same target and scenario set under ``--out``
   (``chaos.report.history``) run first (``--no-replay`` turns that off), so a regression shows in the first seconds.
   SIGTERM stops a campaign as SIGINT does (``Terminated``): the journal stays intact and the partial result is
   written.
5. **Result**: ``result.json`` in ``reports/<campaign>/`` — totals, failures deduplicated by (invariant, fault
   action, fact name) with a count, flaky cases apart, coverage per ``fact@phase`` and per planner rule reached on
   restart, versions, seed, and whether the campaign is *complete* (every planned case ran, discovery finished; a
   random ``--duration`` campaign: its duration was reached). ``exit_code`` maps it to ``chaos campaign``'s exit
   status (``EXIT_INCOMPLETE`` when every case that ran held but not all ran). ``merge_journals(dirs)`` computes the
   same object from several shards' directories. Then ``<out>/history.json`` and ``<out>/index.html`` are updated.

Not here: rendering reports (``chaos.report``), judging (``chaos.oracle``), running one case (``chaos.case``).
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import hashlib
import os
import platform
import shlex
import signal
import subprocess
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Container, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from chaos.cache import BaselineCache
from chaos.errors import ChaosError
from chaos.faults import PROBE_ACTIONS
from chaos.files import read_json, write_json
from chaos.report import CaseReport, case_record
from chaos.report.summary import deduplicate
from chaos.journal import (
    CAMPAIGN,
    JOURNAL,
    CampaignLock,
    Journal,
    JournalError,
    campaign_problems,
    read_campaign,
    read_journal,
    read_lines,
    run_again,
    takes_over,
    write_campaign,
)
from chaos.schedules import CaseSpec, Recovery, ScenarioPoints, Transaction, parse_shard, shard
from chaos.schedules.depth2 import Depth2
from chaos.schedules.exhaustive import Exhaustive
from chaos.schedules.random import Random
from chaos.schedules.torn import Torn
from chaos.target import Target, is_probe
from chaos.status import ERROR, EXPECTED, FAIL, FLAKY, NOT_REACHED, PASS, STATUSES
from chaos.workers import WorkerConfig, WorkerPool

RESULT = "result.json"
REGRESSION_TAG = "regression"
# Depth-2 recoveries discovered so far by a campaign whose discovery the budget cut short (resume continues there).
PARTIAL_RECOVERIES = "recoveries.partial.json"
# `chaos campaign`'s exit statuses (README "Exit codes"); 4 is used by no other `chaos` command.
EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INCOMPLETE, EXIT_SIGINT, EXIT_SIGTERM = 0, 1, 2, 4, 130, 143
REPO = Path(__file__).resolve().parent.parent
# Fault actions a campaign can enumerate (`--faults`); `all` is every one of them.
FAULT_FAMILIES = ("kill", "int", "ioerror", "dresume", "torn", "powerloss")
MAX_RANDOM_CASES = 100_000  # --cases: see CampaignOptions.check
# SPEC §14.4 rule ids, in the spec's order (coverage lists those never reached on a restart).
PLANNER_RULES = (
    "P0", "P1.1", "P1.2", "P1.3", "P2", "P3.1", "P3.2", "P3.3", "P3.4", "P3.5", "P4", "P5.1", "P5.2", "P6.1", "P6.2",
    "P6.3", "P7.1.1", "P7.1.2", "P7.1.3.1", "P7.1.3.2", "P7.1.3.3", "P7.1.4", "P7.2.1", "P7.2.2", "P7.2.3", "P7.2.4",
    "P7.3",
)


class CampaignError(ChaosError):
    """A campaign cannot start or continue (bad options, scenario problems, unreadable directory); one line each."""

    def __init__(self, messages: str | list[str]):
        self.messages = [messages] if isinstance(messages, str) else list(messages)
        super().__init__("\n".join(self.messages))


class Terminated(KeyboardInterrupt):
    """SIGTERM (what a CI timeout sends first), raised in the main thread where Ctrl-C raises KeyboardInterrupt, so
    both stop a campaign the same way: no new case, the journal intact, the partial result and report written."""


class _OutOfTime(Exception):
    """Internal: the ``--budget`` ran out during discovery (baselines or depth-2 recoveries)."""


class _SigtermGuard:
    """While ``armed`` (discovery and dispatch), SIGTERM raises ``Terminated`` once; a second one, or one that
    arrives while the result is being written, is only noted (``fired``): raising inside the clean-up would leave
    workers behind or a result half-computed, and both end in a moment anyway."""

    def __init__(self) -> None:
        self.armed = True
        self.fired = False

    def handler(self, signum, frame) -> None:
        if self.armed and not self.fired:
            self.fired = True
            raise Terminated()
        self.fired = True


@contextmanager
def _sigterm_as_interrupt() -> Iterator[_SigtermGuard]:
    """SIGTERM handled as ``_SigtermGuard`` says for the duration of the block (main thread only: an embedding
    caller in another thread keeps its own handling)."""
    guard = _SigtermGuard()
    if threading.current_thread() is not threading.main_thread():
        yield guard
        return
    previous = signal.signal(signal.SIGTERM, guard.handler)
    try:
        yield guard
    finally:
        signal.signal(signal.SIGTERM, previous)


# --------------------------------------------------------------------------------------------------------------
# Options


@dataclass
class CampaignOptions:
    """Everything that defines a campaign; stored in ``campaign.json`` so ``--resume`` rebuilds the same case list."""

    scenarios: list[str] = field(default_factory=list)  # files/directories; empty = the bundled library
    tags: list[str] = field(default_factory=list)
    mode: str = "exhaustive"  # or "random"
    depth: int = 1
    faults: list[str] = field(default_factory=lambda: ["kill"])  # exhaustive families (FAULT_FAMILIES)
    pinned: bool = True
    pinned_only: bool = False  # only the scenarios' [[schedules]] (CI regression runs), no enumeration
    # Scenarios tagged "regression" (exported by `chaos export` for a known bug) run their pinned schedules only,
    # unless the whole library is enumerated (--nightly): their value is the one schedule that found the bug.
    regressions_pinned: bool = True
    seed: int | None = None
    cases: int | None = None  # random: number of cases
    duration: float | None = None  # random: seconds
    max_faults: int = 3  # random: K
    random_actions: list[str] = field(default_factory=lambda: ["kill", "int", "torn", "llm"])
    budget: float | None = None  # seconds; stop dispatching after it
    workers: int = 0  # 0: os.cpu_count()
    shard: str | None = None  # "K/N"
    fail_fast: bool = False
    # The system under test, as chaos.target.Target.to_json(); default: the bundled agent
    target: dict[str, Any] = field(default_factory=lambda: Target().to_json())
    name: str = ""
    out: str = "reports"
    cache: str | None = None  # default: <out>/.cache
    keep: str = "failing"
    shrink: bool = True
    shrink_calls: int = 30
    case_seconds: float = 120.0
    silence_seconds: float = 30.0
    corpus: str | None = None  # `chaos corpus build`: record every kill prefix under this directory (chaos.corpus)
    # Run first the cases that failed or were flaky in earlier runs of this target and scenario set (<out>/history.json)
    replay: bool = True
    history: bool = True  # update <out>/history.json and <out>/index.html (chaos.report.history) at the end

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, value: Mapping[str, Any], where: str = "campaign.json: options") -> CampaignOptions:
        """The options stored in ``campaign.json``; ``CampaignError`` with one line per field (``where``.field)
        whose stored value does not fit its type, or a target that is not one (a hand-edited or corrupt file)."""
        from chaos import shapes

        if not isinstance(value, Mapping):
            raise CampaignError(f"{where}: expected a JSON object, got {shapes.describe(value)}")
        value = dict(value)
        problems = []
        for key in ("agent", "target"):  # "agent": a round-1 campaign.json
            if key in value and (key == "target" or "target" not in value):
                try:
                    target = Target.from_json(value.pop(key))
                    # Its fields must fit their types too: workers and launchers receive it as is.
                    problems += shapes.field_problems(target, f"{where}.{key}") or _target_problems(
                        target, f"{where}.{key}")
                    value["target"] = target.to_json()
                except (TypeError, ValueError, AttributeError, KeyError) as exc:
                    problems.append(f"{where}.{key}: not a target description ({type(exc).__name__}: {exc})")
        problems += shapes.problems(value, cls, where)
        if problems:
            raise CampaignError(problems)
        return cls(**{k: v for k, v in value.items() if k in cls.__dataclass_fields__})

    @property
    def the_target(self) -> Target:
        return Target.from_json(self.target)

    def check(self) -> None:
        """Raise ``CampaignError`` listing every inconsistent option."""
        problems = []
        if self.mode not in ("exhaustive", "random"):
            problems.append(f"--mode {self.mode!r}: expected exhaustive or random")
        if self.depth not in (1, 2):
            problems.append(f"--depth {self.depth}: expected 1 or 2")
        if self.mode == "random":
            if self.seed is None:
                problems.append("--mode random needs --seed S (cases are reproducible from seed and index)")
            if (self.cases is None) == (self.duration is None):
                problems.append("--mode random needs exactly one of --cases N or --duration D")
            if self.depth != 1:
                problems.append("--depth 2 applies to exhaustive mode (random schedules already have 1..K faults)")
        unknown = [f for f in self.faults if f not in FAULT_FAMILIES]
        if self.mode == "exhaustive" and not self.faults and not self.pinned_only:
            # `--faults ''` (or ','): no case but the pinned ones would be planned, and the run would say it held.
            problems.append(f"--faults: no fault family given (expected some of {', '.join(FAULT_FAMILIES)} or all)")
        if unknown:
            problems.append(f"--faults {','.join(unknown)}: expected some of {', '.join(FAULT_FAMILIES)} or all")
        if self.shard is not None:
            try:
                parse_shard(self.shard)
            except ChaosError as exc:
                problems.append(str(exc))
        if self.keep not in ("failing", "all", "none"):
            problems.append(f"--keep {self.keep!r}: expected failing, all or none")
        if self.cases is not None and self.cases > MAX_RANDOM_CASES:
            # The plan counts distinct case ids before the first case (completeness is judged against it): ~4 s
            # for 100,000 here, and a campaign stuck in that count hears neither --budget nor SIGTERM.
            problems.append(f"--cases {self.cases}: at most {MAX_RANDOM_CASES:,} (for longer runs: --duration D)")
        if self.max_faults < 1:
            problems.append("--max-faults must be >= 1")
        # The rest are range-checked by the CLI; a campaign.json read back on --resume may hold anything.
        for flag, value, low in (("--workers", self.workers, 0), ("--cases", self.cases, 1),
                                 ("shrink_calls", self.shrink_calls, 0)):
            if value is not None and value < low:
                problems.append(f"{flag} must be >= {low}")
        for flag, value in (("--duration", self.duration), ("--budget", self.budget)):
            if value is not None and value <= 0:  # a run of no time plans cases only to leave them all unrun
                problems.append(f"{flag} must be more than 0 seconds")
        for flag, value in (("--case-timeout", self.case_seconds), ("silence_seconds", self.silence_seconds)):
            if value <= 0:
                problems.append(f"{flag} must be > 0")
        problem = name_problem(self.name)
        if problem:
            problems.append(problem)
        for flag, value in (("--out", self.out), ("--cache", self.cache), ("corpus", self.corpus),
                            *(("SCENARIOS", path) for path in self.scenarios)):
            if value and "\0" in value:  # no path holds one (os calls raise ValueError on it)
                problems.append(f"{flag} {value!r}: contains a NUL byte")
        from chaos.schedules.random import ACTIONS as RANDOM_ACTIONS

        unknown = [a for a in self.random_actions if a not in RANDOM_ACTIONS]
        if unknown or not self.random_actions:
            problems.append(f"random_actions {','.join(unknown) or '(none)'}: expected some of "
                            f"{', '.join(RANDOM_ACTIONS)}")
        if problems:
            raise CampaignError(problems)


def nightly(options: CampaignOptions) -> CampaignOptions:
    """The nightly preset: every fault action, depth 2, regressions enumerated too (a ``--budget`` may still bound
    it). It keeps the user's scenario selection (paths, ``--tag``): ``--nightly --tag restart-change`` is a nightly
    campaign of those scenarios, not of the whole library."""
    options.mode, options.depth, options.faults = "exhaustive", 2, list(FAULT_FAMILIES)
    options.regressions_pinned = False
    return options


# `chaos campaign`'s parameters (click names) → (the flag a person typed, the CampaignOptions fields it sets). On
# --resume the stored options rule; a given flag whose fields differ from them is refused instead of ignored.
CLI_FIELDS: dict[str, tuple[str, tuple[str, ...]]] = {
    "scenarios": ("SCENARIOS", ("scenarios",)), "mode": ("--mode", ("mode",)), "depth": ("--depth", ("depth",)),
    "faults": ("--faults", ("faults",)), "seed": ("--seed", ("seed",)), "case_count": ("--cases", ("cases",)),
    "duration": ("--duration", ("duration",)), "max_faults": ("--max-faults", ("max_faults",)),
    "shard": ("--shard", ("shard",)), "fail_fast": ("--fail-fast", ("fail_fast",)),
    "pinned_only": ("--pinned-only", ("pinned_only",)), "target_file": ("--target", ("target",)),
    "agent_config": ("--agent", ("target",)), "agent_bugs": ("--agent-bugs", ("target",)),
    "planner_cmd": ("--planner-cmd", ("target",)), "planner_dir": ("--planner-dir", ("target",)),
    "planner_timeout": ("--planner-timeout", ("target",)),
    "planner_scope": ("--planner-scope", ("target",)),
    "launcher": ("--launcher", ("target",)),
    "tags": ("--tag", ("tags",)), "nightly": ("--nightly", ("mode", "depth", "faults", "regressions_pinned")),
    "name": ("--name", ("name",)), "out": ("--out", ("out",)), "cache": ("--cache", ("cache",)),
    "keep": ("--keep", ("keep",)), "no_shrink": ("--no-shrink", ("shrink",)),
    "case_timeout": ("--case-timeout", ("case_seconds",)), "no_replay": ("--no-replay", ("replay",)),
}
RESUME_MAY_CHANGE = ("--budget", "-j/--workers")


def resume_conflicts(stored: CampaignOptions, given: CampaignOptions, explicit: Iterable[str]) -> list[str]:
    """One line per option given on a ``--resume`` command line (``explicit``: click parameter names) whose value
    differs from the stored campaign's. Pure. ``given`` is built from the command line as a new campaign would be."""
    problems = []
    for param in explicit:
        if param not in CLI_FIELDS:
            continue  # --resume itself, --budget, --workers, --list
        flag, fields = CLI_FIELDS[param]
        for name in fields:
            have, want = _comparable_option(name, getattr(stored, name)), _comparable_option(name, getattr(given, name))
            if have != want:
                problems.append(f"--resume: {flag} cannot change a stored campaign ({name} is {_shown(have)}, "
                                f"given {_shown(want)}); only {' and '.join(RESUME_MAY_CHANGE)} can — start a new "
                                "campaign with another --name instead")
                break
    return problems


def _comparable_option(name: str, value: Any) -> Any:
    if name in ("scenarios", "out", "cache") and value:
        paths = [value] if isinstance(value, str) else list(value)
        resolved = [str(Path(p).resolve()) for p in paths]
        return resolved[0] if isinstance(value, str) else resolved
    if name == "target":
        target = Target.from_json(value)  # its label, and where its planner runs (the same command elsewhere differs)
        where = f" in {target.planner_dir}" if target.planner_command and target.planner_dir else ""
        chosen = target.chosen_planner_timeout()
        within = f" within {chosen}s" if target.planner_command and chosen else ""
        return target.label() + where + within
    return value


def _shown(value: Any) -> str:
    if isinstance(value, list):
        return ",".join(str(v) for v in value) or "(none)"
    return "(none)" if value is None else str(value)


def parse_duration(text: str) -> float:
    """``90``, ``90s``, ``30m``, ``2h``, ``1h30m`` → seconds; raises ``CampaignError``."""
    import re

    raw = text.strip().lower()
    if re.fullmatch(r"[0-9]+(\.[0-9]+)?", raw):
        return float(raw)
    parts = re.findall(r"([0-9]+(?:\.[0-9]+)?)([hms])", raw)
    if not parts or "".join(n + u for n, u in parts) != raw:
        raise CampaignError(f"duration {text!r}: expected e.g. 90s, 30m, 2h or 1h30m")
    return sum(float(n) * {"h": 3600, "m": 60, "s": 1}[u] for n, u in parts)


def name_problem(name: str) -> str | None:
    """Why ``--name`` cannot name a directory inside ``--out`` (a path separator, ``.``/``..``, a NUL), or None."""
    seps = "/" + os.sep + (os.altsep or "")
    plain = name.rstrip(seps)  # a trailing slash (a shell's directory completion) still names a directory in --out
    if (name and not plain) or any(s in plain for s in seps) or plain in (".", "..") or "\0" in name:
        return f"--name {name!r}: must be a plain directory name inside --out (no '/', not '.' or '..')"
    return None


def bundled_scenarios() -> Path:
    """The scenario library shipped with killpoint: ``chaos/library/`` in an installed wheel (package data, see
    ``setup.py``), else ``scenarios/`` of the source tree (a checkout or an editable install)."""
    packaged = Path(__file__).resolve().parent / "library"
    return packaged if packaged.is_dir() else REPO / "scenarios"


# --------------------------------------------------------------------------------------------------------------
# Library and kill-point cache


@dataclass
class Entry:
    """One scenario of the library: name, file, file digest, and the loaded model."""

    name: str
    path: Path
    digest: str
    scenario: Any
    points: ScenarioPoints | None = None
    baseline: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.points is not None and bool(self.baseline.get("ok"))


def load_library(paths: Sequence[str], tags: Sequence[str] = ()) -> list[Entry]:
    """Load the scenario files under ``paths`` (the bundled library when empty), keeping those with any of ``tags``.

    Probe scenarios (a ``[target]`` of kind "python": scenarios/frameworks/) are not part of the default sweep: they
    run when named (their folder or file) or selected by a tag."""
    from chaos.scenario import load_scenarios

    scenarios, problems = load_scenarios(list(paths) or [bundled_scenarios()])
    if problems:
        raise CampaignError(problems)
    entries = []
    # A tag the bundled agent's scenarios also use ("tools") does not pull the framework targets into a sweep of the
    # library; a tag only they carry ("frameworks", "langgraph") selects them.
    contract_tags = {t for sc in scenarios if not is_probe(sc) for t in sc.tags}
    for sc in scenarios:
        if tags and not set(tags) & set(sc.tags):
            continue
        if is_probe(sc) and not paths and not set(tags) & (set(sc.tags) - contract_tags):
            continue
        h = hashlib.sha256(Path(sc.source).read_bytes())
        if is_probe(sc):  # its program, pins and settings name its kill points as much as the file does
            h.update(sc.the_target.key().encode())
        entries.append(Entry(sc.name, Path(sc.source).resolve(), h.hexdigest()[:16], sc))
    if not entries:
        raise CampaignError(f"no scenario matches tags {', '.join(tags)}" if tags else "no scenario files found")
    return entries


def _points(entry: Entry, transactions: Sequence[Mapping]) -> ScenarioPoints:
    sc = entry.scenario
    pinned = tuple(tuple(s.faults) for s in sc.schedules)
    if is_probe(sc):
        return ScenarioPoints(entry.name, tuple(Transaction.from_json(t) for t in transactions), pinned, tuple(sc.tags),
                              max(1, len(sc.runs)), tuple(len(r.turns) for r in sc.runs) or (1,),
                              vocabulary=sc.the_target.probe.vocabulary)
    restart_changes = bool(sc.restart.changes_configuration or sc.restart.then)
    return ScenarioPoints(entry.name, tuple(Transaction.from_json(t) for t in transactions), pinned, tuple(sc.tags),
                          len(sc.runs), tuple(len(r.turns) for r in sc.runs), restart_changes=restart_changes)


# --------------------------------------------------------------------------------------------------------------
# Progress


class Reporter:
    """Where progress goes. Plain lines (not a TTY): one line per case that did not pass, and a progress line every
    ~5% or 10 s — for the cases, and before them for each discovery phase (``what``: "baselines", "depth-2
    recoveries"), which on a nightly can take minutes and must not look like a hang."""

    def __init__(self, write: Callable[[str], None] = print):
        self.write = write
        self.total: int | None = None
        self.done = 0
        self.failures = 0
        self.what = "cases"
        self.t0 = time.monotonic()
        self._last = 0.0
        self._step = 1
        self._base = 0

    def message(self, text: str) -> None:
        self.write(text)

    def start(self, total: int | None, done: int, failures: int, what: str = "cases") -> None:
        self.total, self.done, self.failures, self.what = total, done, failures, what
        self.t0 = self._last = time.monotonic()
        self._base = done
        self._step = max(1, (total or 100) // 20)

    def job(self) -> None:
        """One discovery job (a baseline pair, a depth-2 recovery) finished."""
        self.done += 1
        self._tick()

    def _tick(self) -> None:
        now = time.monotonic()
        if self.done % self._step == 0 or now - self._last > 10 or self.done == self.total:
            self._last = now
            line = self.line()
            if line:  # a quiet reporter (chaos.mutants) has no progress line
                self.write(line)

    def rate(self) -> float:
        elapsed = time.monotonic() - self.t0
        return (self.done - self._base) / elapsed if elapsed > 0 else 0.0

    def eta(self) -> float | None:
        rate = self.rate()
        if self.total is None or rate <= 0:
            return None
        return (self.total - self.done) / rate

    def case(self, record: Mapping[str, Any]) -> None:
        self.done += 1
        if record["status"] == FAIL:
            self.failures += 1
        if record["status"] not in (PASS, NOT_REACHED, EXPECTED):  # expected ones: summed up per target at the end
            self.write(failure_line(record))
        self._tick()

    def line(self) -> str:
        total = "?" if self.total is None else str(self.total)
        eta = self.eta()
        eta_text = f", ETA {_hms(eta)}" if eta is not None else ""
        if self.what != "cases":
            return f"[{self.what} {self.done}/{total}] {self.rate():.2f}/s{eta_text}"
        return f"[{self.done}/{total}] failures {self.failures}, {self.rate():.2f} cases/s{eta_text}"

    def stop(self) -> None:
        pass


class RichReporter(Reporter):
    """A rich progress bar on a terminal: cases done/total, failures so far, cases/s, ETA."""

    def __init__(self, console=None):
        from rich.console import Console

        self.console = console or Console(stderr=True)
        super().__init__(self.console.print)
        self.progress = None

    def start(self, total: int | None, done: int, failures: int, what: str = "cases") -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        self.stop()  # the previous phase's bar (discovery before cases)
        super().start(total, done, failures, what)
        columns = [TextColumn(f"[bold]{'campaign' if what == 'cases' else what}"), BarColumn(), MofNCompleteColumn()]
        if what == "cases":
            columns += [TextColumn("failures [red]{task.fields[failures]}"), TextColumn("{task.fields[rate]} cases/s")]
        self.progress = Progress(*columns, TimeRemainingColumn(), console=self.console, transient=False)
        self.task = self.progress.add_task(what, total=total, completed=done, failures=failures, rate="0.00")
        self.progress.start()

    def job(self) -> None:
        self.done += 1
        if self.progress is not None:
            self.progress.update(self.task, completed=self.done)

    def case(self, record: Mapping[str, Any]) -> None:
        self.done += 1
        if record["status"] == FAIL:
            self.failures += 1
        if record["status"] not in (PASS, NOT_REACHED, EXPECTED):
            self.progress.console.print(failure_line(record), markup=False, highlight=False)
        self.progress.update(self.task, completed=self.done, failures=self.failures, rate=f"{self.rate():.2f}")

    def stop(self) -> None:
        if self.progress is not None:
            self.progress.stop()
            self.progress = None


def failure_line(record: Mapping[str, Any]) -> str:
    """``FAIL  <case id>  <invariants>`` and, when the implementation's recovery decision diverged from the
    reference planner's, that divergence (the defect class, on the first line an engineer reads)."""
    invariants = ", ".join(dict.fromkeys(f["invariant"] for f in record.get("failures", [])))
    line = f"{record['status'].upper():5} {record['id']}  {invariants}".rstrip()
    divergence = record.get("divergence") or {}
    if divergence.get("signature"):
        line += f"  [{divergence['signature']}]"
    return line


def _hms(seconds: float) -> str:
    seconds = int(round(seconds))
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}h{m:02d}m{s:02d}s" if h else f"{m}m{s:02d}s" if m else f"{s}s"


# --------------------------------------------------------------------------------------------------------------
# The campaign


def versions() -> dict[str, Any]:
    """killpoint and Python versions, platform, and the git commit of the source tree when there is one."""
    try:
        from importlib.metadata import version

        kp = version("killpoint")
    except Exception:  # not installed as a distribution (e.g. run from a source tree)
        kp = "unknown"
    out: dict[str, Any] = {"killpoint": kp, "python": platform.python_version(), "platform": platform.platform()}
    try:
        proc = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True,
                              timeout=5)
        if proc.returncode == 0:
            out["git"] = proc.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    return out


@dataclass
class CampaignWorkerConfig(WorkerConfig):
    """The workers' config of a campaign: ``deadline`` is when its ``--budget`` ends (wall clock, ``time.time()``:
    the one clock the campaign process and its workers share); shrinking stops there with the best schedule so far."""

    deadline: float | None = None


class Campaign:
    """One campaign directory: discovery, case list, dispatch and the result. Use ``run_campaign``."""

    def __init__(self, options: CampaignOptions, directory: Path, reporter: Reporter, *, command: Sequence[str] = (),
                 resume: bool = False, pool: WorkerPool | None = None):
        self.options = options
        # A pool that outlives this campaign (chaos mutants runs one campaign after another on it): reconfigured
        # for this one, left running after it; None: the campaign starts its own and stops it.
        self.pool = pool
        # Absolute: agents run with their case directory as cwd, so a relative workspace path would point nowhere.
        self.dir = directory.resolve()
        self.reporter = reporter
        self.command = list(command)
        self.resume = resume
        self.cache = Path(options.cache or Path(options.out) / ".cache").resolve()
        self.entries: list[Entry] = []
        self.target = options.the_target
        # Computed once: the bundled agent's source may change while a long campaign runs (a developer editing
        # it); every cache name of this campaign must still be the same one.
        self.baselines = BaselineCache(self.cache, self.target)
        self.recoveries: dict[str, dict[str, Any]] = {}
        self.t0 = time.monotonic()
        self.previous = 0.0  # time spent by earlier sessions of a resumed campaign
        self.interrupted = False
        # Why this session stopped before its case list ended: budget, fail-fast, duration (a random campaign's
        # --duration reached: complete), SIGINT or SIGTERM; None when the list ended.
        self.stopped: str | None = None
        self.discovery: dict[str, dict[str, int]] = {}  # per phase: {"planned", "done"} jobs (cached ones count done)
        self.replayed: list[str] = []  # case ids run first because they failed or were flaky in earlier runs
        # --budget bounds one session (a resumed campaign gets its budget again, or the new one it was given).
        self._deadline = self.t0 + options.budget if options.budget is not None else None

    # ---- set-up ----------------------------------------------------------------------------------------------

    def worker_config(self) -> WorkerConfig:
        o = self.options
        keys = {e.name: self._cache_stem(e) for e in self.entries}
        wall = time.time() + (self._deadline - time.monotonic()) if self._deadline is not None else None
        return CampaignWorkerConfig(
            scenarios={e.name: str(e.path) for e in self.entries}, target=self.target, cache=str(self.cache),
            cache_keys=keys, work=str(self.dir / "cases"),
            limits={"case_seconds": o.case_seconds, "silence_seconds": o.silence_seconds},
            shrink=o.shrink, shrink_calls=o.shrink_calls, keep=o.keep, corpus=o.corpus, deadline=wall,
        )

    def _cache_stem(self, entry: Entry) -> str:
        return self.baselines.stem(entry.name, entry.digest)

    def _out_of_time(self) -> bool:
        return self._deadline is not None and time.monotonic() >= self._deadline

    def discover(self, pool: WorkerPool) -> None:
        """Kill points of every scenario (cached), then (depth 2) each first kill's recovery (cached).

        Raises ``_OutOfTime`` when the budget ends first: the scenarios not discovered yet have no cases in the plan,
        and the result says how many (``discovery``)."""
        todo = {}
        for e in self.entries:
            cached = self.baselines.load(self._cache_stem(e))
            if cached is not None:
                self._adopt(e, cached)
            else:
                todo[pool.submit("baseline", e.name)[0]] = e
        phase = self.discovery["baselines"] = {"planned": len(self.entries), "done": len(self.entries) - len(todo)}
        if todo:
            self.reporter.message(f"baseline: running {len(todo)} scenario(s) twice (crash-free, must agree)")
            self.reporter.start(len(todo), 0, 0, what="baselines")
        try:
            for job, status, payload in self._drain(pool, len(todo)):
                e = todo[job[0]]
                phase["done"] += 1
                self.reporter.job()
                if status != "ok":
                    e.baseline = {"ok": False, "problems": [f"baseline job failed: {payload}"]}
                    continue
                if not payload.get("ok"):
                    self._adopt(e, payload)  # never cached: a fixed scenario or agent must not inherit the failure
                    continue
                self._adopt(e, self.baselines.publish(self._cache_stem(e), payload))
        finally:
            self.reporter.stop()
            for e in self.entries:
                if e.baseline.get("skipped"):
                    self.reporter.message(f"SKIPPED {e.name}: {e.baseline['skipped']}")
                elif e.baseline and not e.ok:
                    for problem in e.baseline.get("problems", []) + e.baseline.get("why", []):
                        self.reporter.message(f"BASELINE {e.name}: {problem} (its cases are not run)")
                for note in e.baseline.get("notes") or []:
                    self.reporter.message(f"note {e.name}: {note}")
        if self.options.mode == "exhaustive" and self.options.depth == 2:
            self._discover_recoveries(pool)

    def _adopt(self, e: Entry, value: Mapping[str, Any]) -> None:
        e.baseline = {k: value.get(k) for k in ("ok", "problems", "durations", "failures", "case_dirs")}
        # A probe scenario's: why it did not run; what its crash-free runs showed; its environment's `pip freeze`.
        for k in ("skipped", "notes", "environment"):
            if value.get(k):
                e.baseline[k] = value[k]
        e.baseline["transactions"] = len(value.get("transactions", []))
        if value.get("ok"):
            e.points = _points(e, value["transactions"])
        else:
            from chaos.transcript import baseline_why

            # Why the crash-free run failed, in the agent's own words: a tool's error result, its stderr tail.
            e.baseline["why"] = baseline_why(value.get("case_dirs") or [])

    def _discover_recoveries(self, pool: WorkerPool) -> None:
        first_policy = Exhaustive(("kill",), pinned=False)
        jobs: dict[int, tuple[Entry, str]] = {}
        o = self.options
        # First kills whose recovery an earlier session of this campaign discovered before its budget ran out.
        partial: dict[str, dict[str, Any]] = read_json(self.dir / PARTIAL_RECOVERIES) or {}
        known: dict[str, dict[str, Any]] = {}
        wanted: dict[str, list[str]] = {}
        phase = self.discovery["recoveries"] = {"planned": 0, "done": 0}
        for e in self.entries:
            if not e.ok or o.pinned_only or (o.regressions_pinned and REGRESSION_TAG in e.points.tags):
                continue  # its schedules are pinned: no second level to discover
            if e.points.vocabulary is not None:
                continue  # a probe scenario: depth 1 only
            firsts = [case.schedule[0] for case in first_policy.cases([e.points])]
            phase["planned"] += len(firsts)
            cached = self.baselines.load(self.baselines.recoveries_stem(e.name, e.digest))
            if cached is not None:
                self.recoveries[e.name] = cached
                phase["done"] += len(firsts)
                continue
            wanted[e.name] = firsts
            known[e.name] = dict(partial.get(e.name) or {})
            for first in firsts:
                if first in known[e.name]:
                    phase["done"] += 1
                else:
                    jobs[pool.submit("recovery", e.name, first)[0]] = (e, first)
        if jobs:
            self.reporter.message(f"depth 2: discovering the recovery after {len(jobs)} first kill(s)")
            self.reporter.start(len(jobs), 0, 0, what="depth-2 recoveries")
        try:
            for job, status, payload in self._drain(pool, len(jobs)):
                e, first = jobs[job[0]]
                phase["done"] += 1
                self.reporter.job()
                # None: the first kill was not reached (or the job failed): it has no second level.
                known[e.name][first] = payload["recovery"] if status == "ok" and payload.get("reached") else None
                if len(known[e.name]) == len(wanted[e.name]):
                    stem = self.baselines.recoveries_stem(e.name, e.digest)
                    found = {k: v for k, v in known[e.name].items() if v is not None}
                    self.recoveries[e.name] = self.baselines.publish(stem, found)
        finally:
            self.reporter.stop()
            unfinished = {name: got for name, got in known.items() if len(got) < len(wanted[name])}
            if unfinished:
                write_json(self.dir / PARTIAL_RECOVERIES, unfinished)
            else:
                (self.dir / PARTIAL_RECOVERIES).unlink(missing_ok=True)
            for name, got in unfinished.items():  # what is known already is planned; the rest after a resume
                self.recoveries[name] = {k: v for k, v in got.items() if v is not None}
            for e in self.entries:
                if e.ok and e.name in self.recoveries:
                    rec = {k: Recovery.from_json(v) for k, v in self.recoveries[e.name].items()}
                    e.points = dataclasses.replace(e.points, recoveries=rec)

    def _drain(self, pool: WorkerPool, count: int) -> Iterator[tuple[tuple, str, Any]]:
        got = 0
        while got < count:
            if self._out_of_time():
                pool.cancel_queued()
                raise _OutOfTime()
            item = pool.next_result(timeout=1.0)
            if item is not None:
                got += 1
                yield item

    # ---- the case list ---------------------------------------------------------------------------------------

    def library(self) -> list[ScenarioPoints]:
        return [e.points for e in self.entries if e.ok and e.points is not None]

    def cases(self) -> Iterator[CaseSpec]:
        """The campaign's case list (lazy: random --duration is endless), after ``--shard``."""
        o = self.options
        everything = self.library()
        # Probe scenarios (a Python program, chaos.probe): a kill (or dresume) at every durable write, depth 1, and
        # their pinned schedules. int/ioerror/torn/powerloss need the session contract's announced offsets and
        # abort protocol, depth 2 its durable-state digests: not offered (docs/frameworks.md).
        probes = [p for p in everything if p.vocabulary is not None]
        lib = [p for p in everything if p.vocabulary is None]
        if o.mode == "random":
            stream: Iterable[CaseSpec] = Random(o.seed or 0, o.cases, o.max_faults, tuple(o.random_actions)).cases(lib)
        else:
            pinned_only = [p for p in lib if o.pinned_only or (o.regressions_pinned and REGRESSION_TAG in p.tags)]
            enumerated = [p for p in lib if p not in pinned_only]
            actions = tuple(a for a in ("kill", "int", "ioerror", "dresume") if a in o.faults)
            streams: list[Iterable[CaseSpec]] = [Exhaustive(actions, pinned=o.pinned).cases(enumerated)]
            if "torn" in o.faults or "powerloss" in o.faults:
                streams.append(Torn(powerloss="powerloss" in o.faults, torn="torn" in o.faults).cases(enumerated))
            if o.depth == 2:
                streams.append(Depth2().cases(enumerated))
            streams.append(Exhaustive((), pinned=True).cases(pinned_only))
            probe_actions = tuple(a for a in PROBE_ACTIONS if a in o.faults)
            streams.append(Exhaustive(probe_actions if not o.pinned_only else (), pinned=o.pinned or o.pinned_only
                                      ).cases(probes))
            stream = _chain(streams)
        if o.shard:
            k, n = parse_shard(o.shard)
            stream = shard(stream, k, n)
        return iter(stream)

    def series(self) -> dict[str, Any]:
        """Which earlier campaigns this one is compared with (``chaos.report.history``): same target, same scenarios."""
        from chaos.report.history import series_of

        return series_of(self.options.target, [e.name for e in self.entries])

    def ordered_cases(self, done: Container[str] = ()) -> Iterator[CaseSpec]:
        """``cases()`` with the cases that failed or were flaky in earlier runs of this series first (most recent
        first), unless ``--no-replay``: a regression shows in the first seconds (Hypothesis's example database).
        Only cases of the current plan are moved, none is added; an endless random list keeps its order."""
        o = self.options
        cases = self.cases()
        if not o.replay or (o.mode == "random" and o.cases is None):
            return cases
        from chaos.report.history import replay_ids

        wanted = [i for i in replay_ids(self.dir.parent, self.series(), exclude=self.dir.name) if i not in done]
        if not wanted:
            return cases
        listed = list(cases)
        by_id = {c.id: c for c in listed}
        first = [by_id[i] for i in wanted if i in by_id]
        if first:
            self.replayed = [c.id for c in first]
            self.reporter.message(f"replay: {len(first)} case(s) that failed or were flaky in earlier runs go first "
                                  "(--no-replay: plan order)")
        chosen = set(self.replayed)
        return iter(first + [c for c in listed if c.id not in chosen])

    def plan(self) -> dict[str, Any]:
        """Planned coverage totals (``fact@phase`` → kill points planned) and the case count (None: endless)."""
        o = self.options
        points: Counter = Counter()
        recovery: Counter = Counter()
        if o.mode == "random":
            # The space random sampling explores: every baseline transaction at every phase (shared by all shards).
            for p in self.library():
                for tx in p.transactions:
                    for phase in ("before-write", "after-write", "after-sync"):
                        for fact in dict.fromkeys(tx.facts):
                            points[f"{fact}@{phase}"] += 1
            # Distinct ids: a seeded stream may draw the same schedule twice, and a case runs (and counts) once.
            count = None if o.cases is None else len({c.id for c in self.cases()})
            return {"cases": count, "space": "shared", "points": dict(points), "recovery": {}}
        count = 0
        for case, facts, level in self._targets():
            count += 1
            if facts is None:
                continue
            table = points if level == 1 else recovery
            for fact in _coverage_facts(facts):
                table[f"{fact}@{case.faults[-1].point.phase}"] += 1
        return {"cases": count, "space": "partition", "points": dict(points), "recovery": dict(recovery)}

    def _targets(self) -> Iterator[tuple[CaseSpec, tuple[str, ...] | None, int]]:
        """Each case with the facts of the transaction its last fault targets (None for pinned), and its level."""
        by_name = {p.scenario: p for p in self.library()}
        for case in self.cases():
            p = by_name[case.scenario]
            if case.origin in ("exhaustive", "torn"):
                yield case, _facts_at(p.transactions, case.faults[0]), 1
            elif case.origin == "depth2":
                rec = p.recoveries.get(case.schedule[0])
                yield case, _facts_at(rec.transactions if rec else (), case.faults[1]), 2
            else:
                yield case, None, 1

    # ---- running ---------------------------------------------------------------------------------------------

    def run(self, *, list_only: bool = False) -> CampaignResult | list[str]:
        o = self.options
        self.entries = load_library(o.scenarios, o.tags)
        probes = [e.name for e in self.entries if is_probe(e.scenario)]
        if probes and (o.mode == "random" or not set(PROBE_ACTIONS) & set(o.faults)):
            # Said, never silent: their baselines run, their cases do not.
            self.reporter.message(f"{len(probes)} probe scenario(s) get no case in this campaign: they are run at "
                                  "depth 1 with kill/dresume faults only (exhaustive mode; docs/frameworks.md)")
        if list_only:
            # Listing needs the kill points (cached, or baselines to run) but leaves no campaign directory behind.
            with tempfile.TemporaryDirectory(prefix="killpoint-list-") as tmp:
                self.dir = Path(tmp)
                self._deadline = None  # listing is not a run: it lists every case
                with WorkerPool(self.worker_config(), o.workers or os.cpu_count() or 1) as pool:
                    self.discover(pool)
                return [c.id for c in self.cases()]
        self._write_params()
        plan: dict[str, Any] | None = None
        with _sigterm_as_interrupt() as guard:
            size = o.workers or os.cpu_count() or 1
            if self.pool is None:
                pool = WorkerPool(self.worker_config(), size)
            else:
                pool = self.pool.reconfigure(self.worker_config(), size)
            try:
                try:
                    self.discover(pool)
                except _OutOfTime:
                    self.stopped = "budget"
                    self.reporter.message(f"time budget of {_hms(o.budget or 0)} used up during discovery: no more "
                                          "cases are started")
                plan = self.plan()
                self._write_params(plan)
                with Journal(self.dir / JOURNAL) as journal:
                    if self.stopped is None:
                        self._dispatch(pool, journal, plan)
            except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM (Terminated)
                self.interrupted = True
                # chaos.cli.Stopped (SIGTERM or SIGHUP outside the guard) carries its signal number.
                signum = getattr(exc, "signum", None)
                self.stopped = "SIGTERM" if isinstance(exc, Terminated) else \
                    signal.Signals(signum).name if isinstance(signum, int) else "SIGINT"
                if plan is None:  # stopped during discovery: record what is planned so far
                    self._write_params(self.plan())
            finally:
                guard.armed = False
                self.reporter.stop()
                if self.pool is None or pool.pending:
                    # A borrowed pool is stopped only when jobs are still in it (an interrupt): their workers are
                    # mid-case, and the next campaign gets fresh ones.
                    pool.cancel_queued()
                    pool.close()
            # Cases cut short in a worker (stopped or killed mid-case: this session's interrupt, an earlier one's
            # SIGKILL) leave their names as links to scratch directories that are gone: not case directories.
            from chaos import scratch

            scratch.remove_dangling(self.dir / "cases")
            params = read_campaign(self.dir)
            params.update(elapsed=self._elapsed(), stopped=self.stopped, discovery=self.discovery,
                          replayed=self.replayed)
            write_campaign(self.dir, params)
            result = build_result(params, read_journal(self.dir / JOURNAL), duration=self._elapsed(),
                                  interrupted=self.interrupted)
            write_json(self.dir / RESULT, result.to_json())
            if o.history:
                self._update_history(result)
        return result

    def _update_history(self, result: CampaignResult) -> None:
        """``<out>/history.json`` and ``<out>/index.html``; a history that cannot be written is one line, never the
        campaign's failure."""
        from chaos.report.history import update_history

        try:
            update_history(self.dir.parent, self.dir, result, series=self.series())
        except (ChaosError, OSError, ValueError) as exc:  # ValueError: an unreadable history.json, named
            self.reporter.message(f"history: not updated: {exc}")

    def _elapsed(self) -> float:
        return round(time.monotonic() - self.t0 + self.previous, 3)

    def _write_params(self, plan: Mapping[str, Any] | None = None) -> None:
        params = read_campaign(self.dir) if (self.dir / "campaign.json").exists() else {}
        if not params:
            params = {"options": self.options.to_json(), "command": self.command, "versions": versions(),
                      "started": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                      "name": self.options.name, "sessions": []}
        if plan is None:
            params["sessions"] = [*params.get("sessions", []), {
                "started": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"), "command": self.command,
                "budget": self.options.budget}]
            self.previous = float(params.get("elapsed", 0.0))
        else:
            params["plan"] = dict(plan)
            # Scenarios whose baseline never ran (the budget ended first) have no entry: nothing failed there.
            params["baselines"] = {e.name: {**e.baseline, "file": str(e.path), "digest": e.digest,
                                            **({"probe": True, "expect_failure": e.scenario.expect_failure}
                                               if is_probe(e.scenario) else {})}
                                   for e in self.entries if e.baseline}
            params["discovery"] = self.discovery
            params["scenario_names"] = [e.name for e in self.entries]  # the series of chaos.report.history
        write_campaign(self.dir, params)

    def _dispatch(self, pool: WorkerPool, journal: Journal, plan: Mapping[str, Any]) -> None:
        o = self.options
        done = len(journal)
        failures = sum(1 for r in journal if r["status"] == FAIL)
        total = plan.get("cases")
        if total is not None:
            # Printed before the first case (the nightly depth-2 list can be long): a case with a kill costs about
            # one and a half crash-free runs (the restart and the convergence probe on top).
            mean = _mean([d for e in self.entries for d in (e.baseline.get("durations") or [])]) or 1.0
            workers = o.workers or os.cpu_count() or 1
            eta = (total - done) * mean * 1.5 / workers
            # (A shard plans its part of the distinct draws: how many repeated is not known from it alone.)
            repeats = (o.cases - total) if o.mode == "random" and o.cases and not o.shard else 0
            self.reporter.message(f"{total} cases ({done} already done), ETA ~{_hms(eta)} on {workers} worker(s)"
                                  + (f"; {repeats} of the {o.cases} seeded draws repeated an earlier schedule "
                                     "(each case runs once)" if repeats > 0 else ""))
        cases = self.ordered_cases(journal)
        self.reporter.start(total, done, failures)
        exhausted = halted = False
        submitted: set[str] = set()  # a random stream may repeat a case id: it runs once
        window = 2 * (o.workers or os.cpu_count() or 1)
        try:
            while True:
                while not (exhausted or halted) and pool.pending < window:
                    case = next(cases, None)
                    if case is None:
                        exhausted = True
                    elif case.id not in journal and case.id not in submitted:
                        submitted.add(case.id)
                        pool.submit("case", case.id, case.origin, case.index)
                if pool.pending == 0:
                    break
                item = pool.next_result(timeout=1.0)
                if item is not None:
                    job, status, payload = item
                    record = payload if status == "ok" else _error_record(job, status, payload)
                    record["finished_at"] = round(time.time(), 3)
                    journal.append(record)
                    self.reporter.case(record)
                    if o.fail_fast and record["status"] == FAIL and not halted:
                        halted, self.stopped = True, "fail-fast"
                        pool.cancel_queued()
                        self.reporter.message("--fail-fast: a failure reproduced; finishing the cases in flight")
                if halted or exhausted:
                    continue
                # --duration defines a random campaign (its total across resumed sessions: reaching it completes
                # the campaign); --budget bounds one session (discovery, cases and shrinking).
                if o.mode == "random" and o.duration is not None and self._elapsed() > o.duration:
                    halted, self.stopped = True, "duration"
                    pool.cancel_queued()
                    self.reporter.message(f"duration of {_hms(o.duration)} reached: no more cases are started")
                elif self._out_of_time():
                    halted, self.stopped = True, "budget"
                    pool.cancel_queued()
                    self.reporter.message(f"time budget of {_hms(o.budget or 0)} used up: no more cases are started "
                                          "(the cases in flight finish, their shrinking stops at the budget)")
        finally:
            self.reporter.stop()


def _chain(streams: Iterable[Iterable[CaseSpec]]) -> Iterator[CaseSpec]:
    seen: set[str] = set()
    for stream in streams:
        for case in stream:
            if case.id not in seen:
                seen.add(case.id)
                yield case


def _facts_at(transactions: Sequence[Transaction], fault) -> tuple[str, ...] | None:
    for tx in transactions:
        if tx.point(fault.point.phase) == fault.point:
            return tx.facts
    return None


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _error_record(job: tuple, status: str, payload: Any) -> dict[str, Any]:
    from chaos.schedules import spec_from_id

    _, kind, args = job
    cid = args[0]
    try:
        spec = spec_from_id(cid, origin=args[1], index=args[2])
        scenario, schedule = spec.scenario, list(spec.schedule) + [str(f) for f in spec.llm]
    except ChaosError:  # a probe scenario's case id (its own fact vocabulary): keep the schedule as written
        scenario, _, rest = cid.partition("::")
        schedule = rest.split("+") if rest else []
    return case_record(id=cid, scenario=scenario, schedule=schedule, origin=args[1], index=args[2],
                       first=schedule[0] if schedule else "", status=ERROR, verdict=status,
                       detail=str(payload).strip().splitlines()[-1] if payload else status, harness_error=str(payload),
                       failures=[], duration=0.0, kills=0, restarts=0, reached=[], fired=False, rules=[], keys=[],
                       minimal=None, case_dir=None, run=None, tags=[])


# What a campaign directory's result.json keeps that its journal does not (how long its sessions ran, whether one
# was interrupted, the shards of a merge), and the type each must have to be taken.
_STORED_RESULT = {"duration": float, "interrupted": bool, "shards": list[str]}


def stored_result(directory: str | Path) -> dict[str, Any] | None:
    """Those members of ``directory``'s result.json, each only when it has its type (the journal is the record:
    render, history and merge rebuild the rest from it); None when there is no such file, or it is no JSON object
    (the campaign did not finish, or the file is damaged)."""
    from chaos import shapes

    value = read_json(Path(directory) / RESULT)
    if not isinstance(value, dict):
        return None
    return {key: value[key] for key, kind in _STORED_RESULT.items() if key in value and shapes.fits(value[key], kind)}


def stored_options(directory: str | Path) -> CampaignOptions:
    """The options a campaign directory was started with (``--resume``); ``CampaignError`` when it is not one."""
    try:
        params = read_campaign(directory)
    except JournalError as exc:
        raise CampaignError(str(exc)) from None
    return resumed_options(params, Path(directory))  # checked: a hand-edited file gives lines, not a traceback


def default_name() -> str:
    return "campaign-" + _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%d-%H%M%S")


def run_campaign(options: CampaignOptions, *, reporter: Reporter | None = None, command: Sequence[str] = (),
                 resume: str | Path | None = None, list_only: bool = False, workers: int | None = None,
                 budget: float | None = None, pool: WorkerPool | None = None) -> CampaignResult | list[str]:
    """Run (or, with ``resume``, continue) a campaign; ``list_only`` returns the case ids without running them.

    Callers in a script must guard it with ``if __name__ == "__main__":``: workers come from a multiprocessing
    forkserver, which imports the main module. On resume ``workers`` overrides the stored count (another machine)
    and ``budget`` the stored per-session budget (seconds); every other option is the stored campaign's. ``pool``:
    workers that outlive the campaign (``Campaign``), for a caller that runs several.
    """
    reporter = reporter or Reporter()
    if resume is not None:
        directory = Path(resume)
        options = stored_options(directory)
        if workers:
            options.workers = workers
        if budget is not None:
            options.budget = budget
        return _locked_run(Campaign(options, directory, reporter, command=command, resume=True))
    options.check()
    if options.pinned_only:
        entries = load_library(options.scenarios, options.tags)
        if not any(e.scenario.schedules for e in entries):
            # Nothing would run, and an empty campaign reports itself complete and held: a CI job that checks
            # nothing must not go green. (Before any directory is made: nothing is left behind.)
            raise CampaignError(f"--pinned-only: none of the {len(entries)} selected scenario(s) has pinned "
                                "[[schedules]]")
    if list_only and options.mode == "random" and options.cases is None:
        raise CampaignError("--list needs a finite case list: use --cases N with --mode random")
    options.name = options.name or default_name()
    directory = Path(options.out) / options.name
    if not list_only:
        if (directory / "campaign.json").exists():
            raise CampaignError(f"{directory}: a campaign already ran here; continue it with --resume {directory} "
                                "or choose another --name")
    _make_directories(options, None if list_only else directory)
    return _locked_run(Campaign(options, directory, reporter, command=command, pool=pool), list_only=list_only)


def _make_directories(options: CampaignOptions, directory: Path | None) -> None:
    """Create the campaign directory (None: listing, which keeps none) and the kill-point cache; one line when
    ``--out``/``--cache`` is a file or cannot be created."""
    cache = Path(options.cache or Path(options.out) / ".cache")
    for path, flag in ((directory, "--out"), (cache, "--cache" if options.cache else "--out")):
        if path is None:
            continue
        try:
            path.mkdir(parents=True, exist_ok=True)
        except (OSError, ValueError) as exc:  # ValueError: an embedded NUL
            reason = getattr(exc, "strerror", None) or str(exc)
            raise CampaignError(f"{flag} {getattr(options, flag[2:])!r}: cannot create the directory {path}: "
                                f"{reason}") from None


def _check_writable(directory: Path) -> None:
    """One line, before any baseline runs, when a resumed campaign could not write its files: its journal (appended
    to) and new files in its directory (campaign.json is replaced through a temporary file, reports are written).
    A read-only copy or an immutable directory would otherwise fail at its first write, as an internal error."""
    import tempfile

    try:
        os.close(os.open(directory / JOURNAL, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644))
        fd, name = tempfile.mkstemp(prefix=".write-check.", dir=directory)
        os.close(fd)
        os.unlink(name)
    except OSError as exc:
        raise CampaignError(f"--resume {directory}: cannot write in the campaign directory: "
                            f"{exc.strerror or exc}") from None


def _locked_run(campaign: Campaign, *, list_only: bool = False) -> CampaignResult | list[str]:
    """Run ``campaign`` holding its directory's lock for its whole life (one campaign per directory); listing
    keeps no directory and takes no lock. Journal problems (a locked directory, a corrupt journal line) become one
    ``CampaignError`` line each."""
    if list_only:
        return campaign.run(list_only=True)
    try:
        with CampaignLock(campaign.dir, campaign.command):
            if campaign.resume:
                read_lines(campaign.dir / JOURNAL)  # a corrupt journal line is reported before any baseline runs
                _check_writable(campaign.dir)
            return campaign.run()
    except JournalError as exc:
        raise CampaignError(str(exc).splitlines()) from None


def _target_problems(target: Target, where: str) -> list[str]:
    """The values of a target read back from ``campaign.json`` that a target file could not have held (what
    ``chaos.target.load_target`` refuses in a file), one line each."""
    from chaos import target as tg
    from chaos.oracle import INVARIANTS

    checks = [
        ("kind", target.kind in tg.KINDS, f"one of {', '.join(tg.KINDS)}"),
        ("launcher", getattr(target, "launcher", tg.LAUNCHERS[0]) in tg.LAUNCHERS, f"one of {', '.join(tg.LAUNCHERS)}"),
        ("planner_scope", target.planner_scope in tg.PLANNER_SCOPES, f"one of {', '.join(tg.PLANNER_SCOPES)}"),
        ("command", bool(target.command) and all(target.command), "a non-empty list of non-empty strings"),
        # An empty template is "not offered" (load_target stores plan, bugs and describe so for a target file that
        # does not name them), not a mistake: only the verbs a target must have need an argv.
        ("launch", all(key in tg.LAUNCH_KEYS and (argv or key in tg.OPTIONAL_LAUNCH_KEYS)
                       for key, argv in target.launch), f"argv templates for some of {', '.join(tg.LAUNCH_KEYS)}"),
        ("invariants", set(target.invariants) <= set(INVARIANTS), f"some of {', '.join(INVARIANTS)}"),
        ("planner_timeout", target.planner_timeout is None or tg.planner_seconds(target.planner_timeout) is not None,
         "a positive number of seconds"),
    ]
    return [f"{where}.{name}: expected {what}" for name, ok, what in checks if not ok]


def resumed_options(params: Mapping[str, Any], directory: Path) -> CampaignOptions:
    """The options of the campaign in ``directory`` (its ``campaign.json`` already read as ``params``), checked as
    a new campaign's are: one ``CampaignError`` line per wrongly typed or inconsistent value, never a traceback."""
    where = str(directory / CAMPAIGN)
    problems = campaign_problems(params, where)  # the other members (as read_campaign checks them)
    if "options" not in params:
        problems.append(f"{where}: options: required key is missing")
    else:
        try:
            options = CampaignOptions.from_json(params["options"], where=f"{where}: options")
            options.check()
        except CampaignError as exc:
            problems += [line if line.startswith(where) else f"{where}: options: {line}" for line in exc.messages]
    if problems:
        raise CampaignError(problems)
    return options


# --------------------------------------------------------------------------------------------------------------
# The result


@dataclass
class CampaignResult:
    """The machine-readable result of a campaign (``result.json``); ``chaos.report`` renders it.

    ``records`` (the journal's case records, in journal order) is not part of ``to_json()``: the journal is.
    ``complete``: every planned case ran and discovery finished (a random ``--duration`` campaign: its duration was
    reached), and nothing interrupted it; ``stopped`` says why a session stopped early; ``discovery`` counts the
    discovery jobs planned and done per phase (a scenario not discovered has no cases in ``cases["planned"]``).
    """

    name: str
    mode: str
    depth: int
    seed: int | None
    shard: str | None
    command: list[str]
    target: dict[str, Any]
    started: str
    duration: float
    complete: bool
    interrupted: bool
    cases: dict[str, int]
    kills: int
    restarts: int
    cases_per_second: float
    failures_by_invariant: dict[str, int]
    failures: list[dict[str, Any]]
    flaky: list[dict[str, Any]]
    errors: list[dict[str, Any]]
    coverage: dict[str, Any]
    baselines: dict[str, Any]
    versions: dict[str, Any]
    shards: list[str] = field(default_factory=list)
    stopped: str | None = None
    discovery: dict[str, dict[str, int]] = field(default_factory=dict)
    replayed: list[str] = field(default_factory=list)
    records: list[dict[str, Any]] = field(default_factory=list, repr=False)

    @property
    def undiscovered(self) -> dict[str, int]:
        """Discovery jobs not done per phase (``baselines``, ``recoveries``): their cases are not even planned."""
        return {k: int(v.get("planned", 0)) - int(v.get("done", 0)) for k, v in self.discovery.items()
                if int(v.get("planned", 0)) > int(v.get("done", 0))}

    def not_run_text(self) -> str:
        """How much did not run, in one line (empty for a complete campaign)."""
        if self.complete:
            return ""
        c = self.cases
        parts = [f"{c.get('not_run', 0)} of {c.get('planned', 0)} planned case(s) did not run"]
        if self.mode == "random" and c.get("not_run", 0) == 0 and self.stopped != "duration":
            parts = [f"{c.get('done', 0)} case(s) ran before the duration was reached"
                     if self.stopped is None else f"{c.get('done', 0)} case(s) ran"]
        undiscovered = self.undiscovered
        skipped = [name for name, b in self.baselines.items() if b.get("skipped")]
        if skipped:
            parts.append(f"{len(skipped)} target(s) skipped, their environment not prepared ({', '.join(skipped)}): "
                         "run `chaos targets prepare`")
        died = sum(1 for r in self.records if run_again(r))
        if died:
            parts.append(f"{died} case(s) whose worker process died mid-case are run again by --resume")
        if undiscovered.get("baselines"):
            parts.append(f"{undiscovered['baselines']} scenario baseline(s) were not run, so their cases are not "
                         "counted")
        if undiscovered.get("recoveries"):
            parts.append(f"{undiscovered['recoveries']} of {self.discovery['recoveries']['planned']} depth-2 "
                         "recoveries were not discovered, so their cases are not counted")
        why = {"budget": "the time budget was used up", "fail-fast": "--fail-fast stopped it",
               "SIGINT": "interrupted (SIGINT)", "SIGTERM": "terminated (SIGTERM)",
               "SIGHUP": "its terminal hung up (SIGHUP)"}.get(self.stopped or "")
        if not why and self.stopped:  # any other stop the campaign recorded is still said, by its name
            why = f"stopped ({self.stopped})"
        return "; ".join(parts) + (f" — {why}" if why else "")

    @property
    def ok(self) -> bool:
        """No reproduced failure, no harness error, every baseline sound (a skipped one — its environment is not
        prepared — is reported apart, with its reason)."""
        return (self.cases.get(FAIL, 0) == 0 and self.cases.get(ERROR, 0) == 0
                and all(b.get("ok") or b.get("skipped") for b in self.baselines.values()))

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out.pop("records")
        return out


def build_result(params: Mapping[str, Any], records: Mapping[str, Mapping[str, Any]] | Sequence[Mapping[str, Any]],
                 *, duration: float, interrupted: bool = False, shards: Sequence[str] = ()) -> CampaignResult:
    """The result of a campaign from its parameters (``campaign.json``: also ``stopped`` and ``discovery``, written
    at the end of each session) and its journal records. Pure."""
    recs = list(records.values()) if isinstance(records, Mapping) else list(records)
    options = CampaignOptions.from_json(params.get("options", {}))
    plan = params.get("plan", {})
    counts = Counter(r["status"] for r in recs)
    planned = plan.get("cases")
    cases = {"planned": planned if planned is not None else len(recs), "done": len(recs),
             **{s: counts.get(s, 0) for s in STATUSES}}
    cases["not_run"] = max(0, cases["planned"] - len(recs)) if planned is not None else 0
    by_invariant: Counter = Counter()
    failed = []
    for r in recs:
        if r["status"] != FAIL:
            continue
        for inv in dict.fromkeys(f["invariant"] for f in r.get("failures", [])):
            by_invariant[inv] += 1
        failed.append(CaseReport.from_json(dict(r)))
    flaky = [{"id": r["id"], "invariants": list(dict.fromkeys(f["invariant"] for f in r.get("failures", []))),
              "rerun": r.get("rerun")} for r in recs if r["status"] == FLAKY]
    errors = [{"id": r["id"], "detail": r.get("detail", "")} for r in recs if r["status"] == ERROR]
    duration = max(duration, 1e-9)
    stopped = params.get("stopped")
    discovery = {k: dict(v) for k, v in (params.get("discovery") or {}).items()}
    discovered = all(int(v.get("done", 0)) >= int(v.get("planned", 0)) for v in discovery.values())
    if options.mode == "random" and options.duration is not None:
        complete = not interrupted and stopped == "duration"  # an endless list: done when its duration is
    else:
        complete = not interrupted and planned is not None and cases["not_run"] == 0 and discovered
    # A target skipped for want of its environment ran nothing: the campaign did not do what it was asked (exit 4,
    # never a green "complete" for a CI job that forgot `chaos targets prepare`).
    complete = complete and not any(b.get("skipped") for b in (params.get("baselines") or {}).values())
    # A case whose worker died was never judged: a --resume runs it again (chaos.journal.run_again), so the campaign
    # is not done until it has.
    complete = complete and not any(run_again(r) for r in recs)
    return CampaignResult(
        name=str(params.get("name") or options.name),
        mode=options.mode,
        depth=options.depth,
        seed=options.seed,
        shard=options.shard,
        command=list(params.get("command", [])),
        target=dict(options.target),
        started=str(params.get("started", "")),
        duration=round(duration, 3),
        complete=complete,
        interrupted=interrupted,
        cases=cases,
        kills=sum(int(r.get("kills", 0)) for r in recs),
        restarts=sum(int(r.get("restarts", 0)) for r in recs),
        cases_per_second=round(len(recs) / duration, 3),
        failures_by_invariant=dict(by_invariant.most_common()),
        failures=deduplicate(failed),
        flaky=flaky,
        errors=errors,
        coverage=coverage(plan, recs, probe_only=_probe_only(params.get("baselines") or {})),
        baselines=dict(params.get("baselines", {})),
        versions=dict(params.get("versions", {})),
        shards=list(shards),
        stopped=stopped,
        discovery=discovery,
        replayed=list(params.get("replayed") or []),
        records=recs,
    )


def exit_code(result: CampaignResult) -> int:
    """``chaos campaign``'s exit status: 143 after SIGTERM, 130 after SIGINT, 1 when a failure reproduced (or a
    baseline failed, or the harness could not run a case) — failures take precedence over incompleteness —, 4
    (``EXIT_INCOMPLETE``) when every case that ran held but not every planned case ran, 0 otherwise."""
    if result.stopped == "SIGTERM":
        return EXIT_SIGTERM
    if result.interrupted:
        return EXIT_SIGINT
    if not result.ok:
        return EXIT_FAILED
    return EXIT_OK if result.complete else EXIT_INCOMPLETE


def resume_command(directory: str | Path) -> str:
    """The exact command that continues the campaign in ``directory`` (``--budget D`` may be added)."""
    return shlex.join(["chaos", "campaign", "--resume", str(directory)])


def _probe_only(baselines: Mapping[str, Mapping[str, Any]]) -> bool:
    """Whether every scenario of the campaign is a probe scenario (no session-contract planner runs in it)."""
    return bool(baselines) and all(b.get("probe") for b in baselines.values())


def coverage(plan: Mapping[str, Any], records: Sequence[Mapping[str, Any]], probe_only: bool = False) -> dict[str, Any]:
    """Kill points reached per ``fact@phase`` (first level and, at depth 2, during recovery) and planner rules.

    A point counts as reached once per distinct target, as the plan counts it: per planned case in an exhaustive
    campaign (every fault action and torn length at a point is a case of its own), per scenario and point in a
    random one (the space it samples); random mode's repeats and merged shards do not inflate it. ``rules`` counts
    restarts per SPEC §14.4 rule; ``rules_unreached`` lists the rules no restart of this campaign exercised (none in
    a campaign of probe scenarios only: no planner runs there).
    """
    reached: dict[str, set[str]] = {"points": set(), "recovery": set()}
    per_key: dict[str, dict[str, set[str]]] = {"points": {}, "recovery": {}}
    rules: Counter = Counter()
    for r in records:
        rules.update(r.get("rules") or [])
        landed = r.get("reached") or []
        if not landed or r.get("status") == ERROR:
            continue
        origin = r.get("origin")
        if origin in ("exhaustive", "torn", "random") and r.get("fired", True):
            target = landed[0] if origin == "random" else landed[-1]
            table, ident = "points", f"{r['scenario']}::{target['point']}" if origin == "random" else r["id"]
        elif origin == "depth2" and r.get("fired") and len(landed) >= 2:
            target, table, ident = landed[-1], "recovery", f"{r['scenario']}::{r['schedule'][0]}+{landed[-1]['point']}"
        else:
            continue
        for fact in _coverage_facts(target["facts"]):
            per_key[table].setdefault(f"{fact}@{target['phase']}", set()).add(ident)
        reached[table].add(ident)
    out: dict[str, Any] = {}
    for table in ("points", "recovery"):
        totals = dict(plan.get(table, {}))
        keys = sorted(set(totals) | set(per_key[table]), key=_coverage_order)
        out[table] = {k: {"reached": len(per_key[table].get(k, ())), "total": int(totals.get(k, 0))} for k in keys}
    out["rules"] = {rule: rules[rule] for rule in PLANNER_RULES if rules[rule]}
    out["rules"].update({rule: n for rule, n in rules.items() if rule not in PLANNER_RULES})
    out["rules_unreached"] = [] if probe_only else [rule for rule in PLANNER_RULES if not rules[rule]]
    return out


def _coverage_facts(facts: Sequence[str]) -> list[str]:
    """The facts a kill point counts under in coverage: every fact of a session-contract transaction; only the
    probe's own word for a probe barrier (its tables vary with thread timing, and would count one point twice)."""
    from chaos.probe import PROBE_FACTS

    if facts and facts[0] in PROBE_FACTS:
        return [facts[0]]
    return list(dict.fromkeys(facts))


def _coverage_order(key: str) -> tuple[int, int]:
    from chaos.faults import FACT_NAMES, PHASES

    fact, _, phase = key.partition("@")
    return (FACT_NAMES.index(fact) if fact in FACT_NAMES else 99, PHASES.index(phase) if phase in PHASES else 9)


def coverage_lines(cov: Mapping[str, Any]) -> list[str]:
    """Human lines: ``toolStarted@after-sync: 14/14 reached`` per point, then the planner rules."""
    lines = []
    for table, title in (("points", "kill points"), ("recovery", "kill points during recovery (depth 2)")):
        rows = cov.get(table) or {}
        if rows:
            lines.append(f"{title}:")
            lines += [f"  {k}: {v['reached']}/{v['total']} reached" for k, v in rows.items()]
    rules = cov.get("rules") or {}
    if rules:
        lines.append("planner rules on restart: " + ", ".join(f"{k}×{v}" for k, v in rules.items()))
    if cov.get("rules_unreached"):
        lines.append("planner rules never reached on restart: " + ", ".join(cov["rules_unreached"]))
    return lines


def probe_lines(result: CampaignResult) -> list[str]:
    """Per probe scenario (a Python program under chaos.probe): its cases and cases/s (case time, summed over the
    workers), its expected failures with their reason, an unexpected pass, or why it was skipped."""
    lines = []
    for name, b in result.baselines.items():
        if not b.get("probe"):
            continue
        if b.get("skipped"):
            lines.append(f"  SKIPPED {name}: {b['skipped']}")
            continue
        recs = [r for r in result.records if r.get("scenario") == name]
        if not recs:
            continue
        spent = sum(float(r.get("duration") or 0) for r in recs)
        by = Counter(r["status"] for r in recs)
        lines.append(f"  target {name}: {len(recs)} cases, {spent:.1f} s of case time ({len(recs) / max(spent, 1e-9):.2f}"
                     f" cases/s), pass {by[PASS]}, fail {by[FAIL]}, expected failure {by[EXPECTED]}, not reached "
                     f"{by[NOT_REACHED]}")
        expected = [r for r in recs if r["status"] == EXPECTED]
        if expected:
            props = Counter(f["invariant"] for r in expected for f in r.get("failures", []))
            points = ", ".join(r["id"].partition("::")[2] for r in expected[:4]) + (" …" if len(expected) > 4 else "")
            lines.append(f"    EXPECTED FAILURE {', '.join(f'{k} ×{v}' for k, v in props.items())} at {points}")
            lines.append(f"      reason: {' '.join(str(b.get('expect_failure')).split())}")
        elif b.get("expect_failure") and by[PASS] and not (by[ERROR] or by[NOT_REACHED] or by[FAIL] or by[FLAKY]):
            lines.append(f"    UNEXPECTED PASS: declared to fail ({' '.join(b['expect_failure'].split())}), but every "
                         "case held")
    return lines


def summary_lines(result: CampaignResult, directory: Path | None = None,
                  reproduce: Mapping[str, str] | None = None) -> list[str]:
    """The end-of-campaign summary printed by the CLI: first, for an incomplete campaign, how much did not run and
    the command that continues it. ``reproduce``: a command per failing case id (the report's bundles), printed
    under the finding its case exemplifies, so the console alone says how to re-run each finding."""
    c = result.cases
    lines = []
    if not result.complete:
        lines.append(f"INCOMPLETE: {result.not_run_text()}")
        if directory is not None:
            lines.append(f"  continue with: {resume_command(directory)}  (add --budget D to give it more time)")
    lines += [
        f"campaign {result.name}: {c['done']}/{c['planned']} cases in {_hms(result.duration)} "
        f"({result.cases_per_second:.2f} cases/s), {result.kills} kills, {result.restarts} restarts",
        f"  pass {c[PASS]}, fail {c[FAIL]}, flaky {c[FLAKY]}, not reached {c[NOT_REACHED]}, error {c[ERROR]}"
        + (f", expected failure {c[EXPECTED]}" if c.get(EXPECTED) else "")
        + (f", not run {c['not_run']}" if c.get("not_run") else ""),
    ]
    lines += probe_lines(result)
    for name, b in result.baselines.items():
        if not b.get("ok") and not b.get("skipped"):
            lines.append(f"  BASELINE {name}: " + "; ".join(b.get("problems") or ["failed"]))
            lines += [f"    {why}" for why in b.get("why") or []]
    cut_short = {r["id"] for r in result.records if (r.get("shrink") or {}).get("exhausted")}
    for g in result.failures:
        what = (f"{g['divergence']} ({g['invariant']})" if g.get("divergence")
                else f"{g['invariant']} ({g['action']} at {g['fact']})")
        note = " (shrinking cut short: best so far)" if g["example"] in cut_short else ""
        lines.append(f"  FAIL {what} ×{g['count']}: minimal {'+'.join(g['minimal'] or [])}{note}  e.g. {g['example']}")
        if (reproduce or {}).get(g["example"]):
            lines.append(f"    reproduce: {reproduce[g['example']]}")
    for f in result.flaky:
        lines.append(f"  FLAKY {f['id']} ({', '.join(f['invariants'])} did not reproduce on re-run)")
    for e in result.errors:
        lines.append(f"  ERROR {e['id']}: {e['detail']}")
    lines += ["  " + line for line in coverage_lines(result.coverage)]
    if directory is not None:
        lines.append(f"  journal and result: {directory}")
    return lines


def merge_problems(dirs: Sequence[str | Path], params_list: Sequence[Mapping[str, Any]]) -> list[str]:
    """Why these campaign directories are not shards of one campaign (one line each; empty: they are). Pure.

    Refused: a directory given twice or a copy of another (same name, start time and shard), and campaigns of
    different scenario sets (names and file digests of their baselines) or different targets (``Target.label``):
    their union would be a report about no campaign that ran."""
    problems = []
    seen: dict[Any, str] = {}
    for d, params in zip(dirs, params_list):
        options = params.get("options") or {}
        for key in (("dir", str(Path(d).resolve())),
                    ("campaign", params.get("name"), params.get("started"), options.get("shard"))):
            if key in seen:
                problems.append(f"report merge: {d} is the same campaign as {seen[key]} (a campaign cannot be merged "
                                "with itself)")
                break
            seen[key] = str(d)
    first_dir, first = dirs[0], params_list[0]

    def scenarios(p: Mapping[str, Any]) -> dict[str, Any]:
        return {name: b.get("digest") for name, b in (p.get("baselines") or {}).items()}

    def target(p: Mapping[str, Any]) -> str:
        return Target.from_json((p.get("options") or {}).get("target")).label()

    for d, params in zip(dirs[1:], params_list[1:]):
        if scenarios(params) != scenarios(first):
            mine, theirs = set(scenarios(params)), set(scenarios(first))
            what = (f"{', '.join(sorted(mine ^ theirs))} not in both" if mine != theirs
                    else "the same scenario names with different file contents")
            problems.append(f"report merge: {d} ran another scenario set than {first_dir} ({what})")
        if target(params) != target(first):
            problems.append(f"report merge: {d} ran target {target(params)!r}, {first_dir} ran {target(first)!r}")
    return problems


def merge_journals(dirs: Sequence[str | Path], *, force: bool = False) -> CampaignResult:
    """One result from several campaign directories (the shards of one campaign, e.g. one per CI job).

    Case records are joined by id (a case found in two journals counts once); planned totals add up for
    partitioned shards and are taken once for random mode (every shard samples the same space); the duration is
    the longest shard's (shards run side by side). Directories that are not shards of one campaign
    (``merge_problems``) are refused unless ``force``; the result is complete only when every shard is.
    """
    if not dirs:
        raise CampaignError("report merge: give at least one campaign directory")
    records: dict[str, dict[str, Any]] = {}
    params_list = []
    durations = []
    for d in dirs:
        try:
            params_list.append(read_campaign(Path(d)))
        except JournalError as exc:
            raise CampaignError(str(exc)) from None
    problems = merge_problems(dirs, params_list)
    if problems and not force:
        raise CampaignError(problems + ["report merge: add --force to merge them anyway"])
    for d, params in zip(dirs, params_list):
        d = Path(d)
        try:
            journal = read_journal(d / JOURNAL)
        except JournalError as exc:
            raise CampaignError(str(exc)) from None
        for cid, rec in journal.items():
            if takes_over(records.get(cid)):  # a shard's worker-died line gives way to another's judged one
                records[cid] = rec
        previous = stored_result(d) or {}
        durations.append(float(previous.get("duration") or params.get("elapsed", 0.0)))
    first = dict(params_list[0])
    plans = [p.get("plan", {}) for p in params_list]
    merged_plan: dict[str, Any] = dict(plans[0])
    if merged_plan.get("space") == "partition":
        for table in ("points", "recovery"):
            total: Counter = Counter()
            for p in plans:
                total.update(p.get(table, {}))
            merged_plan[table] = dict(total)
        counts = [p.get("cases") for p in plans]
        merged_plan["cases"] = None if any(c is None for c in counts) else sum(counts)
    baselines: dict[str, Any] = {}
    for p in params_list:
        baselines.update(p.get("baselines", {}))
    first["plan"], first["baselines"] = merged_plan, baselines
    discovery: dict[str, dict[str, int]] = {}
    for p in params_list:  # every shard discovers the whole set: any shard's gap is a gap of the merge
        for phase, counts in (p.get("discovery") or {}).items():
            total = discovery.setdefault(phase, {"planned": 0, "done": 0})
            total["planned"] += int(counts.get("planned", 0))
            total["done"] += int(counts.get("done", 0))
    first["discovery"] = discovery
    stops = [p.get("stopped") for p in params_list]
    # The merge stopped early if a shard did (the first such reason); it reached its duration if every shard did.
    first["stopped"] = next((s for s in stops if s not in (None, "duration")),
                            stops[0] if len(set(stops)) == 1 else None)
    options = dict(first.get("options", {}))
    options["shard"] = None
    first["options"] = options
    return build_result(first, records, duration=max(durations) if durations else 0.0,
                        shards=[str(Path(d)) for d in dirs])


def write_merged(dirs: Sequence[str | Path], out: str | Path, *, force: bool = False) -> CampaignResult:
    """``chaos report merge``'s data side: the merged journal, ``campaign.json`` and ``result.json`` in ``out``."""
    result = merge_journals(dirs, force=force)
    out = Path(out)
    try:
        occupied = out.exists() and (not out.is_dir() or any(out.iterdir()))
    except OSError as exc:  # a directory we may not list: not ours to write into either
        raise CampaignError(f"--out {out}: cannot read the directory: {exc.strerror}") from None
    if occupied:
        # A new directory only (as --help says): a file, or a user's summary.json/index.html, is never replaced.
        what = "is not a directory" if not out.is_dir() else (
            "already holds a journal" if (out / JOURNAL).exists() else "is not empty")
        raise CampaignError(f"--out {out}: {what}; merge into a new directory")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CampaignError(f"--out {out}: cannot create the directory: {exc.strerror}") from None
    params = dict(read_campaign(dirs[0]))
    params["plan"] = {"cases": result.cases["planned"], "space": "partition",
                      "points": {k: v["total"] for k, v in result.coverage["points"].items()},
                      "recovery": {k: v["total"] for k, v in result.coverage["recovery"].items()}}
    params["baselines"] = result.baselines
    params["options"] = {**params.get("options", {}), "shard": None}
    params["merged_from"] = [str(Path(d).resolve()) for d in dirs]
    params["elapsed"] = result.duration
    params["discovery"], params["stopped"] = result.discovery, result.stopped
    write_campaign(out, params)
    with Journal(out / JOURNAL) as journal:
        for record in result.records:
            journal.append(record)
    write_json(out / RESULT, result.to_json())
    return result
