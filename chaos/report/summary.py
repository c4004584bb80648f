"""``summary.json``: the machine-readable totals of one campaign, and the provenance facts every report carries.

Fields (``SUMMARY_FORMAT``): the campaign's identity (name, mode, seed, command line, agent bugs, start time,
duration, cases/s, versions), whether it is complete (``complete``, ``stopped``, ``incomplete``: how much did not
run, ``resume``: the command that continues it), case counts by status, kills and restarts performed, failures by
invariant and
deduplicated by (invariant, fault action, fact name) with a count, flaky cases listed separately, and coverage per
``FACT@PHASE`` and per planner rule (SPEC §14.4 ids).

Invariant protected: the numbers are computed from the cases alone (plus the engine's coverage when it supplied
one), so ``summarize`` of a merged report equals the sum of its shards' cases — never an independent tally that
could drift from the case list.

``summarize`` is pure; ``versions``/``git_commit`` read the environment (importlib metadata, ``git``) and are used
by the campaign engine and by ``chaos.bundle`` when they record provenance. Not here: HTML or JUnit rendering.
"""

from __future__ import annotations

import platform
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from chaos.report import ERROR, EXPECTED, FAIL, FLAKY, NOT_REACHED, PASS, CampaignReport, CaseReport

SUMMARY_FORMAT = "killpoint-summary/1"
# Launch roles (chaos.records.Launch.role) that are restarts: every launch except a step's first one.
_RESTART_ROLES = frozenset({"again", "resume", "dresume", "abort"})


def summarize(report: CampaignReport) -> dict[str, Any]:
    """The ``summary.json`` document for ``report``. Pure."""
    cases = report.cases
    counts = Counter(c.status for c in cases)
    by_invariant: Counter[str] = Counter()
    for case in cases:
        if case.status == FAIL:
            by_invariant.update(case.invariants)
    return {
        "format": SUMMARY_FORMAT,
        "campaign": report.name,
        "mode": report.mode,
        "seed": report.seed,
        "command": report.command,
        "agentBugs": report.agent_bugs,
        "started": report.started,
        "duration": round(report.duration, 3),
        "casesPerSecond": round(len(cases) / report.duration, 3) if report.duration > 0 else None,
        "versions": report.versions,
        "shards": report.shards,
        "interrupted": report.interrupted,
        # False when a planned case did not run (budget, --fail-fast, a signal, discovery cut short): CI must not
        # read a partial run as a green one. `notRun` in `cases`, the reason and the command that continues it here.
        "complete": report.is_complete,
        "stopped": report.stopped,
        "incomplete": report.not_run or None,
        "resume": report.resume,
        "cases": {
            "planned": report.planned if report.planned is not None else len(cases),
            "notRun": max(0, report.planned - len(cases)) if report.planned is not None else 0,
            "total": len(cases),
            "passed": counts[PASS],
            "failed": counts[FAIL],
            "flaky": counts[FLAKY],
            "notReached": counts[NOT_REACHED],
            "errors": counts[ERROR],
            "expectedFailures": counts[EXPECTED],
        },
        "kills": sum(kill_count(c) for c in cases),
        "restarts": sum(restart_count(c) for c in cases),
        "failures": {
            "byInvariant": dict(sorted(by_invariant.items())),
            "deduplicated": deduplicate([c for c in cases if c.status == FAIL]),
            "cases": [_failure_entry(c) for c in cases if c.status == FAIL],
        },
        "flaky": [_failure_entry(c) for c in cases if c.status == FLAKY],
        # Failures of scenarios that declare `expect_failure` (confirmed findings pinned as regressions).
        "expectedFailures": [_failure_entry(c) for c in cases if c.status == EXPECTED],
        "errors": [{"case": c.id, "verdict": c.verdict, "detail": c.detail} for c in cases if c.status == ERROR],
        "baselines": {name: {"ok": bool(b.get("ok")), "skipped": b.get("skipped"),
                             "problems": list(b.get("problems") or []),
                             "why": list(b.get("why") or [])}
                      for name, b in sorted(report.baselines.items())},
        # The engine's coverage (chaos.campaign.coverage) is the only one: a report built without it has none.
        "coverage": report.coverage if report.coverage is not None else {},
    }


def kill_count(case: CaseReport) -> int:
    """Faults of the case that SIGKILLed the agent (kill, torn, powerloss, dresume)."""
    if case.kills is not None:
        return case.kills
    if not case.run:
        return 0
    return sum(1 for f in case.run.get("faults", []) if f.get("signal") == "SIGKILL")


def restart_count(case: CaseReport) -> int:
    """Launches of the case that were not a step's first launch (resume, dresume, abort, a re-issued step)."""
    if case.restarts is not None:
        return case.restarts
    if not case.run:
        return 0
    return sum(1 for launch in case.run.get("launches", []) if launch.get("role") in _RESTART_ROLES)


def fault_key(fault_text: str) -> tuple[str, str]:
    """``(action, fact)`` of a fault text; ``fact`` is ``tx`` for a ``tx:K@PHASE`` point.

    A campaign's provider-fault token ``llm(KIND)@RUN.TURN`` gives ``("llm", KIND)``.
    """
    from chaos.faults import FaultSyntaxError, parse_fault

    if fault_text.startswith("llm("):
        return "llm", fault_text[4:].split(")", 1)[0].split(":", 1)[0]
    try:
        fault = parse_fault(fault_text)
    except FaultSyntaxError:
        return ("?", fault_text)
    return fault.action, fault.point.fact or "tx"


