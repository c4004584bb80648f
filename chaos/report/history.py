"""``<out>/history.json`` and ``<out>/index.html``: every campaign under one ``--out`` directory, night after night.

What a nightly team reads in the morning is not one campaign but the difference from yesterday: which failures are
*new*, which are *still failing*, which are *fixed*, which are *flaky* (with each flaky case's outcomes run by run),
and whether last night's run was even complete. Every campaign written under an ``--out`` directory updates that
directory's history at its end (``chaos.campaign``), and ``chaos report history OUT_DIR`` rebuilds it from the
campaign directories there.

Runs are compared within a *series*: the same target (``chaos.target.Target.label`` without its known-bug switches,
so a bug switched on one night and off the next is one series) and the same scenario set (names). A failure is a
group of ``chaos.report.summary.deduplicate`` and is matched across runs by its key — ``(invariant, fault action,
fact)``, or ``("divergence", reference rule, signature)``. Against the previous run of its series a group is:

- **new**: failing now, not in the previous run (``seen before`` when an older run had it: a regression);
- **still failing**: failing now and in the previous run;
- **fixed**: failing in the previous run, and now every one of its cases that ran again passed;
- **flaky**: its cases failed once and held on the re-run now (or did so before and are flaky again);
- **not checked**: failing in the previous run, and none of its cases ran now (an incomplete or narrower run):
  never called fixed without evidence.

Invariant protected: an incomplete run is never shown green — its row says how much did not run.

Layout: a pure core (``series_of``, ``run_entry``, ``add_run``, ``changes``, ``replay_candidates``, ``text_lines``,
``render_index``) over plain JSON, and a thin shell (``update_history``, ``rebuild``, ``replay_ids``) that reads and
writes the files under an ``fcntl.flock`` of its own (``.history.lock``): two campaigns finishing at once in one
``--out`` (shards, parallel CI jobs) must not lose each other's run.

History also orders the next campaign: ``replay_ids`` lists the cases that failed or were flaky in earlier runs of
a series, most recent first, and ``chaos.campaign`` runs those first (Hypothesis's example database is the model).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import shlex
from collections.abc import Iterable, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from chaos.files import write_atomic, write_json
from chaos.report import CaseReport
from chaos.report.summary import deduplicate, git_of
from chaos.status import FAIL, FLAKY, NOT_REACHED, PASS
from chaos.target import Target

HISTORY = "history.json"
INDEX = "index.html"
LOCK = ".history.lock"
HISTORY_FORMAT = "killpoint-history/1"
TEMPLATE = "history.html.j2"
NEW, STILL, FIXED, FLAKY_GROUP, NOT_CHECKED = "new", "still failing", "fixed", "flaky", "not checked"


# --------------------------------------------------------------------------------------------------------------
# Pure core


def series_of(target: Mapping[str, Any] | None, scenarios: Iterable[str]) -> dict[str, Any]:
    """The series a campaign belongs to: its target without known-bug switches, and its scenario names."""
    label = Target.from_json(target).without_bugs().label()
    names = sorted(set(scenarios))
    key = hashlib.sha256(json.dumps([label, names]).encode()).hexdigest()[:12]
    return {"key": key, "target": label, "scenarios": names}


def group_key(group: Mapping[str, Any]) -> list[str]:
    """The dedup key of a ``deduplicate`` group (what matches a failure across runs)."""
    if group.get("divergence"):
        return ["divergence", str(group.get("fact")), str(group["divergence"])]
    return [str(group.get("invariant")), str(group.get("action")), str(group.get("fact"))]


def _groups(cases: Sequence[CaseReport]) -> list[dict[str, Any]]:
    out = []
    for g in deduplicate(list(cases)):
        scenario = str(g["example"]).partition("::")[0]
        minimal = f"{scenario}::{'+'.join(g['minimal'])}" if g.get("minimal") else None
        out.append({"key": group_key(g), "invariant": g["invariant"], "action": g["action"], "fact": g["fact"],
                    "divergence": g.get("divergence"), "count": g["count"], "cases": list(g["cases"]),
                    "example": g["example"], "minimal": minimal, "message": g.get("message", "")})
    return out


def run_entry(directory: str, result: Any, series: Mapping[str, Any], watched: Iterable[str] = ()) -> dict[str, Any]:
    """One run of ``history.json`` from a ``chaos.campaign.CampaignResult`` (with its records). Pure.

    ``outcomes`` holds the status of every case that did not pass and of every ``watched`` case (one that failed or
    was flaky in an earlier run of the series) that ran: enough to tell fixed from not checked, and to show a flaky
    case's history, without storing every passing case of every night."""
    records = list(result.records)
    watched = set(watched)
    failed = [CaseReport.from_json(dict(r)) for r in records if r["status"] == FAIL]
    flaky = [CaseReport.from_json(dict(r)) for r in records if r["status"] == FLAKY]
    outcomes = {r["id"]: str(r["status"]) for r in records
                if r["status"] not in (PASS, NOT_REACHED) or r["id"] in watched}
    c = result.cases
    cov = result.coverage or {}

    def reached(table: str) -> dict[str, int]:
        rows = (cov.get(table) or {}).values()
        rows = list(rows)
        return {"reached": sum(int(v.get("reached", 0)) for v in rows),
                "total": sum(int(v.get("total", 0)) for v in rows)}

    return {
        "directory": directory,
        "campaign": result.name,
        "date": result.started,
        "command": shlex.join(result.command) if result.command else "",
        "commit": git_of(result.versions).get("commit"),
        "target": Target.from_json(result.target).label(),
        "series": series["key"],
        "seriesTarget": series["target"],
        "scenarios": list(series["scenarios"]),
        "mode": result.mode if result.depth == 1 else f"{result.mode}, depth {result.depth}",
        "shard": result.shard,
        "complete": bool(result.complete),
        "stopped": result.stopped,
        "notRun": result.not_run_text(),
        "ok": bool(result.ok),
        "cases": {"planned": c.get("planned", 0), "run": c.get("done", 0), "pass": c.get(PASS, 0),
                  "fail": c.get(FAIL, 0), "flaky": c.get(FLAKY, 0), "notRun": c.get("not_run", 0),
                  "notReached": c.get(NOT_REACHED, 0), "error": c.get("error", 0)},
        "casesPerSecond": result.cases_per_second,
        "duration": result.duration,
        "coverage": {"points": reached("points"), "recovery": reached("recovery"),
                     "rules": len(cov.get("rules") or {}),
                     "rulesTotal": len(cov.get("rules") or {}) + len(cov.get("rules_unreached") or [])},
        "baselinesFailed": sorted(n for n, b in (result.baselines or {}).items() if not b.get("ok")),
        "failures": _groups(failed),
        "flaky": _groups(flaky),
        "outcomes": outcomes,
    }


