"""Campaign reports: what a report is about (``CampaignReport`` of ``CaseReport``s) and ``write_reports``.

A report folder ``reports/<campaign>/`` holds three renderings of the same data, each in its own module:

- ``summary.json`` (``chaos.report.summary``): machine-readable totals, failures by invariant, coverage, versions;
- ``junit.xml`` (``chaos.report.junit``): one testcase per scenario × schedule, for CI dashboards;
- ``index.html`` (``chaos.report.html``): a self-contained page for a person, with a timeline per failure.

The inline SVG timeline of one case is ``chaos.report.timeline``; ``chaos.report.render`` turns a campaign directory
(``campaign.json`` + ``journal.jsonl``, ``chaos.campaign``) into these objects, writes a repro bundle per failure
(``chaos.bundle``) and calls ``write_reports`` — that is what ``chaos campaign``, ``chaos report render`` and
``chaos report merge`` run.

The data classes here are a *view* of a finished campaign, decoupled from how the campaign engine stores its
journal and from the oracle's objects (a journal record is a ``CaseReport``'s JSON plus the engine's own keys),
and every renderer is a pure function of them. ``CaseReport.run`` is the supervisor's ``CaseRun.to_json()`` (kept
as plain JSON so a report can be re-rendered from a journal without re-running anything); ``plans`` are the
recovery plans the agent printed on each restart, extracted by the adapter because reading stderr files is I/O.

Invariant protected: a case's status is one of ``STATUSES`` and a failing case names at least one invariant — a
report never shows "failed" without saying which check failed and on what evidence.

Not here: running cases, judging them (``chaos.oracle``), shrinking, or writing repro bundles (``chaos.bundle``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chaos.files import write_atomic

# How a case ended, from the report's point of view.
from chaos.status import EXPECTED, ERROR, FAIL, FLAKY, NOT_REACHED, PASS, STATUSES  # noqa: F401 - re-exported


@dataclass
class InvariantFailure:
    """One invariant that did not hold, with its evidence (any JSON value: line, effect, request...)."""

    invariant: str
    message: str
    evidence: Any = None

    def to_json(self) -> dict[str, Any]:
        return {"invariant": self.invariant, "message": self.message, "evidence": self.evidence}

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> InvariantFailure:
        return cls(str(value.get("invariant", "?")), str(value.get("message", "")), value.get("evidence"))


@dataclass
class CaseReport:
    """One finished case: ``<scenario>::<schedule>`` with its status, failures, and what the supervisor saw."""

    id: str
    scenario: str
    schedule: list[str]
    status: str
    failures: list[InvariantFailure] = field(default_factory=list)
    duration: float = 0.0
    verdict: str = ""  # the supervisor's verdict (exit:0, hang, crash, ...)
    detail: str = ""
    run: dict[str, Any] | None = None  # CaseRun.to_json() of the run the timeline draws
    plans: list[dict[str, Any]] = field(default_factory=list)  # {"launch": i, "plan": {...}} in printed order
    rules: list[str] = field(default_factory=list)  # planner rules (SPEC §14.4 ids) reached on restarts
    minimal: list[str] | None = None  # the shrunk schedule, when shrinking ran
    bundle: str | None = None  # repro bundle folder, relative to the report folder
    repro: str | None = None  # the one command that reproduces this case
    tags: list[str] = field(default_factory=list)
    timeline_of: str | None = None  # when ``run`` is the minimal case's run (shrinking ran): its schedule
    kills: int | None = None  # SIGKILLs performed; None = count them in ``run``
    restarts: int | None = None  # launches after a fault; None = count them in ``run``
    keys: list[list[str]] = field(default_factory=list)  # the engine's dedup keys [invariant, action, fact]
    divergence: dict[str, Any] | None = None  # chaos.divergence.Divergence.to_json(): the first wrong decision
    # Shrinking stopped before the schedule was minimal (its call budget, or the campaign's --budget): ``minimal`` is
    # the best schedule found so far, and every rendering says so.
    shrink_cut_short: bool = False
    # What the campaign engine knows of the case beyond its verdict (chaos.workers): how it was planned, where its
    # faults landed, its re-run and shrinking, what ran it. A journal line is exactly ``to_json()`` of this record.
    origin: str = ""  # the schedule policy that planned it (exhaustive, torn, depth2, random, pinned, shrunk)
    index: int = 0
    first: str | None = None  # depth 2: the first fault
    launches: int = 0
    requests: int = 0
    reached: list[dict[str, Any]] = field(default_factory=list)  # where each fired fault landed (canonical names)
    fired: bool = True  # every fault of the schedule fired
    case_dir: str | None = None  # kept case directory, relative to the campaign directory
    bugs: list[str] = field(default_factory=list)
    target: str = ""  # chaos.target.Target.label()
    rerun: dict[str, Any] | None = None  # the re-run of a failure: status, invariants, case_dir
    shrink: dict[str, Any] | None = None  # invariant, calls, steps, exhausted (cut short), invariants (the minimal's)
    minimal_id: str | None = None
    minimal_case_dir: str | None = None
    minimal_reached: list[dict[str, Any]] | None = None
    harness_error: str | None = None  # an error record: what the harness could not do
    finished_at: float | None = None  # wall-clock time the journal line was written

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"case {self.id}: status {self.status!r} is not one of {', '.join(STATUSES)}")
        if self.status in (FAIL, FLAKY, EXPECTED) and not self.failures:
            raise ValueError(f"case {self.id}: a {self.status} case must name the invariant that failed")

    @property
    def invariants(self) -> list[str]:
        """The failing invariants' names, in order, without repeats."""
        return list(dict.fromkeys(f.invariant for f in self.failures))

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "scenario": self.scenario,
            "schedule": list(self.schedule),
            "status": self.status,
            "failures": [f.to_json() for f in self.failures],
            "duration": self.duration,
            "verdict": self.verdict,
            "detail": self.detail,
            "run": self.run,
            "plans": self.plans,
            "rules": self.rules,
            "minimal": self.minimal,
            "bundle": self.bundle,
            "repro": self.repro,
            "tags": self.tags,
            "timeline_of": self.timeline_of,
            "kills": self.kills,
            "restarts": self.restarts,
            "keys": self.keys,
            "divergence": self.divergence,
            "shrink_cut_short": self.shrink_cut_short,
            **{name: getattr(self, name) for name in _ENGINE_FIELDS},
        }

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> CaseReport:
        data = dict(value)
        data["failures"] = [InvariantFailure.from_json(f) for f in data.get("failures") or []]
        known = cls.__dataclass_fields__
        return cls(**{k: v for k, v in data.items() if k in known})


