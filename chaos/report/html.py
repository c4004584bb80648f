"""``index.html``: the campaign report for a person — summary, coverage, and per failure its timeline and repro.

The page is self-contained: CSS inline, timelines as inline SVG (``chaos.report.timeline``), no script, font,
image or stylesheet from anywhere — it is opened from CI artifacts, mail attachments and air-gapped machines,
and a page that needs the network shows nothing there. The template is ``index.html.j2`` beside this module
(jinja2, autoescaping on: every scenario text, fault, evidence and stderr line is data, never markup).

Sections, top to bottom: for an incomplete campaign first how much did not run and the exact ``--resume`` command;
the verdict banner (never green when a planned case did not run or a baseline failed; a failed baseline with the
tool errors and stderr tail that explain it); totals; failures by invariant and deduplicated; coverage per
``FACT@PHASE`` and per planner rule; one section per failure (invariants with messages and evidence, the timeline
of durable facts, kill points, restarts and plans, the plans each restart printed, the minimal schedule, the repro
command and bundle); flaky cases (same layout, marked as not reproduced); errors; kill points not reached; and a
table of every case.

Invariant protected: every failing case of the report has a section with its invariant, evidence and repro
command (a failure the reader cannot act on is a defect of the report).

Pure: ``render_html(report, summary)`` returns the text. Not here: computing the summary (``summary.py``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from chaos.report import ERROR, EXPECTED, FAIL, FLAKY, NOT_REACHED, PASS, CampaignReport, CaseReport
from chaos.report import timeline as tl
from chaos.report.summary import git_of

TEMPLATE = "index.html.j2"
MAX_DETAILED = 20  # failing cases drawn with a timeline; the others are listed in a table


def _environment():
    import jinja2  # imported here: only report rendering needs it

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(Path(__file__).resolve().parent)),
        autoescape=True,
        undefined=jinja2.StrictUndefined,  # a typo in the template fails loudly in tests, not as a blank cell
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["tojson_pretty"] = lambda v: json.dumps(v, indent=2, ensure_ascii=False, default=str)
    env.filters["seconds"] = _seconds
    return env


def _seconds(value: float | None) -> str:
    if value is None:
        return "–"
    if value < 60:
        return f"{value:.2f} s"
    minutes, secs = divmod(int(value), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min" if hours else f"{minutes} min {secs:02d} s"


def anchor(case_id: str) -> str:
    """A stable HTML id for a case (case ids contain ':', '@', '#', '+', '(' which are awkward in fragments)."""
    import hashlib

    slug = "".join(c if c.isalnum() or c in "-_" else "-" for c in case_id)[:60].strip("-")
    return f"case-{slug}-{hashlib.sha1(case_id.encode()).hexdigest()[:8]}"


def findings(evidence: Any) -> list[str] | None:
    """Evidence as readable lines when it is a list of oracle findings (dicts with a ``message``), else None."""
    if not isinstance(evidence, list) or not evidence or not all(isinstance(e, dict) and "message" in e
                                                                 for e in evidence):
        return None
    lines = []
    for item in evidence:
        loc = [item["where"]] if item.get("where") else []
        for key in ("line", "seq", "call", "request"):
            if item.get(key) is not None and not (key == "request" and str(item.get("where", "")).startswith("request")):
                loc.append(f"{key} {item[key]}")
        lines.append((", ".join(loc) + ": " if loc else "") + str(item["message"]))
    return lines


def _failure_view(case: CaseReport, agent_bugs: list[str]) -> dict[str, Any]:
    timeline = tl.build(case)
    plans: dict[int, list[str]] = {}
    for item in case.plans:
        plans.setdefault(item.get("launch", -1), []).append(tl.plan_summary(item.get("plan", {})))
    roles = {l["index"]: l.get("role", "?") for l in (case.run or {}).get("launches", [])}
    return {
        "case": case,
        "anchor": anchor(case.id),
        "svg": tl.svg(timeline, title=f"timeline of {case.id}"),
        "failures": [{"f": f, "lines": findings(f.evidence)} for f in case.failures],
        "plans": [{"launch": i, "role": roles.get(i, "?"), "plans": p} for i, p in sorted(plans.items())],
        "kills": [f for f in (case.run or {}).get("faults", [])],
        "repro": case.repro or default_repro(case, agent_bugs),
    }


def default_repro(case: CaseReport, agent_bugs: list[str]) -> str:
    """``chaos run`` of the case's scenario with its (minimal) schedule: the repro when the engine gave none."""
    import shlex

    words = ["chaos", "run", f"scenarios/{case.scenario}.toml"]
    for fault in case.minimal or case.schedule:
        words += ["--kill", fault]
    if agent_bugs:
        words += ["--agent-bugs", ",".join(agent_bugs)]
    return shlex.join(words)


