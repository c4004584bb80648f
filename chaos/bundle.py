"""Repro bundles: everything an engineer needs to re-run one failing case, in one folder, and its regression export.

A campaign that finds a crash-timing bug at 3 a.m. must leave behind something a person can act on without the
campaign: ``reports/<campaign>/failures/<case>/`` holds

    README.md          what failed (invariants, evidence), how to re-run it, what each file is
    bundle.json        machine-readable: case id, minimal schedule, failures, agent command + environment,
                       launches (argv, exit), provenance (killpoint/Python versions, git commit, seed, command line)
    scenario.toml      the scenario file exactly as the campaign ran it (byte copy; sha256 in bundle.json)
    repro.sh           executable: re-runs exactly this case (``chaos repro`` on this folder) and exits 1 when the
                       invariant fails again
    logs/kill-NN-ACTION.jsonl   the session log as the restart found it after each kill (after any torn/power cut)
    logs/final.jsonl   the session log at the end of the case
    requests.jsonl     every request the scripted model server received (body, position, answer, findings)
    witness.log        the effect witnesses (written by the tools outside the workspace, keyed by call id)
    agent/NN-ROLE.stderr / .stdout   each agent process's output (recovery plans are on stderr)
    workspace/         the workspace files at the end of the case
    caserun.json, result.json   the supervisor's record and the oracle's verdict of the bundled run

``chaos repro BUNDLE`` runs the crash-free baseline (correct agent) and the bundled case again in a fresh directory
and compares: exit 1 = a recorded invariant fails again (reproduced), 0 = every invariant holds, 3 = it now fails
differently. ``chaos export BUNDLE DIR`` writes the scenario with the minimal schedule pinned (and a new name, tag
``regression``) into DIR — e.g. ``scenarios/regressions/`` — validated before it is written, so it runs in CI
forever.

Invariant protected: a bundle re-runs *the same case*: the same scenario bytes, the same schedule texts, the same
agent command and AGENT_BUGS; the only differences on re-run are what a case gets fresh every time (directories,
the scripted server's port, the interpreter path of the bundled agent, recorded as ``{python}``).

Not here: deciding which cases fail or shrinking them (``chaos.workers``/``chaos.shrink``), rendering reports.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import math
import os
import re
import shlex
import shutil
import sys
import textwrap
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from chaos.errors import ChaosError
from chaos.files import read_json, write_atomic
from chaos.status import FAIL, PASS

BUNDLE_FORMAT = "killpoint-bundle/1"
BUNDLE_FILE = "bundle.json"
PYTHON = "{python}"  # stands for "this interpreter" in a bundled-agent command (the path differs per machine)
# Exit codes of `chaos repro` (and repro.sh).
HOLDS, REPRODUCED, USAGE, DIFFERENT = 0, 1, 2, 3
# Environment the harness sets per case (values differ on every run, so they are documented, not replayed).
HARNESS_ENV = {
    "CHAOS_CONTROL": "the supervisor's checkpoint socket (docs/protocol.md)",
    "CHAOS_WITNESS": "the effect-witness file, outside the workspace",
    "OPENAI_BASE_URL": "the scripted model server's route for the case (127.0.0.1, ephemeral port)",
    "OPENAI_API_KEY": "a placeholder; the scripted server ignores it",
    "AGENT_ENVIRONMENT_IDENTITY": "chaos:<scenario>, stable across cases",
}


class BundleError(ChaosError):
    """A bundle folder is missing, incomplete or inconsistent; the message names the file and the problem."""


def bundle_dir(report_dir: str | Path, case_id: str) -> Path:
    """``<report_dir>/failures/<case slug>``: where the bundle of ``case_id`` goes."""
    from chaos.case import case_slug

    return Path(report_dir) / "failures" / case_slug(case_id)


# --------------------------------------------------------------------------------------------------------------
# Writing a bundle


def target_json(target: Any) -> dict[str, Any]:
    """A ``chaos.target.Target`` (or its JSON) as bundle JSON: the whole target, ``{python}`` for this interpreter."""
    from chaos.target import Target

    return (target if isinstance(target, Target) else Target.from_json(target)).to_json()


def target_of(data: Mapping[str, Any]):
    """The ``chaos.target.Target`` a bundle ran (a round-1 bundle's ``agent`` entry is read the same way)."""
    from chaos.target import Target

    return Target.from_json(data.get("target") or data.get("agent"))


def _failure_json(failure: Any) -> dict[str, Any]:
    if isinstance(failure, Mapping):
        return {"invariant": str(failure.get("invariant") or failure.get("name")),
                "message": str(failure.get("message", "")), "evidence": failure.get("evidence")}
    if hasattr(failure, "findings"):  # chaos.oracle.InvariantResult
        findings = [f.text() for f in failure.findings]
        return {"invariant": failure.name, "message": findings[0] if findings else "failed",
                "evidence": [f.to_json() for f in failure.findings]}
    return {"invariant": failure.invariant, "message": failure.message, "evidence": failure.evidence}


def _copy(src: Path, dest: Path) -> str | None:
    if not src.is_file():
        return None
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src, dest)
    return str(dest)


