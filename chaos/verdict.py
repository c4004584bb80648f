"""Readable verdicts for ``chaos run`` and ``chaos killpoints``: rich tables and per-failure evidence.

What a person needs after a run: one row per case (status, what the supervisor saw, which invariants failed), then,
for every case that did not pass, the schedule, each failed invariant with its evidence lines (which log line, which
call, which request) and where the case directory was kept. Rendering only: pure functions from ``CaseResult`` /
``Baseline`` to rich renderables; the CLI prints them. It does not run or judge anything.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from chaos import records
from chaos.case import Baseline, CaseResult
from chaos.status import FAIL, PASS

MAX_FINDINGS = 8  # per invariant; the kept case directory has everything
_STYLE = {PASS: "green", FAIL: "bold red", records.HANG: "bold red", records.NOT_REACHED: "yellow"}


# Piped output (a CI log, `| grep`) is never wrapped: a case id split over two lines can be neither searched nor
# pasted. Tables still take the width of their content; nothing is padded to this width.
PIPED_WIDTH = 100_000


def console(*, stderr: bool = False) -> Console:
    """A console that wraps for terminals and never wraps when piped."""
    terminal = Console(stderr=stderr).is_terminal
    return Console(stderr=stderr, highlight=False, soft_wrap=False, width=None if terminal else PIPED_WIDTH)


def case_table(results: Sequence[CaseResult], title: str = "") -> Table:
    """One row per case."""
    table = Table(title=title or None, show_lines=False, title_justify="left")
    table.add_column("case", overflow="fold")
    table.add_column("status")
    table.add_column("agent exit")
    table.add_column("kills", justify="right")
    table.add_column("launches", justify="right")
    table.add_column("requests", justify="right")
    table.add_column("failed invariants / detail", overflow="fold")
    table.add_column("s", justify="right")
    for r in results:
        status = Text(r.status, style=_STYLE.get(r.status, "bold red"))
        failed = ", ".join(i.name for i in r.failed)
        if not failed and not r.ok:
            failed = r.detail
        table.add_row(r.case_id + (" (baseline)" if not r.schedule else ""), status, r.verdict, str(r.kills),
                      str(r.launches), str(r.requests), failed, f"{r.duration:.1f}")
    return table


def failure_details(results: Sequence[CaseResult]) -> Group:
    """For every case that did not pass: schedule, failed invariants with evidence, kept directory."""
    parts: list = []
    for r in results:
        if r.ok:
            continue
        head = Text()
        head.append(f"\n✗ {r.case_id}", style="bold red")
        head.append(f"  [{r.status}; agent {r.verdict}]")
        parts.append(head)
        parts.append(Text(f"  schedule: {'+'.join(r.schedule) or '(none: crash-free baseline)'}"
                          + (f"; target {r.target}" if r.target != "bundled" else "")))
        if r.divergence:
            parts.append(Text(f"  first divergence (kill {r.divergence['kill']}, {r.divergence['fault']}): "
                              f"{r.divergence['signature']}", style="bold"))
        if not r.failed:
            parts.append(Text(f"  {r.detail}"))
        elif "stderr:" in r.detail:  # an unsettled exit explained by the agent's last words (chaos.case)
            parts.append(Text(f"  supervisor: {r.detail}"))
        for inv in r.failed:
            parts.append(Text(f"  {inv.name}:", style="bold"))
            for finding in inv.findings[:MAX_FINDINGS]:
                parts.append(Text(f"    - {finding.text()}"))
            if len(inv.findings) > MAX_FINDINGS:
                parts.append(Text(f"    … {len(inv.findings) - MAX_FINDINGS} more in result.json"))
        if r.case_dir:
            parts.append(Text(f"  kept: {r.case_dir}", style="dim"))
    return Group(*parts)


def summary(results: Sequence[CaseResult]) -> Text:
    """``N cases: P passed, F failed …`` (one count per status)."""
    counts: dict[str, int] = {}
    for r in results:
        counts[r.status] = counts.get(r.status, 0) + 1
    parts = [f"{n} {status}" for status, n in sorted(counts.items(), key=lambda kv: (kv[0] != PASS, kv[0]))]
    style = "green" if all(r.ok for r in results) else "bold red"
    return Text(f"{len(results)} case(s): " + ", ".join(parts), style=style)


def killpoint_table(baseline: Baseline) -> Table:
    """Every kill point the baseline reached: one row per transaction, one column per phase."""
    table = Table(title=f"kill points reached by the crash-free run of {baseline.result.scenario}", title_justify="left")
    table.add_column("tx", justify="right")
    table.add_column("facts")
    for phase in ("before-write", "after-write", "after-sync"):
        table.add_column(phase)
    rows: dict[int, dict] = {}
    for k in baseline.killpoints:
        row = rows.setdefault(k.tx, {"facts": ", ".join(k.facts)})
        row[k.phase] = k.point
    for tx, row in sorted(rows.items()):
        table.add_row(str(tx), row["facts"], row.get("before-write", ""), row.get("after-write", ""),
                      row.get("after-sync", ""))
    return table
