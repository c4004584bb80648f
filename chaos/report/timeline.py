"""The failure timeline: one case's launches, durable transactions, kill points, restarts and plans as inline SVG.

A person reading a crash-timing failure needs to see, in order: what the agent made durable, exactly where the
fault landed (after which transaction, at which barrier), which process recovered, what it decided to do first
(the recovery plan), and how it ended. The drawing reads top to bottom, like a log:

- one vertical *lane* per agent process (launch), headed by its role (run, resume, abort…) and pid;
- one row per event in the order things happened (case-relative time, shown in the left margin; ties in the
  supervisor's own order), so a restart appears below the kill that caused it, in the next lane;
- a green box per transaction the agent acknowledged at ``after-sync`` (``tx N``, its facts, the file offset after
  it); a dashed grey box for a transaction announced at ``before-write`` and never written because the fault fired
  there; a dashed amber box for one written but not synced (``after-write``: torn write, power loss, I/O error);
- a red box for each fault (SIGKILL, SIGINT, torn, ioerror) with its fault text, and a dashed red arrow from a kill
  to the launch(es) that restarted the agent;
- at each process start, the first recovery plan it printed (the full list is rendered beside the SVG);
- at the end of each lane, how the process ended (exit code, with the bundled agent's meaning), and at the bottom a
  red bar naming the failed invariants.

Why vertical: a case has few processes (2–4) but many transactions; lanes side by side fit a page's width and the
page scrolls down naturally, where a horizontal time axis needed sideways scrolling to reach the kill.

Invariant protected: every durable fact the supervisor recorded appears exactly once, and every fired fault
appears at its barrier — the picture may be long, never lossy.

Pure: ``build(case)`` → ``Timeline`` → ``svg(timeline)``; input is a ``CaseReport`` whose ``run`` is
``CaseRun.to_json()``. Not here: the page around it (``chaos.report.html``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from html import escape
from typing import Any

from chaos.report import CaseReport

# Geometry (px). A lane fits ~44 characters of 11 px monospace: a fault text, a fact list, a plan summary.
GUTTER = 74  # left margin with the time of each row
LANE_W = 318
BOX_W = 298
ROW_H = 46
BOX_H = 38
HEAD = 52  # lane headers
FOOT = 54  # the verdict bar
MONO = "DejaVu Sans Mono, Menlo, Consolas, monospace"
_CHARS = 41  # characters per box line (title: 12 px bold monospace, ~7.2 px each, in 286 px)

# Exit codes of the bundled agent (python -m agent --help): shown as hints only for that agent.
AGENT_EXITS = {
    0: "completed / idle",
    2: "usage error",
    3: "blocked",
    4: "run failed",
    5: "log does not reduce",
    6: "session locked",
    7: "checkpoint channel lost",
    70: "store rejected its own transaction",
    74: "write failed",
    130: "interrupted (aborted)",
}
_KILL_ACTIONS = frozenset({"kill", "torn", "powerloss", "dresume"})
_ORDER = {"start": 0, "tx": 1, "unwritten": 1, "unsynced": 1, "fault": 2, "end": 3}


@dataclass
class Mark:
    """One drawn event: its row, its lane, what kind, a bold title and a detail line."""

    row: int
    lane: int
    kind: str  # start | tx | unwritten | unsynced | fault | end
    title: str
    detail: str = ""
    tone: str = ""  # ok | warn | bad | info
    tooltip: str = ""
    at: float | None = None


@dataclass
class Timeline:
    """What ``svg`` draws: lane headers, marks, restart arrows (mark index → mark index) and the verdict."""

    lanes: list[tuple[str, str]] = field(default_factory=list)  # (title, subtitle) per launch
    marks: list[Mark] = field(default_factory=list)
    arrows: list[tuple[int, int]] = field(default_factory=list)
    rows: int = 0
    verdict: str = ""  # "✗ FAILED: converges, outcome" when the case failed
    verdict_tip: str = ""


def plan_summary(plan: dict[str, Any]) -> str:
    """A short readable form of one SPEC §14.2 recovery plan (``startTool replay read#0``, ``blocked: …``)."""
    kind = plan.get("type", "?")
    if kind == "finish":
        text = f"finish {plan.get('outcome', '')}".strip()
        if plan.get("completion") and plan.get("completion") != "normal":
            text += f" ({plan['completion']})"
        return text
    if kind == "startStep":
        return f"startStep {plan.get('stepKind', '')} attempt {plan.get('attempt', '?')}"
    if kind == "startTool":
        return f"startTool {plan.get('mode', '')} {plan.get('toolName', '')}#{plan.get('toolIndex', '?')}"
    if kind == "appendSynthetic":
        results = [r for r in plan.get("results", []) if isinstance(r, dict)]
        reasons = [r.get("reason") or (r.get("result") or {}).get("reason") for r in results]
        reasons = [r for r in reasons if r]
        return f"appendSynthetic ×{len(results)}" + (f" ({', '.join(reasons)})" if reasons else "")
    if kind == "blocked":
        return f"blocked: {plan.get('reason', '?')}"
    if kind == "closeAttempt":
        return "closeAttempt (aborted)"
    return str(kind)


def _clip(text: str, width: int = _CHARS) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _fault_title(fault: dict[str, Any]) -> str:
    action = fault.get("action", "kill")
    text = fault.get("fault", "")
    if fault.get("signal") == "SIGKILL":
        return f"✕ SIGKILL {text}" if action == "kill" else f"✕ {text}"
    if fault.get("signal") == "SIGINT":
        return f"⚡ SIGINT {text}"
    return f"⚠ {text}"


def _fault_detail(fault: dict[str, Any]) -> str:
    parts = []
    if fault.get("action") not in (None, "kill", "int") and fault.get("signal") == "SIGKILL":
        parts.append("SIGKILL")
    if fault.get("errno"):
        parts.append(f"answered fail {fault['errno']}")
    if fault.get("size_at_kill") is not None:
        parts.append(f"file {fault['size_at_kill']} B")
    if fault.get("cut_to") is not None:
        parts.append(f"cut to {fault['cut_to']} B")
    if fault.get("survivors"):
        parts.append(f"{len(fault['survivors'])} survivor(s)!")
    return ", ".join(parts)


def _is_bundled_agent(argv: list[str]) -> bool:
    return "-m" in argv[:3] and "agent" in argv[1:3]


def _verb(argv: list[str]) -> str:
    for verb in ("run", "compact", "resume", "abort"):
        if verb in argv:
            return verb
    return ""


def build(case: CaseReport) -> Timeline:
    """Lay out ``case`` (its ``run`` and ``plans``) as lanes, rows and marks. Pure."""
    run = case.run or {}
    launches = run.get("launches", [])
    barriers = {b["index"]: b for b in run.get("barriers", [])}
    faults = run.get("faults", [])
    fault_at = {f["barrier"]: f for f in faults}
    plans: dict[int, list[dict]] = {}
    for item in case.plans:
        plans.setdefault(item.get("launch", -1), []).append(item.get("plan", {}))

    lane_of = {launch["index"]: i for i, launch in enumerate(launches)}
    tl = Timeline()
    for launch in launches:
        role = launch.get("role", "?")
        if role == "step":
            role = _verb(launch.get("argv", [])) or role
        tl.lanes.append((f"#{launch['index']} {role}", f"pid {launch.get('pid', '?')}"))

    # (time, order, tiebreak, kind, payload), sorted into rows.
    events: list[tuple[float, int, int, str, Any]] = []
    for launch in launches:
        events.append((launch.get("started") or 0.0, _ORDER["start"], launch["index"], "start", launch))
        if launch.get("ended") is not None and launch.get("killed_by") != "fault":
            events.append((launch["ended"], _ORDER["end"], launch["index"], "end", launch))
    for barrier in barriers.values():
        fault = fault_at.get(barrier["index"])
        if barrier["phase"] == "after-sync":
            events.append((barrier["at"], _ORDER["tx"], barrier["index"], "tx", barrier))
        elif fault is not None and fault.get("action") != "int":
            # The fault stopped this transaction before after-sync: draw what the file got (nothing / unsynced).
            kind = "unwritten" if barrier["phase"] == "before-write" else "unsynced"
            events.append((barrier["at"], _ORDER[kind], barrier["index"], kind, barrier))
    for fault in faults:
        at = fault.get("at", barriers.get(fault["barrier"], {}).get("at", 0.0))
        events.append((at, _ORDER["fault"], fault["barrier"], "fault", fault))
    events.sort(key=lambda e: (e[0], e[1], e[2]))

    fault_marks: list[tuple[int, dict]] = []
    start_marks: dict[int, int] = {}
    for row, (at, _order, _tie, kind, item) in enumerate(events):
        if kind == "start":
            own = plans.get(item["index"], [])
            detail = ""
            if own:
                detail = "first plan: " + plan_summary(own[0])
                if len(own) > 1:
                    detail += f" (+{len(own) - 1})"
            role = item.get("role", "start")
            if role in ("step", "again"):
                verb = _verb(item.get("argv", []))
                role = f"{verb} (re-issued)" if role == "again" and verb else (verb or role)
            start_marks[item["index"]] = len(tl.marks)
            tl.marks.append(Mark(row, lane_of[item["index"]], "start", f"▶ {role}", detail, "info",
                                 " ".join(item.get("argv", [])), at))
        elif kind == "tx":
            title = f"tx {item['tx']}  " + ", ".join(item["facts"])
            detail = f"durable at {item['offset']} B · seq {item['seq_first']}..{item['seq_last']}"
            tl.marks.append(Mark(row, lane_of.get(item["launch"], 0), "tx", title, detail, "ok",
                                 f"acknowledged after-sync: {', '.join(item['facts'])}", at))
        elif kind in ("unwritten", "unsynced"):
            title = f"tx {item['tx']}  " + ", ".join(item["facts"])
            if kind == "unwritten":
                detail = f"announced at before-write ({item['offset']} B): not written"
            else:
                detail = f"written to {item['offset']} B, synced only to {item['synced_offset']} B"
            tl.marks.append(Mark(row, lane_of.get(item["launch"], 0), kind, title, detail, "warn",
                                 f"the fault fired at {item['phase']}, before the transaction was durable", at))
        elif kind == "fault":
            fault_marks.append((len(tl.marks), item))
            tl.marks.append(Mark(row, lane_of.get(item.get("launch"), 0), "fault", _fault_title(item),
                                 _fault_detail(item), "bad", item.get("note") or "", at))
        elif kind == "end":
            rc = item.get("returncode")
            if item.get("killed_by") == "watchdog":
                title, tone, detail = "■ killed by the watchdog", "bad", ""
            elif rc is None:
                title, tone, detail = "■ did not end", "bad", ""
            elif rc < 0:
                title, tone, detail = f"■ died by signal {-rc}", "bad", "not sent by the supervisor"
            else:
                tone = "ok" if rc == 0 else ("warn" if rc in (3, 130) else "bad")
                title = f"■ exit {rc}"
                bundled = _is_bundled_agent(item.get("argv", []))
                detail = f"agent: {AGENT_EXITS[rc]}" if bundled and rc in AGENT_EXITS else ""
            tl.marks.append(Mark(row, lane_of[item["index"]], "end", title, detail, tone,
                                 f"launch #{item['index']} ended at {at:.3f} s", at))
    tl.rows = len(events)

    # Restart arrows: from each kill to the launches of the generation that followed it.
    for mark_index, fault in fault_marks:
        if fault.get("action") not in _KILL_ACTIONS:
            continue
        killed_gen = next((l.get("generation") for l in launches if l["index"] == fault.get("launch")), None)
        for launch in launches:
            if killed_gen is not None and launch.get("generation") == killed_gen + 1 and launch["index"] in start_marks:
                tl.arrows.append((mark_index, start_marks[launch["index"]]))

    if case.failures:
        tl.verdict = "✗ FAILED: " + ", ".join(case.invariants)
        tl.verdict_tip = "; ".join(f"{f.invariant}: {f.message}" for f in case.failures)
    if not tl.lanes:
        tl.lanes.append(("(no launch)", ""))
    return tl


_COLORS = {
    "tx": ("#e7f5ec", "#2e8b57"),
    "unwritten": ("#f4f4f4", "#8a8a8a"),
    "unsynced": ("#fff4e0", "#c77700"),
    "start": ("#e8f0fe", "#3b6fd8"),
    ("end", "ok"): ("#e7f5ec", "#2e8b57"),
    ("end", "warn"): ("#fff4e0", "#c77700"),
    ("end", "bad"): ("#fdeaea", "#c62828"),
    "fault": ("#fdeaea", "#c62828"),
}


def svg(tl: Timeline, *, title: str = "") -> str:
    """Render ``tl`` as a standalone ``<svg>`` element (inline in HTML; no external resources). Pure."""
    width = GUTTER + len(tl.lanes) * LANE_W + 10
    body_h = max(tl.rows, 1) * ROW_H
    height = HEAD + body_h + (FOOT if tl.verdict else 14)
    out: list[str] = [
        f'<svg class="timeline" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="{escape(title or "case timeline")}" '
        f'font-family="system-ui, DejaVu Sans, sans-serif">',
        '<defs><marker id="kp-arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" '
        'orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="#c62828"/></marker></defs>',
    ]
    if title:
        out.append(f"<title>{escape(title)}</title>")
    # Lane backgrounds and headers.
    for i, (head, sub) in enumerate(tl.lanes):
        x = GUTTER + i * LANE_W
        out.append(f'<rect x="{x}" y="0" width="{LANE_W}" height="{height}" fill="{"#fafafa" if i % 2 == 0 else "#fff"}"/>')
        out.append(f'<text x="{x + 10}" y="22" font-size="14" font-weight="700" fill="#222">{escape(head)}</text>')
        out.append(f'<text x="{x + 10}" y="40" font-size="11.5" fill="#666">{escape(sub)}</text>')
        own = [m for m in tl.marks if m.lane == i]
        if own:
            cx = x + LANE_W / 2
            y0, y1 = _cy(min(m.row for m in own)), _cy(max(m.row for m in own))
            out.append(f'<line x1="{cx}" y1="{y0}" x2="{cx}" y2="{y1}" stroke="#b8b8b8" stroke-width="3"/>')
    out.append(f'<line x1="0" y1="{HEAD - 4}" x2="{width}" y2="{HEAD - 4}" stroke="#ddd"/>')
    out.append('<text x="8" y="22" font-size="11" fill="#888">time</text>')
    out.append('<text x="8" y="36" font-size="11" fill="#888">(case s)</text>')
    for mark in tl.marks:
        if mark.at is not None:
            out.append(f'<text x="8" y="{_cy(mark.row) + 4}" font-size="11" fill="#888" '
                       f'font-family="{MONO}">{mark.at:.3f}</text>')
    # Restart arrows (under the boxes).
    for a, b in tl.arrows:
        ma, mb = tl.marks[a], tl.marks[b]
        x1, y1 = _lx(ma.lane) + BOX_W / 2, _cy(ma.row) + BOX_H / 2
        x2, y2 = _lx(mb.lane) - BOX_W / 2 + 24, _cy(mb.row) - BOX_H / 2
        if mb.lane == ma.lane:
            x2 = x1
        out.append(f'<path class="restart" d="M{x1 - 20},{y1} C{x1 - 20},{y1 + 26} {x2},{y2 - 26} {x2},{y2}" '
                   f'fill="none" stroke="#c62828" stroke-width="1.8" stroke-dasharray="6 4" '
                   f'marker-end="url(#kp-arrow)"/>')
    for mark in tl.marks:
        out.append(_mark(mark))
    if tl.verdict:
        y = HEAD + body_h + 8
        out.append(f'<g class="verdict"><title>{escape(tl.verdict_tip)}</title>'
                   f'<rect x="{GUTTER + 10}" y="{y}" width="{width - GUTTER - 20}" height="34" rx="5" fill="#c62828"/>'
                   f'<text x="{GUTTER + 22}" y="{y + 22}" font-size="14" font-weight="700" fill="#fff">'
                   f"{escape(tl.verdict)}</text></g>")
    out.append("</svg>")
    return "".join(out)


def _lx(lane: int) -> float:
    return GUTTER + lane * LANE_W + LANE_W / 2


def _cy(row: int) -> float:
    return HEAD + row * ROW_H + ROW_H / 2


def _mark(mark: Mark) -> str:
    cx, cy = _lx(mark.lane), _cy(mark.row)
    fill, stroke = _COLORS.get(mark.kind) or _COLORS.get((mark.kind, mark.tone)) or ("#fff", "#555")
    x, y = cx - BOX_W / 2, cy - BOX_H / 2
    dash = ' stroke-dasharray="5 3"' if mark.kind in ("unwritten", "unsynced") else ""
    radius = 17 if mark.kind in ("start", "end") else 5
    width = 2.2 if mark.kind == "fault" else 1.3
    parts = [f'<g class="mark {mark.kind}">']
    if mark.tooltip:
        parts.append(f"<title>{escape(mark.tooltip)}</title>")
    parts.append(f'<rect x="{x}" y="{y}" width="{BOX_W}" height="{BOX_H}" rx="{radius}" fill="{fill}" '
                 f'stroke="{stroke}" stroke-width="{width}"{dash}/>')
    title_y = cy - 3 if mark.detail else cy + 4
    parts.append(f'<text x="{x + 12}" y="{title_y}" font-size="12" font-weight="700" fill="{stroke}" '
                 f'font-family="{MONO}">{escape(_clip(mark.title, _CHARS - 2))}</text>')
    if mark.detail:
        parts.append(f'<text x="{x + 12}" y="{cy + 12}" font-size="11" fill="#333">'
                     f"{escape(_clip(mark.detail, _CHARS + 9))}</text>")
    parts.append("</g>")
    return "".join(parts)