def write_bundle(
    dest: str | Path,
    *,
    case_dir: str | Path,
    scenario_file: str | Path,
    case_id: str,
    schedule: Sequence[str],
    failures: Sequence[Any],
    target: Any,
    original_case: str | None = None,
    campaign: str | None = None,
    seed: int | None = None,
    command_line: Sequence[str] | None = None,
    versions: Mapping[str, Any] | None = None,
    divergence: Mapping[str, Any] | None = None,
) -> Path:
    """Assemble the bundle of one failing case at ``dest`` from its kept case directory; return ``dest``.

    ``case_dir`` is the directory ``chaos.case`` kept for the case whose ``schedule`` (the minimal one, after
    shrinking) failed with ``failures`` (``chaos.oracle.InvariantResult``s, ``chaos.report.InvariantFailure``s or
    their dicts). ``target`` is the ``chaos.target.Target`` it ran. ``divergence``: the first divergence to show when
    the kept run did not compute its own (a shrunk case: the campaign record's). ``dest`` is replaced if it exists.
    """
    from chaos.report.summary import versions as current_versions

    case_dir, scenario_file, dest = Path(case_dir), Path(scenario_file), Path(dest)
    if not (case_dir / "caserun.json").is_file():
        raise BundleError(f"{case_dir}: not a kept case directory (no caserun.json; run the case with keep='all')")
    if not scenario_file.is_file():
        raise BundleError(f"{scenario_file}: scenario file not found")
    run = json.loads((case_dir / "caserun.json").read_text(encoding="utf-8"))
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)

    files: dict[str, str] = {}
    scenario_bytes = scenario_file.read_bytes()
    (dest / "scenario.toml").write_bytes(scenario_bytes)
    files["scenario.toml"] = "the scenario file as the campaign ran it"
    for name, what in (("caserun.json", "the supervisor's record of the bundled run (launches, barriers, kills)"),
                       ("result.json", "the oracle's verdict of the bundled run"),
                       ("requests.jsonl", "every request the scripted model server received"),
                       ("witness.log", "effect witnesses, one line per effect, keyed by provider call id")):
        if _copy(case_dir / name, dest / name):
            files[name] = what
    for i, fault in enumerate(run.get("faults", []), start=1):
        if fault.get("snapshot"):
            name = f"logs/kill-{i:02d}-{fault.get('action', 'kill')}.jsonl"
            if _copy(Path(fault["snapshot"]), dest / name):
                files[name] = f"the session log as the restart found it after fault {i} ({fault.get('fault')})"
    if run.get("session") and _copy(Path(run["session"]), dest / "logs" / "final.jsonl"):
        files["logs/final.jsonl"] = "the session log at the end of the case"
    launches = []
    for launch in run.get("launches", []):
        stem = f"{launch['index']:02d}-{launch.get('role', 'launch')}"
        for stream in ("stderr", "stdout"):
            if launch.get(stream) and _copy(Path(launch[stream]), dest / "agent" / f"{stem}.{stream}"):
                files[f"agent/{stem}.{stream}"] = f"{stream} of launch #{launch['index']} ({launch.get('role')})"
        launches.append({"index": launch["index"], "role": launch.get("role"), "argv": launch.get("argv"),
                         "returncode": launch.get("returncode"), "killed_by": launch.get("killed_by")})
    for probe in sorted((case_dir / "launches").glob("probe-*")):
        if _copy(probe, dest / "agent" / probe.name):
            files[f"agent/{probe.name}"] = "output of a convergence probe (one more resume after the case)"
    if (case_dir / "workspace").is_dir():
        shutil.copytree(case_dir / "workspace", dest / "workspace", symlinks=True)
        files["workspace/"] = "the workspace at the end of the case"

    spec = target_json(target)
    from chaos.target import Target

    environment = Target.from_json(spec).environment()
    failures_json = [_failure_json(f) for f in failures]
    if not failures_json:
        raise BundleError(f"{case_id}: a bundle is for a failing case; no failed invariant was given")
    result = read_json(case_dir / "result.json") or {}
    data = {
        "format": BUNDLE_FORMAT,
        "case": case_id,
        "original_case": original_case or case_id,
        "scenario": {"name": case_id.partition("::")[0], "file": "scenario.toml", "source": str(scenario_file),
                     "sha256": "sha256:" + hashlib.sha256(scenario_bytes).hexdigest()},
        "schedule": list(schedule),
        "invariants": list(dict.fromkeys(f["invariant"] for f in failures_json)),
        "failures": failures_json,
        "divergence": result.get("divergence") or divergence,
        "verdict": result.get("verdict", run.get("verdict")),
        "detail": result.get("detail", run.get("detail")),
        "target": spec,
        "environment": environment,
        "harness_environment": HARNESS_ENV,
        "launches": launches,
        "provenance": {
            "versions": dict(versions) if versions is not None else current_versions(),
            "seed": seed,
            "campaign": campaign,
            "command_line": list(command_line) if command_line is not None else None,
            "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        },
        "files": files,
    }
    (dest / BUNDLE_FILE).write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    _write_repro_sh(dest, data)
    (dest / "README.md").write_text(_readme(data), encoding="utf-8")
    return dest


def equivalent_run_command(data: Mapping[str, Any], scenario_path: str = "scenario.toml") -> str:
    """The ``chaos run`` command that runs the same case (baseline + this schedule)."""
    words = ["chaos", "run", scenario_path, "--kill", "+".join(data["schedule"]), *target_of(data).cli_args()]
    return shlex.join(words)


def _write_repro_sh(dest: Path, data: Mapping[str, Any]) -> None:
    interpreter = sys.executable
    lines = [
        "#!/bin/sh",
        "# killpoint repro bundle: re-runs exactly this case (crash-free baseline first) and prints the verdict.",
        f"# case:       {data['case']}",
        f"# invariants: {', '.join(data['invariants'])}",
        f"# target:     {target_of(data).label()}",
        f"# AGENT_BUGS: {data['environment'].get('AGENT_BUGS') or '(none: the correct agent)'}",
        "# exit 1: the invariant fails again (reproduced); 0: every invariant holds; 3: it fails differently;",
        "# 2: the bundle or the installation is unusable. Extra arguments go to `chaos repro` (--keep, --work DIR"
        + (", --planner-dir DIR: where the planner command's files are here)." if target_of(data).planner_command
           else ")."),
        f"# Equivalent, from this folder: {equivalent_run_command(data)}",
        "set -eu",
        'here="$(cd "$(dirname "$0")" && pwd)"',
        # The interpreter that recorded the bundle has killpoint installed; elsewhere fall back to python3.
        f"PYTHON=\"${{KILLPOINT_PYTHON:-{interpreter}}}\"",
        'command -v "$PYTHON" >/dev/null 2>&1 || PYTHON=python3',
        'exec "$PYTHON" -m chaos.cli repro "$here" "$@"',
        "",
    ]
    path = dest / "repro.sh"
    path.write_text("\n".join(lines), encoding="utf-8")
    path.chmod(0o755)


def _planner_note(target: Any) -> list[str]:
    """The README's lines on a foreign planner command: the bundle records where it ran, not its files."""
    if not target.planner_command:
        return []
    where = (f"it ran in `{target.planner_dir}`" if target.planner_dir
             else "it ran in each case's workspace (recorded before chaos named a directory)")
    return ["", f"The planner command is not part of the bundle: {where}. Elsewhere, say where its files are: "
                "`./repro.sh --planner-dir DIR`."]


def _readme(data: Mapping[str, Any]) -> str:
    from chaos.report.summary import git_of

    target = target_of(data)
    prov = data["provenance"]
    git = git_of(prov.get("versions") or {})
    out = [
        f"# Repro bundle: `{data['case']}`",
        "",
        f"Scenario `{data['scenario']['name']}` under the schedule `{'+'.join(data['schedule'])}` "
        f"(target `{target.label()}`) fails:",
        "",
    ]
    divergence = data.get("divergence") or {}
    if divergence.get("signature"):
        out += [f"First divergence (kill {divergence.get('kill')}, `{divergence.get('fault')}`): "
                f"**{divergence['signature']}**", ""]
    for f in data["failures"]:
        out.append(f"- **{f['invariant']}**: {f['message']}")
    out += [
        "",
        f"Supervisor verdict: `{data.get('verdict')}` {data.get('detail') or ''}".rstrip(),
        "",
        "## Reproduce",
        "",
        "```sh",
        "./repro.sh            # exit 1: fails again; 0: holds; 3: fails differently",
        equivalent_run_command(data) + "   # the same case through `chaos run` (it keeps a failing case in ./reports)",
        "```",
        *_planner_note(target_of(data)),
        "",
        "Turn it into a regression scenario that CI runs forever:",
        "",
        "```sh",
        "chaos export . scenarios/regressions/",
        "```",
        "",
        "## Provenance",
        "",
        f"- killpoint {(prov.get('versions') or {}).get('killpoint')}, Python {(prov.get('versions') or {}).get('python')}",
        f"- git commit: {git.get('commit', 'unknown')}{' (uncommitted changes)' if git.get('dirty') else ''}",
        f"- campaign: {prov.get('campaign')}, seed: {prov.get('seed')}",
        f"- command line: `{shlex.join(prov['command_line']) if prov.get('command_line') else 'unknown'}`",
        f"- original case: `{data['original_case']}`",
        f"- created: {prov.get('created')}",
        "",
        "## Target, command and environment",
        "",
        f"- target: `{target.name}` (kind {target.kind}"
        + (f", from `{target.source}`" if target.source else ", the bundled agent") + ")",
        f"- command: `{shlex.join(target.portable_command())}` (`{PYTHON}` = the Python running killpoint)",
    ]
    for name, value in data["environment"].items():
        out.append(f"- `{name}={value}`")
    out.append("- the whole target (launch templates, invariants, exit codes): `target` in `bundle.json`")
    out += ["", "Set by the harness per case:", ""]
    for name, what in data["harness_environment"].items():
        out.append(f"- `{name}`: {what} (set by the harness per case)")
    out += ["", "Launches of the bundled run:", ""]
    for launch in data["launches"]:
        how = f"killed by {launch['killed_by']}" if launch.get("killed_by") else f"exit {launch.get('returncode')}"
        out.append(f"{launch['index']}. {launch['role']} ({how}): `{shlex.join(launch.get('argv') or [])}`")
    if any("{restart}" in (launch.get("argv") or []) for launch in data["launches"]):
        out += ["", "(`{restart}` stands for the scenario's restart flags: empty before the first kill, the `[restart]` "
                "changes on every launch after it.)"]
    out += ["", "## Files", ""]
    for name, what in data["files"].items():
        out.append(f"- `{name}`: {what}")
    return "\n".join(out) + "\n"


# --------------------------------------------------------------------------------------------------------------
# Reading and re-running a bundle


@dataclass
class Bundle:
    """A loaded bundle: its folder, ``bundle.json`` and the scenario parsed from ``scenario.toml``."""

    path: Path
    data: dict[str, Any]
    scenario: Any  # chaos.scenario.Scenario

    @property
    def schedule(self) -> list[str]:
        return list(self.data["schedule"])

    @property
    def invariants(self) -> list[str]:
        return list(self.data["invariants"])

    @property
    def target(self):
        return target_of(self.data)

    def with_planner_dir(self, directory: str) -> Bundle:
        """This bundle with its foreign planner command run in ``directory``. A bundle names the directory the
        command ran in where the failure was found (the command is not part of the bundle); on another machine or
        checkout its files are elsewhere. Raises ``BundleError`` without a planner command or directory."""
        target = self.target
        if not target.planner_command:
            raise BundleError(f"{self.path}: --planner-dir: this bundle's target has no planner command")
        if not os.path.isdir(directory):
            raise BundleError(f"{self.path}: --planner-dir {directory}: not a directory")
        moved = target.with_planner(target.planner_command, None, os.path.abspath(directory))
        return replace(self, data={**self.data, "target": target_json(moved)})


def load_bundle(path: str | Path) -> Bundle:
    """Read and check a bundle folder; raises ``BundleError`` (one line naming the file and the problem)."""
    from chaos.errors import ScenarioError
    from chaos.scenario import load_scenario

    folder = Path(path)
    if folder.is_file() and folder.name in (BUNDLE_FILE, "repro.sh"):
        folder = folder.parent
    meta = folder / BUNDLE_FILE
    if not folder.is_dir():
        raise BundleError(f"{folder}: no such bundle folder")
    try:
        data = json.loads(meta.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise BundleError(f"{meta}: missing (not a repro bundle folder)") from None
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:  # RecursionError: [[[… nested deep
        raise BundleError(f"{meta}: unreadable: {exc}") from None
    if not isinstance(data, dict) or data.get("format") != BUNDLE_FORMAT:
        raise BundleError(f"{meta}: not a {BUNDLE_FORMAT} bundle (format {data.get('format')!r})"
                          if isinstance(data, dict) else f"{meta}: not a JSON object")
    for key in ("case", "schedule", "invariants", "scenario"):
        if key not in data:
            raise BundleError(f"{meta}: missing key {key!r}")
    if "target" not in data and "agent" not in data:
        raise BundleError(f"{meta}: missing key 'target'")
    # The members the re-run reads, checked before any is used: a hand-edited bundle is one line, not a traceback
    # (a string where the schedule's list goes would otherwise be read a character at a time).
    from chaos import shapes

    kinds = {"case": str, "schedule": list[str], "invariants": list[str], "scenario": dict[str, Any],
             "target" if "target" in data else "agent": dict[str, Any]}
    for key, kind in kinds.items():
        if not shapes.fits(data[key], kind):
            raise BundleError(f"{meta}: {key}: expected {shapes.expected(kind)}, got {shapes.describe(data[key])}")
    try:  # the target's own fields too: the re-run hands them to processes as they are
        problems = shapes.field_problems(target_of(data), f"{meta}: target")
    except (TypeError, ValueError, AttributeError, KeyError) as exc:
        problems = [f"{meta}: target: not a target description ({type(exc).__name__}: {exc})"]
    if problems:
        raise BundleError(problems[0])
    for key, value in data["scenario"].items():
        if key in ("file", "sha256") and not isinstance(value, str):
            raise BundleError(f"{meta}: scenario.{key}: expected a string, got {shapes.describe(value)}")
    scenario_path = folder / data["scenario"].get("file", "scenario.toml")
    try:
        scenario = load_scenario(scenario_path)
    except ScenarioError as exc:
        raise BundleError(exc.messages[0]) from None
    digest = "sha256:" + hashlib.sha256(scenario_path.read_bytes()).hexdigest()
    if data["scenario"].get("sha256") not in (None, digest):
        raise BundleError(f"{scenario_path}: changed since the bundle was written (sha256 differs from {meta.name})")
    from chaos.faults import FaultSyntaxError, parse_schedule

    try:
        parse_schedule(list(data["schedule"]))
    except FaultSyntaxError as exc:
        if any(str(t).startswith("llm(") for t in data["schedule"]):
            raise BundleError(f"{meta}: schedule has provider faults (llm(...)); `chaos repro` re-runs kill "
                              "schedules only — run the case id with `chaos campaign` instead") from None
        raise BundleError(f"{meta}: schedule: {exc}") from None
    return Bundle(folder, data, scenario)


@dataclass
class Reproduction:
    """What re-running a bundle gave: the baseline and case results and the exit code it means."""

    code: int
    baseline: Any  # chaos.case.Baseline
    result: Any  # chaos.case.CaseResult | None (None when the baseline failed)
    failing: list[str]  # the invariants (or harness verdict) that failed now
    message: str


def failing_names(result: Any) -> list[str]:
    """The failed invariants of a ``CaseResult``; its status when the supervisor verdict prevented judging."""
    names = [r.name for r in result.invariants if not r.ok]
    if not names and result.status not in (PASS, FAIL):
        names = [result.status]
    if not names and result.status == FAIL:
        names = ["agent-exit"]  # every invariant held but the agent did not settle (the campaign's name for it)
    return names


def reproduce(bundle: Bundle, work_dir: str | Path, *, keep: str = "failing") -> Reproduction:
    """Run the bundle's baseline (correct agent) and case in ``work_dir``; compare with the recorded failure."""
    from chaos.case import run_baseline, run_case

    work = Path(work_dir)
    target = bundle.target
    baseline = run_baseline(bundle.scenario, work_dir=work, target=target, keep=keep)
    if not baseline.ok:
        failed = failing_names(baseline.result)
        return Reproduction(DIFFERENT, baseline, None, failed,
                            f"the crash-free baseline no longer passes ({', '.join(failed)}): the case cannot be judged")
    result = run_case(bundle.scenario, bundle.schedule, work_dir=work, target=target, baseline=baseline, keep=keep)
    failing = failing_names(result) if result.status != PASS else []
    recorded = bundle.invariants
    again = [name for name in failing if name in recorded]
    if again:
        return Reproduction(REPRODUCED, baseline, result, failing, f"REPRODUCED: {', '.join(again)} fails again")
    if not failing:
        return Reproduction(HOLDS, baseline, result, [], f"NOT REPRODUCED: {', '.join(recorded)} holds now")
    return Reproduction(DIFFERENT, baseline, result, failing,
                        f"FAILS DIFFERENTLY: {', '.join(failing)} (recorded: {', '.join(recorded)})")


# --------------------------------------------------------------------------------------------------------------
# Regression export


def regression_name(bundle: Bundle) -> str:
    """``<scenario>--<schedule slug>``: a scenario name (lowercase slug) naming what the regression pins."""
    slug = re.sub(r"[^a-z0-9]+", "-", "+".join(bundle.schedule).lower()).strip("-")
    return f"{bundle.scenario.name}--{slug}"[:120].rstrip("-.")


def export_text(bundle: Bundle) -> tuple[str, str]:
    """``(name, TOML text)`` of the regression scenario: the bundle's scenario with its schedule pinned.

    Same workspace, runs, script, restart changes and expectations; a new name (names are unique in a library),
    the tag ``regression``, a description saying where it comes from, and ``[[schedules]]`` replaced by the one
    minimal schedule. The text is validated (``chaos.scenario.parse_scenario``) and checked to round-trip before it
    is returned; a failure of either is a ``BundleError``, never a file CI would trip on.
    """
    from chaos.errors import ScenarioError
    from chaos.report.summary import git_of
    from chaos.scenario import parse_scenario

    source = bundle.path / bundle.data["scenario"].get("file", "scenario.toml")
    data = tomllib.loads(source.read_text(encoding="utf-8"))
    name = regression_name(bundle)
    bugs = list(bundle.target.bugs)
    git = git_of((bundle.data.get("provenance") or {}).get("versions") or {})
    origin = (f"Regression exported by `chaos export` from the failure {bundle.data['original_case']} "
              f"(minimal schedule {'+'.join(bundle.schedule)}; {', '.join(bundle.invariants)} failed"
              + (f" with AGENT_BUGS={','.join(bugs)}" if bugs else "")
              + (f"; killpoint commit {git['commit'][:12]}" if git.get("commit") else "") + ").")
    data["name"] = name
    data["description"] = textwrap.fill(origin, 116) + "\n\n" + str(data.get("description", "")).strip() + "\n"
    data["tags"] = list(dict.fromkeys([*data.get("tags", []), "regression"]))
    data["schedules"] = [{"faults": list(bundle.schedule),
                          "description": f"pinned from {bundle.data['original_case']}: "
                                         f"{', '.join(bundle.invariants)} failed"}]
    header = [
        f"# Regression scenario exported by `chaos export` from {bundle.data['case']}.",
        f"# Fails with: chaos run <this file> --kill '{'+'.join(bundle.schedule)}'"
        + (f" --agent-bugs {','.join(bugs)}" if bugs else ""),
        "# Must pass on the correct agent (CI runs its pinned schedule forever).",
        "",
    ]
    text = "\n".join(header) + dumps_toml(data)
    if tomllib.loads(text) != data:
        raise BundleError(f"{source}: the exported scenario does not round-trip through TOML (killpoint defect)")
    try:
        parse_scenario(text, f"{name}.toml")
    except ScenarioError as exc:
        raise BundleError("exported scenario is invalid: " + exc.messages[0]) from None
    return name, text


def export(bundle: Bundle, directory: str | Path, *, force: bool = False) -> Path:
    """Write the regression scenario into ``directory`` as ``<name>.toml``; return its path.

    An existing file with the same content is left alone (exporting twice is harmless); one with other content is
    only replaced with ``force`` (it may be a hand-edited regression).
    """
    name, text = export_text(bundle)
    folder = Path(directory)
    if folder.exists() and not folder.is_dir():
        raise BundleError(f"{folder}: not a directory")
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / f"{name}.toml"
    if target.exists() and target.read_text(encoding="utf-8") != text and not force:
        raise BundleError(f"{target}: exists with other content (use --force to replace it)")
    return write_atomic(target, text)


# --------------------------------------------------------------------------------------------------------------
# A small TOML writer (tomllib reads only). Enough for scenario data: tables, arrays of tables, scalars, arrays.

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")
# Tables at this depth or shallower get [headers] / [[headers]] (runs, runs.turns, expect.when, ...); deeper
# ones are inline tables, which keeps tool calls and usage on one readable line each.
_HEADER_DEPTH = 2


def dumps_toml(data: Mapping[str, Any]) -> str:
    """TOML text for ``data`` (the values ``tomllib`` produces); ``tomllib.loads(dumps_toml(d)) == d``."""
    lines: list[str] = []
    _table(lines, data, ())
    return "\n".join(lines).strip("\n") + "\n"


def _is_table_array(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(v, dict) for v in value)


def _table(lines: list[str], table: Mapping[str, Any], path: tuple[str, ...]) -> None:
    deep = len(path) + 1 > _HEADER_DEPTH
    subtables = []
    for key, value in table.items():
        if not deep and (isinstance(value, dict) or _is_table_array(value)):
            subtables.append((key, value))
        else:
            lines.append(f"{_key(key)} = {_value(value, one_line=False)}")
    for key, value in subtables:
        sub = path + (key,)
        header = ".".join(_key(k) for k in sub)
        if isinstance(value, dict):
            lines += ["", f"[{header}]"]
            _table(lines, value, sub)
        else:
            for item in value:
                lines += ["", f"[[{header}]]"]
                _table(lines, item, sub)


def _key(key: str) -> str:
    return key if _BARE_KEY.fullmatch(key) else _string(key)


def _string(text: str) -> str:
    out = []
    for ch in text:
        if ch == '"':
            out.append('\\"')
        elif ch == "\\":
            out.append("\\\\")
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def _multiline(text: str) -> str:
    # A multi-line basic string keeps descriptions readable; the newline right after the opening quotes is
    # trimmed by TOML, and quotes/backslashes/control characters are escaped as in a basic string.
    body = _string(text)[1:-1].replace("\\n", "\n")
    return '"""\n' + body + '"""'


def _value(value: Any, *, one_line: bool) -> str:
    """A TOML value; ``one_line`` inside arrays and inline tables (TOML 1.0 forbids newlines there)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        return _multiline(value) if "\n" in value and not one_line else _string(value)
    if isinstance(value, (datetime.datetime, datetime.date, datetime.time)):
        return value.isoformat()
    if isinstance(value, list):
        return "[" + ", ".join(_value(v, one_line=True) for v in value) + "]"
    if isinstance(value, dict):
        if not value:
            return "{}"
        return "{ " + ", ".join(f"{_key(k)} = {_value(v, one_line=True)}" for k, v in value.items()) + " }"
    raise BundleError(f"cannot write {type(value).__name__} value {value!r} as TOML")
