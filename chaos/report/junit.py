"""``junit.xml``: one testcase per scenario × schedule, so CI dashboards show campaign cases like tests.

Mapping: one ``<testsuite>`` per scenario; a ``<testcase classname="killpoint.<scenario>" name="<schedule>">``
per case (the baseline is named ``baseline``). A failing case carries one ``<failure>`` whose ``type`` is the first
failing invariant, whose ``message`` names every failing invariant, and whose text gives each invariant's message
and evidence (JSON) plus the repro command; ``error`` cases carry ``<error>`` with the supervisor's verdict;
``not-reached`` cases are ``<skipped>`` (the kill point never fired: not a pass); flaky cases pass, marked with a
``flaky`` property and the failure that did not reproduce in ``<system-out>``; a crash-free baseline that did not
pass is a ``baseline`` testcase with a ``<failure type="baseline">`` (no case of its scenario ran); an incomplete
campaign has one more suite, ``<campaign> (not run)``, whose one testcase, ``cases not run``, is skipped with how
much did not run, why, and the ``--resume`` command. Every suite carries the campaign's properties, among them
``complete`` (``false`` when a planned case did not run), ``cases_planned``, ``cases_not_run`` and ``incomplete``
(how much, and why); a complete campaign that ran no case at all still has one suite, named after the campaign,
holding them — a dashboard must not read an empty file as a green run.

Invariant protected: the file is well-formed XML 1.0 whatever the evidence contains (agent stderr may hold NUL or
other control characters, which XML 1.0 cannot represent and ElementTree would write out verbatim).

Pure: ``junit_xml(report)`` returns the text. Not here: deciding statuses.
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET

from chaos.report import ERROR, EXPECTED, FAIL, FLAKY, NOT_REACHED, CampaignReport, CaseReport

# XML 1.0 Char production: tab, LF, CR, and U+0020.. except surrogates and U+FFFE/U+FFFF.
_NOT_XML_CHAR = re.compile("[^\t\n\r\u0020-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def _clean(text: object) -> str:
    return _NOT_XML_CHAR.sub(lambda m: f"\\x{ord(m.group()):02x}", str(text))


def case_name(case: CaseReport) -> str:
    """The testcase name: the schedule (``FAULT+FAULT``), or ``baseline`` for the crash-free run."""
    return "+".join(case.schedule) if case.schedule else "baseline"


def failure_text(case: CaseReport) -> str:
    """The body of a failure: each invariant with its message and evidence, then how to reproduce it."""
    parts = []
    if case.divergence:
        parts.append(f"first divergence (kill {case.divergence.get('kill')}, {case.divergence.get('fault')}): "
                     f"{case.divergence.get('signature')}")
    for failure in case.failures:
        parts.append(f"{failure.invariant}: {failure.message}")
        if failure.evidence is not None:
            parts.append("evidence: " + json.dumps(failure.evidence, indent=2, ensure_ascii=False, default=str))
    if case.minimal and case.minimal != case.schedule:
        parts.append("minimal schedule: " + "+".join(case.minimal)
                     + (" (shrinking was cut short: the best schedule found so far)" if case.shrink_cut_short else ""))
    if case.verdict:
        parts.append(f"supervisor verdict: {case.verdict}" + (f" ({case.detail})" if case.detail else ""))
    if case.repro:
        # A bundle's path is relative to the campaign directory the report is in (a CI artifact may be anywhere).
        where = " (in the campaign directory)" if case.bundle and case.repro.startswith("sh ") else ""
        parts.append(f"reproduce{where}: {case.repro}")
    return "\n".join(parts)


def junit_xml(report: CampaignReport) -> str:
    """The ``junit.xml`` text for ``report``. Pure."""
    by_scenario: dict[str, list[CaseReport]] = {}
    for case in report.cases:
        by_scenario.setdefault(case.scenario, []).append(case)

    root = ET.Element("testsuites", name=_clean(f"killpoint {report.name}"))
    totals = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    planned = report.planned if report.planned is not None else len(report.cases)
    campaign_props = (("campaign", report.name), ("mode", report.mode), ("seed", report.seed),
                      ("agent_bugs", ",".join(report.agent_bugs)), ("command", " ".join(report.command)),
                      ("complete", "true" if report.is_complete else "false"), ("cases_planned", planned),
                      ("cases_not_run", max(0, planned - len(report.cases))),
                      ("incomplete", report.not_run if not report.is_complete else ""),
                      ("resume", report.resume if not report.is_complete else ""))

    def properties(parent: ET.Element) -> None:
        props = ET.SubElement(parent, "properties")
        for name, value in campaign_props:
            if value not in (None, ""):
                ET.SubElement(props, "property", name=name, value=_clean(value))

    if not by_scenario and report.is_complete:  # (an incomplete one gets its "not run" suite, below)
        empty = ET.SubElement(root, "testsuite", name=_clean(report.name), tests="0", failures="0", errors="0",
                              skipped="0", time="0.000")
        properties(empty)
    for scenario, cases in by_scenario.items():
        suite = ET.SubElement(root, "testsuite", name=_clean(scenario))
        properties(suite)
        counts = {"tests": len(cases), "failures": 0, "errors": 0, "skipped": 0}
        for case in cases:
            tc = ET.SubElement(suite, "testcase", classname=_clean(f"killpoint.{scenario}"),
                               name=_clean(case_name(case)), time=f"{case.duration:.3f}")
            if case.status == FAIL:
                counts["failures"] += 1
                message = ", ".join(case.invariants) + " failed: " + case.failures[0].message
                if case.divergence:
                    message = ", ".join(case.invariants) + " failed: " + str(case.divergence.get("signature"))
                ET.SubElement(tc, "failure", type=_clean(case.invariants[0]), message=_clean(message)).text = _clean(failure_text(case))
            elif case.status == ERROR:
                counts["errors"] += 1
                ET.SubElement(tc, "error", type=_clean(case.verdict or "error"),
                              message=_clean(case.detail or case.verdict or "the case could not run")
                              ).text = _clean(failure_text(case))
            elif case.status == NOT_REACHED:
                counts["skipped"] += 1
                ET.SubElement(tc, "skipped", message=_clean(
                    f"kill-point-not-reached: {case.detail or '+'.join(case.schedule)} (coverage gap, not a pass)"))
            elif case.status == EXPECTED:  # pytest's xfail in JUnit: skipped, with the reason and the evidence
                counts["skipped"] += 1
                ET.SubElement(tc, "skipped", type="expected-failure", message=_clean(
                    f"expected failure ({', '.join(case.invariants)}): {case.detail}"))
                ET.SubElement(tc, "system-out").text = _clean(failure_text(case))
            elif case.status == FLAKY:
                tp = ET.SubElement(tc, "properties")
                ET.SubElement(tp, "property", name="flaky", value=_clean(", ".join(case.invariants)))
                ET.SubElement(tc, "system-out").text = _clean(
                    "FLAKY: failed once, held on the re-run\n" + failure_text(case))
        suite.set("tests", str(counts["tests"]))
        suite.set("failures", str(counts["failures"]))
        suite.set("errors", str(counts["errors"]))
        suite.set("skipped", str(counts["skipped"]))
        suite.set("time", f"{sum(c.duration for c in cases):.3f}")
        for key in totals:
            totals[key] += counts[key]
    for scenario, b in sorted((report.baselines or {}).items()):
        if b.get("skipped") and scenario not in by_scenario:  # a target whose environment is missing: said, skipped
            suite = ET.SubElement(root, "testsuite", name=_clean(scenario), tests="1", failures="0", errors="0",
                                  skipped="1", time="0.000")
            tc = ET.SubElement(suite, "testcase", classname=_clean(f"killpoint.{scenario}"), name="baseline",
                               time="0.000")
            ET.SubElement(tc, "skipped", message=_clean(f"skipped: {b['skipped']}"))
            totals["tests"] += 1
            totals["skipped"] += 1
        elif not b.get("ok") and not b.get("skipped"):
            # A baseline that did not pass plans no case of its scenario: without this testcase the scenario would
            # vanish from a dashboard (or the file read green) while the campaign exits 1.
            suite = next((s for s in root.iter("testsuite") if s.get("name") == _clean(scenario)), None)
            if suite is None:
                suite = ET.SubElement(root, "testsuite", name=_clean(scenario), tests="0", failures="0", errors="0",
                                      skipped="0", time="0.000")
                properties(suite)
            tc = ET.SubElement(suite, "testcase", classname=_clean(f"killpoint.{scenario}"), name="baseline",
                               time="0.000")
            problems = [str(p) for p in b.get("problems") or []] or ["the crash-free baseline did not pass"]
            ET.SubElement(tc, "failure", type="baseline", message=_clean(problems[0])).text = _clean(
                "\n".join(["the crash-free baseline did not pass: no case of this scenario ran", *problems,
                           *(str(w) for w in b.get("why") or [])]))
            for key in ("tests", "failures"):
                suite.set(key, str(int(suite.get(key, "0")) + 1))
                totals[key] += 1
    if not report.is_complete:
        # Counts in properties only would let a dashboard show the cases that ran as a green run: one skipped test
        # says how much did not run, why, and how to continue.
        suite = ET.SubElement(root, "testsuite", name=_clean(f"{report.name} (not run)"), tests="1", failures="0",
                              errors="0", skipped="1", time="0.000")
        properties(suite)
        tc = ET.SubElement(suite, "testcase", classname="killpoint.campaign", name="cases not run", time="0.000")
        ET.SubElement(tc, "skipped", type="incomplete", message=_clean(
            f"incomplete campaign: {report.not_run or 'not every planned case ran'}"
            + (f"; continue with: {report.resume}" if report.resume else "")))
        totals["tests"] += 1
        totals["skipped"] += 1
    for key, value in totals.items():
        root.set(key, str(value))
    root.set("time", f"{report.duration:.3f}")
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