def _failure_order(failed: list[CaseReport], summary: dict[str, Any]) -> list[CaseReport]:
    """Failing cases with one example of each deduplicated failure first (in the summary's order), then the rest."""
    by_id = {c.id: c for c in failed}
    examples = [g.get("example") for g in summary.get("failures", {}).get("deduplicated", [])]
    first = [i for i in dict.fromkeys(examples) if i in by_id]  # a case can be the example of several groups
    return [by_id[i] for i in first] + [c for c in failed if c.id not in set(first)]


def _point_rows(table: Any) -> list[dict[str, Any]]:
    rows = []
    for key, value in (table or {}).items():
        total, reached = int(value.get("total", 0)), int(value.get("reached", 0))
        rows.append({"key": key, "reached": reached, "total": total,
                     "pct": min(100, 100 * reached // total) if total else (100 if reached else 0)})
    return rows


def render_html(report: CampaignReport, summary: dict[str, Any]) -> str:
    """The ``index.html`` text for ``report`` (``summary`` = ``chaos.report.summary.summarize(report)``). Pure."""
    import markupsafe

    failed = _failure_order([c for c in report.cases if c.status == FAIL], summary)
    flaky = [c for c in report.cases if c.status == FLAKY]
    # A nightly run may fail hundreds of cases the same way: draw the first MAX_DETAILED in full (one example of
    # every deduplicated failure first), list the rest compactly with their invariants and repro commands.
    views = [_failure_view(c, report.agent_bugs) for c in failed[:MAX_DETAILED]]
    compact = [{"case": c, "repro": c.repro or default_repro(c, report.agent_bugs)} for c in failed[MAX_DETAILED:]]
    flaky_views = [_failure_view(c, report.agent_bugs) for c in flaky]
    for view in views + flaky_views:
        view["svg"] = markupsafe.Markup(view["svg"])  # built by timeline.svg, which escapes every text it draws
    coverage = summary.get("coverage") or {}
    return _environment().get_template(TEMPLATE).render(
        report=report,
        summary=summary,
        failures=views,
        compact=compact,
        flaky=flaky_views,
        expected=[_failure_view(c, report.agent_bugs) for c in report.cases if c.status == EXPECTED],
        errors=[c for c in report.cases if c.status == ERROR],
        unreached=[c for c in report.cases if c.status == NOT_REACHED],
        cases=report.cases,
        anchors={c.id: anchor(c.id) for c in failed + flaky},
        points=_point_rows(coverage.get("points")),
        recovery=_point_rows(coverage.get("recovery")),
        rules=[{"rule": k, "count": v} for k, v in (coverage.get("rules") or {}).items()],
        rules_unreached=list(coverage.get("rules_unreached") or []),
        bad_baselines={k: v for k, v in summary.get("baselines", {}).items()
                       if not v.get("ok") and not v.get("skipped")},
        skipped={k: v["skipped"] for k, v in summary.get("baselines", {}).items() if v.get("skipped")},
        git=git_of(report.versions),
        status_class={PASS: "pass", FAIL: "fail", FLAKY: "flaky", NOT_REACHED: "unreached", ERROR: "error",
                      EXPECTED: "flaky"},
    )