def empty_history() -> dict[str, Any]:
    return {"format": HISTORY_FORMAT, "runs": []}


def watched_ids(history: Mapping[str, Any], series: str) -> set[str]:
    """Every case that failed or was flaky in a run of ``series`` (its later outcomes are recorded)."""
    out: set[str] = set()
    for run in history.get("runs", []):
        if run.get("series") == series:
            out |= {cid for cid, status in (run.get("outcomes") or {}).items() if status in (FAIL, FLAKY)}
    return out


def add_run(history: Mapping[str, Any], entry: Mapping[str, Any]) -> dict[str, Any]:
    """``history`` with ``entry`` added (or replacing the run of the same directory: a resumed campaign), and every
    run's ``changes`` recomputed against the previous run of its series. Pure."""
    runs = [dict(r) for r in history.get("runs", [])]
    index = next((i for i, r in enumerate(runs) if r.get("directory") == entry["directory"]), None)
    if index is None:
        runs.append(dict(entry))
    else:
        runs[index] = dict(entry)
    out = {**history, "format": HISTORY_FORMAT, "runs": runs}
    previous: dict[str, list[dict[str, Any]]] = {}
    for run in runs:
        earlier = previous.setdefault(run.get("series"), [])
        run["changes"] = changes(earlier, run)
        earlier.append(run)
    return out


