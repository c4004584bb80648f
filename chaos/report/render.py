"""From a campaign directory to its report folder: journal records → ``CaseReport``s, repro bundles, renderings.

``chaos campaign`` leaves ``reports/<campaign>/`` with ``campaign.json`` (parameters), ``journal.jsonl`` (one record
per finished case) and ``result.json`` (``chaos.campaign.CampaignResult``); failing cases keep their directories
under ``cases/``. This module turns that into the report: a repro bundle per reproduced failure under
``failures/<case>/`` (built from the kept directory of the *minimal* case when shrinking ran), then ``summary.json``,
``junit.xml`` and ``index.html`` beside them. ``chaos report render DIR`` calls ``render_campaign``; ``chaos report
merge DIR… --out DIR`` joins shards with ``chaos.campaign.write_merged`` and renders the result.

Invariant protected: every reproduced failure in the report points at a bundle whose ``repro.sh`` re-runs it — or
the report says why there is none (its case directory was not kept, e.g. ``--keep none``, or it has provider
faults that only ``chaos campaign`` can replay).

Reading the recovery plans printed on stderr happens here (I/O), so the renderers stay pure.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from chaos.files import read_json
from chaos.report import EXPECTED, FAIL, CampaignReport, CaseReport, write_reports

PLAN_PREFIX = "agent: plan "  # the bundled agent prints one such line per recovery plan (agent/loop.py)


def read_plans(run: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """The recovery plans each launch of ``run`` (``CaseRun.to_json()``) printed, as ``{"launch", "plan"}``.

    Missing or unreadable stderr files give no plans (a case directory removed after a pass, a foreign agent that
    prints none): the timeline then shows restarts without their plans rather than failing.
    """
    plans: list[dict[str, Any]] = []
    for launch in (run or {}).get("launches", []):
        path = launch.get("stderr")
        if not path:
            continue
        try:
            text = Path(path).read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        for line in text.splitlines():
            if line.startswith(PLAN_PREFIX):
                try:
                    plan = json.loads(line[len(PLAN_PREFIX):])
                except ValueError:
                    continue
                if isinstance(plan, dict):
                    plans.append({"launch": launch["index"], "plan": plan})
    return plans


def case_report(record: Mapping[str, Any]) -> CaseReport:
    """A journal record (``chaos.workers`` format: the ``CaseReport`` keys plus the engine's own) as a ``CaseReport``."""
    case = CaseReport.from_json(dict(record))
    case.shrink_cut_short = bool((record.get("shrink") or {}).get("exhausted"))
    if not case.plans and case.run:
        case.plans = read_plans(case.run)
    return case


def campaign_report(result: Any, directory: str | Path | None = None) -> CampaignReport:
    """A ``chaos.campaign.CampaignResult`` (with its ``records``) as a ``CampaignReport``; ``directory`` (the campaign
    directory) names the ``--resume`` command an incomplete campaign's report starts with."""
    from chaos.campaign import resume_command
    target = result.target or {}
    mode = result.mode if result.mode != "exhaustive" or result.depth == 1 else f"exhaustive, depth {result.depth}"
    if result.shard:
        mode += f", shard {result.shard}"
    return CampaignReport(
        name=result.name,
        cases=[case_report(r) for r in result.records],
        mode=mode,
        seed=result.seed,
        command=list(result.command),
        agent_bugs=list(target.get("bugs") or []),
        started=result.started,
        duration=float(result.duration),
        versions=dict(result.versions),
        coverage=dict(result.coverage),
        shards=list(result.shards),
        planned=result.cases.get("planned"),
        interrupted=bool(result.interrupted),
        baselines=dict(result.baselines),
        complete=bool(result.complete),
        stopped=result.stopped,
        not_run=result.not_run_text(),
        resume=resume_command(directory) if directory is not None and not result.complete and not result.shards
        else None,
    )


def _target_of(params: Mapping[str, Any]):
    from chaos.campaign import CampaignOptions

    return CampaignOptions.from_json(params.get("options") or {}).the_target


def make_bundles(directory: Path, params: Mapping[str, Any], report: CampaignReport,
                 records: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Write a bundle for each failing case that has a kept directory and none yet; return notes for the others.

    ``records`` are the journal records by case id (for the engine's keys: kept directories, minimal case id).
    Sets ``bundle`` and ``repro`` on the cases that have one.
    """
    from chaos.bundle import BundleError, bundle_dir, write_bundle

    notes: list[str] = []
    options = params.get("options") or {}
    for case in report.cases:
        if case.status not in (FAIL, EXPECTED):  # an expected failure is a probe scenario's: it gets its repro line
            continue
        raw = records.get(case.id, {})
        schedule = list(case.minimal or case.schedule)
        dest = bundle_dir(directory, case.id)
        rel = str(dest.relative_to(directory))
        if (dest / "bundle.json").is_file():
            case.bundle = rel
            case.repro = case.repro or f"sh {shlex.quote(rel)}/repro.sh"
            continue
        if any(s.startswith("llm(") for s in schedule):
            notes.append(f"{case.id}: no repro bundle (provider faults are replayed by `chaos campaign` only)")
            continue
        probe = (params.get("baselines") or {}).get(case.scenario) or {}
        if probe.get("probe"):  # a Python program under the probe: `chaos run` re-runs it (no bundle format yet)
            case.repro = shlex.join(["chaos", "run", str(probe.get("file")), "--kill", "+".join(schedule)])
            continue
        kept = raw.get("minimal_case_dir") if case.minimal else None
        kept = kept or raw.get("case_dir")
        case_dir = directory / kept if kept else None
        if case_dir is None or not (case_dir / "caserun.json").is_file():
            notes.append(f"{case.id}: no repro bundle (its case directory was not kept)")
            continue
        if case.minimal and case.minimal != case.schedule and raw.get("minimal_case_dir"):
            # Draw the minimal case: it is what the bundle re-runs and the simplest story of the failure.
            minimal_run = read_json(case_dir / "caserun.json")
            if minimal_run:
                case.run, case.plans = minimal_run, read_plans(minimal_run)
                case.timeline_of = "+".join(case.minimal)
        failures: list[Any] = list(case.failures)
        result = read_json(case_dir / "result.json")
        if result:  # the minimal run's own findings, when the kept directory is the minimal case's
            failed = [r for r in result.get("invariants", []) if not r.get("ok")]
            if failed:
                failures = [{"invariant": r["name"], "message": (r.get("findings") or [{}])[0].get("message", "failed"),
                             "evidence": r.get("findings")} for r in failed]
        scenario_file = (params.get("baselines") or {}).get(case.scenario, {}).get("file")
        if not scenario_file:
            notes.append(f"{case.id}: no repro bundle (the scenario file is not recorded in campaign.json)")
            continue
        try:
            write_bundle(dest, case_dir=case_dir, scenario_file=scenario_file,
                         case_id=raw.get("minimal_id") or case.id, schedule=schedule, failures=failures,
                         target=_target_of(params), divergence=raw.get("divergence"), original_case=case.id, campaign=report.name,
                         seed=options.get("seed"), command_line=params.get("command") or None,
                         versions=params.get("versions") or None)
        except (BundleError, OSError) as exc:
            notes.append(f"{case.id}: no repro bundle ({exc})")
            continue
        case.bundle = rel
        case.repro = f"sh {shlex.quote(rel)}/repro.sh"
    return notes


class Rendered(NamedTuple):
    """What rendering a campaign directory wrote: the renderings' paths, one note per failure left without a
    bundle, and the reproduce command (``reproduce_command``) of each finding's example case — one per failure group
    of the result, as the console lists findings — by case id."""

    paths: dict[str, Path]
    notes: list[str]
    reproduce: dict[str, str]


def reproduce_command(directory: Path, case: CaseReport) -> str | None:
    """The one command that re-runs ``case`` from the directory the report's ``directory`` was named from: its
    bundle's ``repro.sh`` (the report's own ``repro`` is relative to the report), else the report's line (a probe
    scenario's ``chaos run``); None when it has neither."""
    if case.bundle:
        return f"sh {shlex.quote(str(directory / case.bundle / 'repro.sh'))}"
    return case.repro


def render_result(result: Any, directory: str | Path, params: Mapping[str, Any] | None = None,
                  *, bundles: bool = True) -> Rendered:
    """Bundles (unless ``bundles`` is False) and the three renderings of ``result`` in ``directory``."""
    from chaos.journal import read_campaign

    directory = Path(directory)
    params = params if params is not None else read_campaign(directory)
    report = campaign_report(result, directory)
    records = {r["id"]: r for r in result.records}
    notes = make_bundles(directory, params, report, records) if bundles else []
    paths = write_reports(report, directory)
    cases = {case.id: case for case in report.cases}
    examples = [g["example"] for g in result.failures if g.get("example") in cases]
    reproduce = {cid: command for cid in examples if (command := reproduce_command(directory, cases[cid]))}
    return Rendered(paths, notes, reproduce)


def render_campaign(directory: str | Path) -> Rendered:
    """``chaos report render DIR``: rebuild the result from the journal and (re)write bundles and renderings."""
    from chaos.campaign import build_result, stored_result
    from chaos.journal import JOURNAL, read_campaign, read_journal

    directory = Path(directory)
    params = read_campaign(directory)
    previous = stored_result(directory) or {}
    result = build_result(params, read_journal(directory / JOURNAL),
                          duration=float(previous.get("duration") or params.get("elapsed") or 0.0),
                          interrupted=previous.get("interrupted", False), shards=previous.get("shards", []))
    return render_result(result, directory, params)


def merge_campaigns(dirs: Sequence[str | Path], out: str | Path, *,
                    force: bool = False) -> tuple[Any, Rendered]:
    """``chaos report merge DIR… --out OUT``: join the shards' journals into OUT, then render OUT.

    Bundles are written from each shard's kept case directories (the merged journal's paths are relative to the
    shard that ran the case), so the merged report links bundles under OUT/failures/.
    """
    from chaos.campaign import write_merged
    from chaos.journal import read_campaign

    result = write_merged(dirs, out, force=force)
    out = Path(out)
    params = read_campaign(out)
    from chaos.journal import JOURNAL, read_journal, takes_over

    # A merged record's case_dir is relative to the shard it came from: point it at that shard's directory.
    origin: dict[str, Path] = {}
    kept: dict[str, dict] = {}
    for d in dirs:  # the shard whose line the merge kept (chaos.campaign.merge_journals: the same rule)
        for cid, rec in read_journal(Path(d) / JOURNAL).items():
            if takes_over(kept.get(cid)):
                kept[cid], origin[cid] = rec, Path(d)
    for record in result.records:
        shard = origin.get(record["id"])
        for key in ("case_dir", "minimal_case_dir"):
            if shard is not None and record.get(key):
                record[key] = str((shard / record[key]).resolve())
    return result, render_result(result, out, params)
