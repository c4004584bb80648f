"""The campaign report page in a real headless browser (Debian's chromium): it renders and shows the failure timeline.

The report is built from a real failing case (the stale-assistantCalls bug, killed after the final answer), so the
page is what a user would open. Two checks through chromium itself: ``--screenshot`` gives a PNG of the requested
size that is not blank, and ``--dump-dom`` (the DOM after parsing) holds the inline SVG timeline with a mark per
durable transaction and the kill. chromium is installed by ``.ci/run`` with apt (browser downloads by test tools do
not work here); where it cannot be installed, the test is skipped with that reason.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import struct
import subprocess
import zlib
from pathlib import Path

import pytest

from chaos.case import run_baseline, run_case
from chaos.target import Target
from chaos.report import FAIL, CampaignReport, CaseReport, InvariantFailure, write_reports
from chaos.report.render import read_plans
from chaos.report.summary import versions
from chaos.scenario import load_scenario

REPO = Path(__file__).resolve().parents[2]
SCENARIO = REPO / "scenarios" / "read-then-answer.toml"
WIDTH, HEIGHT = 1280, 1800

pytestmark = pytest.mark.slow


def _chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    pytest.skip("chromium is not installed (apt-get install chromium; .ci/run tries it and continues without it)")


def browse(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    """Run headless chromium once, offline and sandboxed in its own session; kill its process group on timeout."""
    argv = [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            "--disable-extensions", f"--user-data-dir={tmp_path / 'profile'}", *args]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # chromium's helper processes share its session: none may linger
        proc.communicate()
        pytest.fail("headless chromium did not finish within 120 s")
    finally:
        try:  # helpers left by a chromium that exited (zygote, crashpad): they belong to this test
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


@pytest.fixture(scope="module")
def report_page(tmp_path_factory) -> tuple[Path, dict]:
    """index.html of a one-failure campaign built from a real case, and that case's supervisor record."""
    work = tmp_path_factory.mktemp("cases")
    scenario = load_scenario(SCENARIO)
    baseline = run_baseline(scenario, work_dir=work, keep="none")
    result = run_case(scenario, ["assistant@after-sync#2"], work_dir=work, target=Target(bugs=("stale-assistant-calls",)),
                      baseline=baseline, keep="all")
    assert result.status == "fail", result
    run = json.loads((Path(result.case_dir) / "caserun.json").read_text())
    failures = [InvariantFailure(r.name, r.findings[0].text(), [f.to_json() for f in r.findings])
                for r in result.failed]
    case = CaseReport(id=result.case_id, scenario=result.scenario, schedule=result.schedule, status=FAIL,
                      failures=failures, duration=result.duration, verdict=result.verdict, detail=result.detail,
                      run=run, plans=read_plans(run), minimal=result.schedule)
    ok = CaseReport(id=baseline.result.case_id, scenario=scenario.name, schedule=[], status="pass")
    report = CampaignReport(name="browser-check", cases=[case, ok], agent_bugs=["stale-assistant-calls"],
                            command=["chaos", "campaign", "--agent-bugs", "stale-assistant-calls"], duration=2.0,
                            versions=versions())
    out = tmp_path_factory.mktemp("report")
    return write_reports(report, out)["html"], run


def png_rows(data: bytes) -> tuple[int, int, list[bytes]]:
    """Width, height and the raw (still filtered) scanlines of a non-interlaced 8-bit PNG."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, header = 8, b"", None
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    width, height, depth, color, _, _, interlace = header
    assert depth == 8 and interlace == 0 and color in (2, 6)
    stride = 1 + width * (4 if color == 6 else 3)
    raw = zlib.decompress(idat)
    return width, height, [raw[i:i + stride] for i in range(0, len(raw), stride)]


def test_screenshot_renders_a_non_blank_page(report_page, tmp_path: Path):
    """chromium renders the page to a PNG of the window size whose rows are not all alike (not blank)."""
    html, _ = report_page
    shot = tmp_path / "page.png"
    proc = browse(tmp_path, f"--screenshot={shot}", f"--window-size={WIDTH},{HEIGHT}", html.as_uri())
    assert shot.is_file(), proc.stderr[-2000:]
    width, height, rows = png_rows(shot.read_bytes())
    assert (width, height) == (WIDTH, HEIGHT)
    # A blank page filters to one or two distinct scanlines; text, tables and the timeline give hundreds.
    assert len(set(rows)) > 200, f"only {len(set(rows))} distinct scanlines: the page looks blank"


def test_dom_holds_the_failure_timeline(report_page, tmp_path: Path):
    """The parsed DOM has the inline SVG timeline: one mark per durable transaction, the kill, the restart."""
    html, run = report_page
    proc = browse(tmp_path, "--dump-dom", html.as_uri())
    dom = proc.stdout
    assert '<svg class="timeline"' in dom, proc.stderr[-2000:]
    durable = sum(1 for b in run["barriers"] if b["phase"] == "after-sync")
    assert dom.count('class="mark tx"') == durable > 0
    assert dom.count('class="mark fault"') == 1 and "SIGKILL assistant@after-sync#2" in dom
    assert 'class="restart"' in dom and "first plan: startTool" in dom
    assert "converges" in dom and "✗ FAILED" in dom