_ENGINE_FIELDS = ("origin", "index", "first", "launches", "requests", "reached", "fired", "case_dir", "bugs", "target",
                  "rerun", "shrink", "minimal_id", "minimal_case_dir", "minimal_reached", "harness_error",
                  "finished_at")


def case_record(**fields: Any) -> dict[str, Any]:
    """A journal line: the fields given, checked and completed as a ``CaseReport`` (status in the enum, a failure
    named for a failed case, nothing the record type does not know), then its JSON. The one way the engine writes a
    case record; every reader (campaign, reports, history, bundles, mutants, the plugin) reads this shape."""
    unknown = set(fields) - set(CaseReport.__dataclass_fields__)
    if unknown:  # a field the record type does not declare would be dropped silently: a defect of the engine
        raise ValueError(f"case record: unknown field(s) {', '.join(sorted(unknown))}")
    return CaseReport.from_json(fields).to_json()


@dataclass
class CampaignReport:
    """A finished (or interrupted) campaign: its identity, how it was started, and its cases."""

    name: str
    cases: list[CaseReport] = field(default_factory=list)
    mode: str = "exhaustive"
    seed: int | None = None
    command: list[str] = field(default_factory=list)  # the campaign command line, argv form
    agent_bugs: list[str] = field(default_factory=list)
    started: str = ""  # ISO 8601, UTC
    duration: float = 0.0  # wall clock of the campaign (not the sum of case durations: workers run in parallel)
    versions: dict[str, Any] = field(default_factory=dict)
    coverage: dict[str, Any] | None = None  # as computed by the campaign engine; derived from cases when None
    shards: list[str] = field(default_factory=list)  # for a merged report: the shard folders it joins
    planned: int | None = None  # cases the campaign planned (None: endless random mode, or unknown)
    interrupted: bool = False  # a signal (SIGINT, SIGTERM) stopped the campaign
    baselines: dict[str, Any] = field(default_factory=dict)  # per scenario: {"ok", "problems", "why", ...}
    # Every planned case ran (None: unknown, a report built without the engine: then no case is missing and
    # nothing interrupted it). An incomplete report never shows a green banner.
    complete: bool | None = None
    stopped: str | None = None  # why it stopped early: budget, fail-fast, SIGINT, SIGTERM (duration: complete)
    not_run: str = ""  # how much did not run, in one line (chaos.campaign.CampaignResult.not_run_text)
    resume: str | None = None  # the exact command that continues it

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "mode": self.mode,
            "seed": self.seed,
            "command": self.command,
            "agent_bugs": self.agent_bugs,
            "started": self.started,
            "duration": self.duration,
            "versions": self.versions,
            "coverage": self.coverage,
            "shards": self.shards,
            "planned": self.planned,
            "interrupted": self.interrupted,
            "baselines": self.baselines,
            "complete": self.complete,
            "stopped": self.stopped,
            "not_run": self.not_run,
            "resume": self.resume,
            "cases": [c.to_json() for c in self.cases],
        }

    @property
    def is_complete(self) -> bool:
        """``complete``, or for a report built without the engine: nothing interrupted it, no planned case missing."""
        if self.complete is not None:
            return self.complete
        return not self.interrupted and (self.planned is None or len(self.cases) >= self.planned)

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> CampaignReport:
        data = dict(value)
        data["cases"] = [CaseReport.from_json(c) for c in data.get("cases") or []]
        known = cls.__dataclass_fields__
        return cls(**{k: v for k, v in data.items() if k in known})


REPORT_DATA = "report.json"  # the CampaignReport behind the three renderings, so `chaos report render` can redo them


def write_reports(report: CampaignReport, out_dir: str | Path) -> dict[str, Path]:
    """Write ``summary.json``, ``junit.xml``, ``index.html`` (and ``report.json``) into ``out_dir``; return the paths.

    Each file is written to a temporary name and renamed, so a reader (a CI job collecting artifacts while a
    campaign is re-rendered) never sees half a file.
    """
    from chaos.report.html import render_html
    from chaos.report.junit import junit_xml
    from chaos.report.summary import summarize

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    summary = summarize(report)
    paths = {
        "summary": write_atomic(out / "summary.json", json.dumps(summary, indent=2, ensure_ascii=False) + "\n"),
        "junit": write_atomic(out / "junit.xml", junit_xml(report)),
        "html": write_atomic(out / "index.html", render_html(report, summary)),
        "data": write_atomic(out / REPORT_DATA, json.dumps(report.to_json(), ensure_ascii=False) + "\n"),
    }
    return paths