def changes(earlier: Sequence[Mapping[str, Any]], run: Mapping[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """``run``'s failure groups classified against ``earlier`` runs of its series (module docstring). Pure."""
    prev = earlier[-1] if earlier else None
    now = {tuple(g["key"]): g for g in run.get("failures", [])}
    before = {tuple(g["key"]): g for g in (prev or {}).get("failures", [])}
    ever = {tuple(g["key"]) for r in earlier for g in r.get("failures", [])}
    outcomes = run.get("outcomes") or {}
    out: dict[str, list[dict[str, Any]]] = {NEW: [], STILL: [], FIXED: [], FLAKY_GROUP: [], NOT_CHECKED: []}
    for key, g in now.items():
        if key in before:
            out[STILL].append({**g, "since": _first_failing(earlier, key)})
        else:
            out[NEW].append({**g, "seenBefore": key in ever})
    flaky_now = {tuple(g["key"]): g for g in run.get("flaky", [])}
    for key, g in before.items():
        if key in now:
            continue
        ran = {cid: outcomes[cid] for cid in g["cases"] if cid in outcomes}
        if key in flaky_now or any(s == FLAKY for s in ran.values()):
            continue  # shown with the flaky groups below
        if ran and all(s == PASS for s in ran.values()):
            out[FIXED].append({**g, "rerun": sorted(ran)})
        else:
            out[NOT_CHECKED].append({**g, "rerun": sorted(ran)})
    flaky_ids = {cid for g in run.get("flaky", []) for cid in g["cases"]}
    for key, g in flaky_now.items():
        out[FLAKY_GROUP].append({**g, "history": {cid: _outcome_history(earlier, run, cid) for cid in g["cases"]}})
    for key, g in before.items():  # a failure of yesterday whose cases are flaky today
        if key not in now and key not in flaky_now and any(outcomes.get(c) == FLAKY for c in g["cases"]):
            cases = [c for c in g["cases"] if outcomes.get(c) == FLAKY and c not in flaky_ids]
            out[FLAKY_GROUP].append({**g, "cases": cases,
                                     "history": {cid: _outcome_history(earlier, run, cid) for cid in cases}})
    return out


def _first_failing(earlier: Sequence[Mapping[str, Any]], key: tuple) -> str | None:
    """The campaign of the oldest run of the current unbroken streak of ``key`` failing."""
    since = None
    for run in reversed(earlier):
        if key not in {tuple(g["key"]) for g in run.get("failures", [])}:
            break
        since = run.get("campaign")
    return since


def _outcome_history(earlier: Sequence[Mapping[str, Any]], run: Mapping[str, Any], case_id: str) -> list[list[str]]:
    """``[campaign, status]`` of ``case_id`` in each run of the series, oldest first; ``"–"`` where the run did not
    record it (it passed before anyone watched it, or it did not run)."""
    return [[str(r.get("campaign")), str((r.get("outcomes") or {}).get(case_id, "–"))] for r in [*earlier, run]]


def replay_candidates(history: Mapping[str, Any], series: str, exclude: str | None = None) -> list[str]:
    """Case ids that failed or were flaky in runs of ``series`` (most recent run first; a group's minimal case
    right after its example), without duplicates. Pure."""
    out: dict[str, None] = {}
    for run in reversed(history.get("runs", [])):
        if run.get("series") != series or run.get("directory") == exclude:
            continue
        for g in [*run.get("failures", []), *run.get("flaky", [])]:
            for cid in [g.get("example"), g.get("minimal"), *g.get("cases", [])]:
                if cid:
                    out.setdefault(cid, None)
    return list(out)


def verdict(run: Mapping[str, Any]) -> str:
    """``fail``, ``incomplete`` or ``pass`` — in that order of precedence: a run that did not run every planned case
    is never ``pass``."""
    if not run.get("ok", True) or run.get("cases", {}).get("fail"):
        return "fail"
    if not run.get("complete"):
        return "incomplete"
    return "pass"


def text_lines(history: Mapping[str, Any]) -> list[str]:
    """What ``chaos report history`` prints: per series, its latest run and that run's changes."""
    lines = []
    by_series: dict[str, list[Mapping[str, Any]]] = {}
    for run in history.get("runs", []):
        by_series.setdefault(run.get("series"), []).append(run)
    for runs in by_series.values():
        last = runs[-1]
        lines.append(f"{last['seriesTarget']} on {', '.join(last['scenarios'])}: {len(runs)} run(s)")
        for run in runs[-5:]:
            c = run["cases"]
            lines.append(f"  {run['campaign']}  {verdict(run).upper():10} {c['run']}/{c['planned']} run, "
                         f"fail {c['fail']}, flaky {c['flaky']}, not run {c['notRun']}  ({run['target']})"
                         + (f" — {run['notRun']}" if not run.get("complete") and run.get("notRun") else ""))
        for kind in (NEW, STILL, FIXED, FLAKY_GROUP, NOT_CHECKED):
            for g in last.get("changes", {}).get(kind, []):
                note = " (failed in an older run too: a regression)" if g.get("seenBefore") else ""
                note += f" (failing since {g['since']})" if g.get("since") else ""
                lines.append(f"  {kind.upper()}: {describe(g)} ×{g['count']}  e.g. {g['example']}{note}")
                for cid, outcomes in (g.get("history") or {}).items():
                    lines.append(f"    {cid}: " + ", ".join(f"{c} {s}" for c, s in outcomes))
    return lines


def describe(group: Mapping[str, Any]) -> str:
    """A group in a few words: its divergence, or its invariant with the fault action and fact."""
    if group.get("divergence"):
        return f"{group['divergence']} ({group.get('invariant')})"
    return f"{group.get('invariant')} ({group.get('action')} at {group.get('fact')})"


def render_index(history: Mapping[str, Any], title: str) -> str:
    """``<out>/index.html``: self-contained (no script, no external resource), newest run first. Pure."""
    import jinja2

    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(Path(__file__).resolve().parent)), autoescape=True,
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters["describe"] = describe
    series: dict[str, list[Mapping[str, Any]]] = {}
    for run in history.get("runs", []):
        series.setdefault(run.get("series"), []).append(run)
    views = []
    for runs in series.values():
        last = runs[-1]
        views.append({"target": last["seriesTarget"], "scenarios": last["scenarios"], "latest": last,
                      "runs": [{**r, "verdict": verdict(r)} for r in reversed(runs)],
                      "changes": last.get("changes") or {}})
    views.sort(key=lambda v: str(v["latest"].get("date")), reverse=True)
    kinds = [(NEW, "fail"), (STILL, "fail"), (FIXED, "pass"), (FLAKY_GROUP, "flaky"), (NOT_CHECKED, "unknown")]
    return env.get_template(TEMPLATE).render(title=title, series=views, kinds=kinds)


# --------------------------------------------------------------------------------------------------------------
# Thin shell: files under a lock


@contextmanager
def _locked(out: Path):
    out.mkdir(parents=True, exist_ok=True)
    with open(out / LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file is closed
        yield


def load_history(out: str | Path) -> dict[str, Any]:
    """``<out>/history.json`` (an empty history when absent; ``ValueError`` names the file when unreadable)."""
    path = Path(out) / HISTORY
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return empty_history()
    except (OSError, ValueError, RecursionError) as exc:  # RecursionError: [[[… nested deep
        raise ValueError(f"{path}: cannot read the history: {exc}") from None
    if not isinstance(value, dict) or not isinstance(value.get("runs"), list):
        raise ValueError(f"{path}: not a killpoint history (no runs list)")
    return value


def _write(out: Path, history: Mapping[str, Any]) -> None:
    write_json(out / HISTORY, history)
    write_atomic(out / INDEX, render_index(history, title=out.resolve().name))


def update_history(out: str | Path, directory: str | Path, result: Any, *, series: Mapping[str, Any]) -> dict:
    """Add (or refresh) the run of campaign ``directory`` in ``<out>/history.json`` and re-render ``index.html``."""
    out = Path(out)
    with _locked(out):
        history = load_history(out)
        entry = run_entry(Path(directory).name, result, series, watched_ids(history, series["key"]))
        history = add_run(history, entry)
        _write(out, history)
    return history


def replay_ids(out: str | Path, series: Mapping[str, Any], exclude: str | None = None) -> list[str]:
    """``replay_candidates`` of ``<out>/history.json`` (none when there is no readable history)."""
    try:
        history = load_history(out)
    except ValueError:
        return []
    return replay_candidates(history, series["key"], exclude)


def rebuild(out: str | Path) -> dict[str, Any]:
    """``chaos report history OUT_DIR``: refresh the run of every campaign directory under ``out`` (oldest first),
    keep runs whose directory is gone, and re-render ``index.html``. ``ValueError`` when there is none at all."""
    from chaos.campaign import build_result, stored_result
    from chaos.errors import ChaosError
    from chaos.journal import JOURNAL, read_campaign, read_journal

    out = Path(out)
    if not out.is_dir():  # never created by a typo: a history lives in an --out directory that exists
        raise ValueError(f"{out}: not a directory (give the --out directory of earlier campaigns)")
    found = []
    for campaign_json in sorted(out.glob("*/campaign.json")):
        directory = campaign_json.parent
        try:
            params = read_campaign(directory)
            records = read_journal(directory / JOURNAL)
            previous = stored_result(directory)
            if params.get("merged_from") or previous is None:
                continue  # a merge is a view of shards, not a run; without a result.json, not finished
            result = build_result(params, records, interrupted=previous.get("interrupted", False),
                                  duration=previous.get("duration", 0.0))
        except (ChaosError, OSError, ValueError):
            # Unreadable, or a campaign.json edited out of shape (JournalError, CampaignError): not a run to compare.
            continue
        names = params.get("scenario_names") or sorted((params.get("baselines") or {}))
        found.append((str(params.get("started", "")), directory, result,
                      series_of((params.get("options") or {}).get("target"), names)))
    with _locked(out):
        history = load_history(out)
        if not found and not history["runs"]:
            raise ValueError(f"{out}: no campaign directory with a result here")
        for _, directory, result, series in sorted(found, key=lambda item: item[0]):
            entry = run_entry(directory.name, result, series, watched_ids(history, series["key"]))
            history = add_run(history, entry)
        _write(out, history)
    return history