def dedup_keys(case: CaseReport) -> list[tuple[str, str, str]]:
    """The keys a failing case is deduplicated by.

    A case with a first divergence (``chaos.divergence``): one key, ``("divergence", reference rule, signature)`` —
    two cases that broke different invariants through the same wrong recovery decision are one finding. Else the
    engine's keys (invariant, fault action, fact name of the canonical kill point the last fault landed on), or,
    for a report built without the engine, the same read from the schedule's last fault (the shrunk one)."""
    if case.divergence and case.divergence.get("signature"):
        return [("divergence", str(case.divergence.get("reference_rule")), str(case.divergence["signature"]))]
    if case.keys:
        return [(str(k[0]), str(k[1]), str(k[2])) for k in case.keys]
    schedule = case.minimal or case.schedule
    action, fact = fault_key(schedule[-1]) if schedule else ("none", "none")
    return [(invariant, action, fact) for invariant in case.invariants]


def deduplicate(failed: list[CaseReport]) -> list[dict[str, Any]]:
    """Failing cases grouped by ``dedup_keys``, most frequent first; each group keeps its shortest minimal schedule
    as the example (the best reproduction). The one grouping of the project: the campaign's result, ``summary.json``
    and the HTML report all show these groups."""
    groups: dict[tuple[str, str, str], dict[str, Any]] = {}
    # By case id, not in the order the cases happened to finish (workers race): the same failures give the same
    # groups, examples and messages in every run of a campaign (the example: the shortest minimal schedule, then
    # the first id).
    for case in sorted(failed, key=lambda c: c.id):
        for key in dict.fromkeys(dedup_keys(case)):
            diverged = key[0] == "divergence"
            g = groups.setdefault(key, {
                "invariant": "" if diverged else key[0], "action": key[1] if not diverged else "divergence",
                "fact": key[2] if not diverged else key[1], "divergence": key[2] if diverged else None,
                "count": 0, "cases": [], "example": case.id, "minimal": _schedule_for(case, key),
                "bundle": case.bundle,
                "message": _message(case, key),
            })
            g["count"] += 1
            g["cases"].append(case.id)
            if diverged:  # the invariants the wrong decision broke, across the group
                names = [n for n in g["invariant"].split(", ") if n] + case.invariants
                g["invariant"] = ", ".join(dict.fromkeys(names))
            mine = _schedule_for(case, key)
            if mine and len(mine) < len(g["minimal"] or []):  # the message goes with the example it describes
                g["minimal"], g["example"], g["bundle"], g["message"] = mine, case.id, case.bundle, _message(case, key)
    return sorted(groups.values(), key=lambda g: (-g["count"], g["invariant"], g["action"], g["fact"]))


def _schedule_for(case: CaseReport, key: tuple[str, str, str]) -> list[str]:
    """The schedule ``case`` stands for in its group ``key``: its minimal one, unless the minimal run did not fail
    that invariant (one only the first run failed, not its re-run: the shrink kept candidates failing the others)."""
    shrunk = (case.shrink or {}).get("invariants")
    if case.minimal and (key[0] == "divergence" or shrunk is None or key[0] in shrunk):
        return case.minimal
    return case.schedule


def _message(case: CaseReport, key: tuple[str, str, str]) -> str:
    """What ``case`` says about the failure its group ``key`` stands for: its first message for that invariant (any
    of its messages for a group of one recovery divergence)."""
    return next((f.message for f in case.failures if key[0] == "divergence" or f.invariant == key[0]), "")


def _failure_entry(case: CaseReport) -> dict[str, Any]:
    return {
        "case": case.id,
        "scenario": case.scenario,
        "schedule": case.schedule,
        "minimal": case.minimal,
        "shrinkCutShort": case.shrink_cut_short,
        "invariants": case.invariants,
        "divergence": (case.divergence or {}).get("signature"),
        "messages": [f"{f.invariant}: {f.message}" for f in case.failures],
        "bundle": case.bundle,
        "repro": case.repro,
    }


def git_commit(path: str | Path | None = None) -> dict[str, Any] | None:
    """``{"commit", "dirty"}`` of the git checkout holding ``path`` (default: this package), or None.

    None when git is missing or the code is not a checkout (an installed wheel): provenance then says so instead
    of inventing a commit.
    """
    where = Path(path) if path is not None else Path(__file__).resolve().parent
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=where, capture_output=True, text=True, timeout=10)
        if head.returncode != 0:
            return None
        status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=where,
                                capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return {"commit": head.stdout.strip(), "dirty": bool(status.stdout.strip()) if status.returncode == 0 else None}


def git_of(versions: Any) -> dict[str, Any]:
    """``{"commit", "dirty"}`` from a versions dict whose ``git`` is that dict or a bare commit string (the campaign
    engine records the string); ``{}`` when unknown."""
    git = versions.get("git") if isinstance(versions, dict) else None
    if isinstance(git, str) and git:
        return {"commit": git, "dirty": None}
    if isinstance(git, dict) and git.get("commit"):
        return {"commit": str(git["commit"]), "dirty": git.get("dirty")}
    return {}


def versions() -> dict[str, Any]:
    """killpoint and Python versions, platform, and the git commit when the code runs from a checkout."""
    from importlib import metadata

    try:
        killpoint = metadata.version("killpoint")
    except metadata.PackageNotFoundError:
        killpoint = "unknown (not installed)"
    return {
        "killpoint": killpoint,
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "executable": sys.executable,
        "platform": platform.platform(),
        "git": git_commit(),
    }
