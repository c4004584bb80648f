"""``chaos`` command line: one click group, one command per verb users think in (validate, run, campaign, …).

Every command imports its heavy modules (pydantic via ``chaos.scenario``, the supervisor, rich) inside its body, so
``chaos --help`` and the commands that do not need them stay fast. Bad input never gives a traceback: it gives
one clear line per problem and exit code 2.
"""

from __future__ import annotations

import math
import os

import click


EXIT_INTERNAL = 70  # EX_SOFTWARE: an exception nobody handled, a defect of chaos (used by no other exit path)


class _Seconds(click.FloatRange):
    """A finite number of seconds, at least ``min``: click's FloatRange lets ``nan`` through (it compares false
    with every bound) and ``inf``, which a case's wall-clock limit would then never reach."""

    def convert(self, value, param, ctx):
        seconds = super().convert(value, param, ctx)
        if not math.isfinite(seconds):
            self.fail(f"{value!r} is not a finite number of seconds", param, ctx)
        return seconds


SECONDS = _Seconds(min=0.1)
PLANNER_SECONDS = _Seconds(min=0, min_open=True)  # any the agent takes (AGENT_PLANNER_TIMEOUT: above 0, finite)

# Parallel processes per usable CPU past which more only slows every case down (each worker runs agents, a scripted
# model server and a zygote): -j 100000 would start one worker per queued case.
WORKERS_PER_CPU = 8


class _Workers(click.IntRange):
    """A number of parallel workers: 0 (one per usable CPU) up to ``WORKERS_PER_CPU`` per usable CPU."""

    def __init__(self) -> None:
        super().__init__(min=0)

    def convert(self, value, param, ctx):
        workers = super().convert(value, param, ctx)
        from chaos.case import usable_cores

        limit = WORKERS_PER_CPU * max(1, math.ceil(usable_cores()))
        if workers > limit:
            self.fail(f"{workers}: at most {limit} on this machine ({WORKERS_PER_CPU} per usable CPU; more only "
                      "slows every case down); 0 is one per CPU", param, ctx)
        return workers


WORKERS = _Workers()


def _save_traceback(exc: BaseException, argv: list[str]) -> str:
    """Write the command line and ``exc``'s traceback to a new file under the system temp directory; its path."""
    import tempfile
    import traceback

    fd, path = tempfile.mkstemp(prefix="chaos-internal-error-", suffix=".txt")
    with open(fd, "w", encoding="utf-8", errors="replace") as handle:
        handle.write("command: chaos " + " ".join(argv) + "\n\n")
        handle.write("".join(traceback.format_exception(exc)))
    return path


class Stopped(KeyboardInterrupt):
    """SIGTERM (a CI timeout, ``kill``) or SIGHUP (a closed terminal), raised where Ctrl-C raises KeyboardInterrupt:
    the same clean-up runs — every process of a case killed by the supervisor's ``finally``, a campaign's partial
    result written — where the default action would end this process at once and leave a target's exec'd processes
    (own sessions) running. The command then exits 128 + the signal."""

    def __init__(self, signum: int):
        super().__init__()
        self.signum = signum


_STOPPED: list[int] = []  # the stopping signals received, in order (the first decides the exit status)
_INTERRUPTED_AT: list[float] = []  # when a SIGINT last raised KeyboardInterrupt (time.monotonic())
# A second SIGINT this soon after one that raised is the same interrupt delivered twice: `timeout -s INT` signals the
# command and then its process group, which holds the command. Raising again would abort the clean-up the first one
# started (the partial report unwritten). A person's later Ctrl-C still insists.
SAME_INTERRUPT_SECONDS = 1.0


def _stop(signum, frame) -> None:  # noqa: ARG001 - signal API
    import signal
    import time

    _STOPPED.append(signum)
    if signum == signal.SIGINT:
        # As Python's own handler: a plain KeyboardInterrupt (a person's second Ctrl-C, a moment later, still
        # insists). Noted, so that a SIGTERM after it (a CI runner's cancel sends both) does not interrupt the
        # clean-up.
        now = time.monotonic()
        if _INTERRUPTED_AT and now - _INTERRUPTED_AT[-1] < SAME_INTERRUPT_SECONDS:
            return
        _INTERRUPTED_AT.append(now)
        raise KeyboardInterrupt
    if len(_STOPPED) == 1:  # once: a later SIGTERM/SIGHUP must not interrupt the clean-up the first one started
        raise Stopped(signum)


def _stop_on_signals(previous: dict) -> None:
    """Install ``_stop`` for SIGTERM and SIGHUP where they have their default action (not an inherited SIG_IGN:
    ``nohup`` keeps its meaning) and for SIGINT where Python's own handler is in place, in the main thread only;
    the previous handlers go into ``previous``, to restore."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return
    for sig, default in ((signal.SIGTERM, signal.SIG_DFL), (signal.SIGHUP, signal.SIG_DFL),
                         (signal.SIGINT, signal.default_int_handler)):
        if signal.getsignal(sig) == default:
            previous[sig] = signal.signal(sig, _stop)


class _Main(click.Group):
    """The ``chaos`` group: an exception no command handled becomes one line naming the file that holds its
    traceback, and exit ``EXIT_INTERNAL`` (click keeps its own handling of usage errors, SystemExit and Ctrl-C);
    SIGTERM and SIGHUP stop a command as Ctrl-C does (``Stopped``), with exit status 128 + the signal."""

    def main(self, args=None, *rest, **kwargs):
        import signal
        import sys

        # A real argv cannot hold a NUL, an in-process call can; click's path checks would raise ValueError on it.
        if args is not None and any(isinstance(a, str) and "\0" in a for a in args):
            click.echo("chaos: an argument contains a NUL byte", err=True)
            sys.exit(2)
        _STOPPED.clear()
        _INTERRUPTED_AT.clear()
        previous: dict = {}
        try:
            _stop_on_signals(previous)  # inside: a signal meanwhile is handled like one a moment later
            return super().main(args, *rest, **kwargs)
        except SystemExit:
            if _STOPPED:  # click reported the Stopped as an abort (exit 1): the signal's status instead
                sys.exit(128 + _STOPPED[0])
            raise
        except Exception as exc:  # noqa: BLE001 - the one place a defect of chaos is turned into an exit status
            argv = list(sys.argv[1:] if args is None else args)
            try:
                where = f"traceback saved to {_save_traceback(exc, argv)}"
            except OSError as save_error:  # the temp directory is unusable: the traceback still must not be lost
                import traceback

                traceback.print_exception(exc)
                where = f"traceback above (could not save it: {save_error.strerror or save_error})"
            first = (str(exc).splitlines() or [""])[0][:200]
            click.echo(f"chaos: internal error (a defect of chaos, please report it): {type(exc).__name__}: {first}; "
                       f"{where}", err=True)
            sys.exit(EXIT_INTERNAL)
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


def _print_version(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    """``--version``: the installed distribution's version, or that it is not installed (a source tree run with
    ``python -m chaos``) — never an error."""
    if not value or ctx.resilient_parsing:
        return
    from chaos.report.summary import versions

    click.echo(f"chaos, version {versions()['killpoint']}")
    ctx.exit(0)


@click.group(cls=_Main, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--version", is_flag=True, expose_value=False, is_eager=True, callback=_print_version,
              help="Show the version and exit.")
def main() -> None:
    """killpoint's crash-injection chaos harness."""


@main.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=str))
def validate(paths: tuple[str, ...]) -> None:
    """Check scenario files (files or directories, recursively *.toml); one `file:line: field: message` per problem."""
    from chaos.scenario import load_scenarios

    scenarios, problems = load_scenarios(list(paths))
    for line in problems:
        click.echo(line)
    if problems:
        click.echo(f"{len(problems)} problem(s) in scenario files", err=True)
        raise SystemExit(2)
    click.echo(f"OK: {len(scenarios)} scenario(s) valid")


def _fail_usage(lines: list[str]) -> None:
    """Print one line per problem and exit 2 (usage error)."""
    for line in lines:
        click.echo(line, err=True)
    raise SystemExit(2)


def _output_directory(command: str, flag: str, path: str) -> list[str]:
    """Exit 2 with one line when ``path`` (an output directory option) exists but is not a directory, or cannot be
    made: what would otherwise surface mid-run as an internal error (NotADirectoryError, FileExistsError). Returns
    the directories it made, outermost first (``_remove_if_empty``)."""
    import os

    if os.path.exists(path) and not os.path.isdir(path):
        _fail_usage([f"chaos {command}: {flag} {path}: exists and is not a directory"])
    made: list[str] = []
    try:
        head = path.rstrip(os.sep) or path
        while head and not os.path.lexists(head):  # the path as makedirs walks it: `a/../b` makes `a` too
            if os.path.basename(head) not in (os.curdir, os.pardir):
                made.insert(0, head)
            head = os.path.dirname(head)
        os.makedirs(path, exist_ok=True)
    except (OSError, ValueError) as exc:  # ValueError: a NUL in the path
        _fail_usage([f"chaos {command}: {flag} {path}: cannot create the directory: "
                     f"{getattr(exc, 'strerror', None) or exc}"])
    return made


def _remove_if_empty(made: list[str]) -> None:
    """Remove the directories ``_output_directory`` made that a run left empty (it kept nothing), innermost first:
    a run that passes leaves no trace in the directory it ran in."""
    import os

    for directory in reversed(made):
        try:
            os.rmdir(directory)
        except OSError:  # not empty (something was kept there), or already gone
            return


def planner_place_options(f):
    """``--planner-dir`` and ``--planner-timeout``: where and how long a planner command runs (``chaos.target``)."""
    f = click.option("--planner-timeout", "planner_timeout", metavar="SECONDS", type=PLANNER_SECONDS,
                     help="seconds the agent gives the planner command per decision, recorded with the target "
                          "[default: the target file's AGENT_PLANNER_TIMEOUT, else this environment's, else 30]")(f)
    return click.option("--planner-dir", "planner_dir", metavar="DIR", type=click.Path(path_type=str),
                        help="where the planner command runs [default: this directory for --planner-cmd, the target "
                             "file's for its planner_command]")(f)


def target_options(f):
    """``--target``, ``--agent-bugs``, ``--planner-cmd``, ``--planner-dir``, ``--planner-timeout``, ``--planner-scope``
    and ``--launcher``: how every command names the system under test (``chaos.target``)."""
    f = click.option("--launcher", type=click.Choice(["zygote", "exec"]), default=None,
                     help="how agent processes start: forked from a warm zygote, or exec'd from scratch "
                          "[default: zygote where the target allows it (a python -m command), else exec]")(f)
    f = click.option("--planner-scope", type=click.Choice(["recovery", "all"]), default=None,
                     help="which plans --planner-cmd decides: the recovery decisions (before the process commits "
                          "anything itself) [default] or every plan")(f)
    f = planner_place_options(f)
    f = click.option("--planner-cmd", "planner_cmd", metavar="CMD",
                     help="a foreign recovery planner the agent runs as `CMD plan LOG CURRENT.json` (in "
                          "--planner-dir); asked for one plan before any case (docs/targets.md)")(f)
    f = click.option("--agent-bugs", default="", metavar="NAMES",
                     help="known-bug switches of the target for the cases (never the baseline)")(f)
    return click.option("--target", "target_file", type=click.Path(path_type=str), metavar="TARGET.toml",
                        help="the system under test (docs/targets.md) [default: the bundled agent]")(f)


def _target_or_exit(target_file, agent_bugs, planner_cmd, planner_scope, launcher=None, *, planner_dir=None,
                    planner_timeout=None, preflight=True, resuming=False):
    """The target the options name, its foreign planner command (if any) asked for one plan first unless
    ``preflight`` is false (nothing will run): a command that cannot answer would fail every case alike
    (chaos.preflight). Exit 2 with one line per problem."""
    from chaos.target import TargetError, resolve_target

    try:
        target = resolve_target(target_file, bugs=agent_bugs, planner_command=planner_cmd,
                                planner_scope=planner_scope, launcher=launcher, planner_dir=planner_dir,
                                planner_timeout=planner_timeout,
                                # A resume's record rules: the shell's AGENT_PLANNER_TIMEOUT is no option given.
                                environ=None if resuming else os.environ)
    except TargetError as exc:
        _fail_usage(exc.messages)
    if preflight:
        _preflight_or_exit(target)
    return target


def _preflight_or_exit(target, where: str = "", hint: str = "") -> None:
    """Exit 2 with one line when the target's foreign planner command gives no plan (chaos.preflight): it would
    fail every case alike. ``where``: what the line names first (a bundle); ``hint``: what it ends with."""
    from chaos.preflight import planner_problem

    problem = planner_problem(target)
    if problem is not None:
        _fail_usage([f"{where}{problem}; no case was run{hint}"])


def _load_scenario_or_exit(path: str):
    from chaos.errors import ScenarioError
    from chaos.scenario import load_scenario

    try:
        return load_scenario(path)
    except ScenarioError as exc:
        _fail_usage(exc.messages)


@main.command("run")
@click.argument("scenario", type=click.Path(path_type=str))
@click.option("--kill", "kills", multiple=True, metavar="FAULT[+FAULT...]",
              help="a schedule to run (repeatable); default: every kill point the baseline reaches, at before-write "
                   "and after-sync, then the scenario's pinned schedules")
@target_options
@click.option("--keep", is_flag=True, help="keep every case directory, not only failing ones")
@click.option("--reports", "reports_dir", default="reports", show_default=True, type=click.Path(path_type=str),
              help="where case directories are kept")
@click.option("--case-timeout", default=120.0, show_default=True, type=SECONDS,
              help="wall-clock limit per case, seconds")
def run_command(scenario: str, kills: tuple[str, ...], target_file, agent_bugs: str, planner_cmd, planner_dir,
                planner_timeout, planner_scope, launcher, keep: bool, reports_dir: str, case_timeout: float) -> None:
    """Run the crash-free baseline, then each case; exit 0 when all hold, 1 when one did not (a --kill point the run
    never reached is one), 2 on usage errors."""
    loaded = _load_scenario_or_exit(scenario)
    from chaos.faults import FaultSyntaxError, format_schedule, parse_schedule

    from chaos.target import is_probe

    if is_probe(loaded):
        _run_probe_scenario(loaded, kills, keep, reports_dir, case_timeout)

    schedules: list[str] = []
    for text in kills:
        try:
            parsed = parse_schedule(text)
        except FaultSyntaxError as exc:
            _fail_usage([f"--kill {text!r}: {exc}"])
        if not parsed:
            _fail_usage([f"--kill {text!r}: empty schedule"])
        schedules.append(format_schedule(parsed))
    target = _target_or_exit(target_file, agent_bugs, planner_cmd, planner_scope, launcher, planner_dir=planner_dir,
                             planner_timeout=planner_timeout)
    made = _output_directory("run", "--reports", reports_dir)  # once the command line holds: a refused run makes none

    import time
    from pathlib import Path

    from chaos import verdict
    from chaos.case import case_slug, run_baseline, run_case
    from chaos.supervisor import Limits

    out = verdict.console()
    stamp = time.strftime("%Y%m%d-%H%M%S")
    work = Path(reports_dir) / f"{case_slug(loaded.name)}-{stamp}"
    suffix = 1
    while work.exists():
        suffix += 1
        work = Path(reports_dir) / f"{case_slug(loaded.name)}-{stamp}-{suffix}"
    mode = "all" if keep else "failing"
    limits = Limits(case_seconds=case_timeout)
    with out.status(f"{loaded.name}: crash-free baseline"):
        baseline = run_baseline(loaded, work_dir=work, target=target, limits=limits, keep=mode)
    results = [baseline.result]
    if baseline.ok:
        pinned = [format_schedule(parse_schedule(list(s.faults))) for s in loaded.schedules]
        todo = schedules or list(dict.fromkeys(["+".join(s) for s in baseline.schedules()] + pinned))
        for i, schedule in enumerate(todo, 1):
            with out.status(f"{loaded.name}: case {i}/{len(todo)} {schedule}"):
                results.append(run_case(loaded, schedule, work_dir=work, target=target, baseline=baseline,
                                        limits=limits, keep=mode))
    out.print(verdict.case_table(results, title=f"chaos run {loaded.name}"
                                 + (f" ({target.label()})" if target.label() != "bundled" else "")))
    out.print(verdict.failure_details(results))
    from chaos.records import NOT_REACHED

    if any(r.status == NOT_REACHED for r in results):
        # A point the crash-free run never reaches is a typo or a wrong #N far more often than a finding.
        out.print(f"a schedule named a kill point this run never reached: `chaos killpoints {scenario}` lists "
                  "the points its crash-free run reaches", style="yellow")
    if not baseline.ok:
        out.print("the crash-free baseline did not pass: no case was run (fix the scenario or the agent first)",
                  style="bold red")
    out.print(verdict.summary(results))
    if work.exists() and not any(work.iterdir()):
        work.rmdir()
        _remove_if_empty(made)
    elif work.exists():
        out.print(f"case directories kept under {work}", style="dim")
        if baseline.ok and not all(r.ok for r in results):
            # A campaign writes a bundle for the cases it plans: those the baseline reaches, and pinned ones.
            planned = {"+".join(s) for s in baseline.schedules()} | set(pinned)
            failed = {"+".join(r.schedule) for r in results if not r.ok}
            out.print(_bundle_hint(scenario, target.cli_args(), failed <= planned), style="dim", markup=False)
    raise SystemExit(0 if all(r.ok for r in results) else 1)


def _run_probe_scenario(loaded, kills: tuple[str, ...], keep: bool, reports_dir: str, case_timeout: float) -> None:
    """``chaos run`` of a probe scenario (a Python program under chaos.probe): crash-free run, then each case,
    judged by the properties (chaos.properties); the repro command of a probe failure in a campaign report."""
    import shutil
    import time
    from pathlib import Path

    from chaos import verdict
    from chaos.case import case_slug, shared_launcher
    from chaos.faults import FaultSyntaxError, format_schedule, parse_schedule, probe_fault_problem
    from chaos.probecase import classify, kill_points, run_probe_case
    from chaos.supervisor import Limits

    target = loaded.the_target
    program = target.probe
    schedules: list[str] = []
    for text in kills:
        try:
            parsed = parse_schedule(text, program.vocabulary)
        except FaultSyntaxError as exc:
            _fail_usage([f"--kill {text!r}: {exc}"])
        if not parsed:
            _fail_usage([f"--kill {text!r}: empty schedule"])
        refused = [p for p in map(probe_fault_problem, parsed) if p]
        if refused:
            _fail_usage([f"--kill {text!r}: {refused[0]}"])
        schedules.append(format_schedule(parsed))
    _require_environment(loaded)
    made = _output_directory("run", "--reports", reports_dir)
    out = verdict.console()
    work = Path(reports_dir).resolve() / f"{case_slug(loaded.name)}-{time.strftime('%Y%m%d-%H%M%S')}"
    work.mkdir(parents=True, exist_ok=True)
    limits = Limits(case_seconds=case_timeout, silence_seconds=min(case_timeout, 60.0))
    launcher = shared_launcher(target)
    model = loaded if loaded.runs else None
    with out.status(f"{loaded.name}: crash-free run"):
        base = run_probe_case(program, (), work, name="baseline", limits=limits, launcher=launcher, model=model)
    failed = 0
    if not base.passed:
        out.print(f"BASELINE {loaded.name}: the crash-free run fails {', '.join(base.failed)}", style="bold red")
        for prop in base.failed:
            out.print(f"  {prop}: {base.problems[prop][0]}")
        raise SystemExit(1)
    result = base.result
    pinned = [format_schedule(parse_schedule(list(s.faults), program.vocabulary)) for s in loaded.schedules]
    todo = schedules or list(dict.fromkeys(kill_points(base.run) + pinned))
    for i, schedule in enumerate(todo, 1):
        with out.status(f"{loaded.name}: case {i}/{len(todo)} {schedule}"):
            name = case_slug(f"{loaded.name}::{schedule}")
            case = run_probe_case(program, schedule, work, baseline=result, limits=limits, name=name,
                                  launcher=launcher, model=model)
        status, failures = classify(case)  # the campaign's verdict, so a report's repro line says the same
        if status == "pass":
            out.print(f"PASS {loaded.name}::{schedule}")
            if not keep:
                shutil.rmtree(Path(case.run.case_dir).parent, ignore_errors=True)
        elif status == "not-reached":  # not a pass (as for the session agent's `chaos run`): exit 1
            failed += 1
            out.print(f"NOT REACHED {loaded.name}::{schedule}", style="yellow")
        else:
            failed += 1
            out.print(f"{status.upper()} {loaded.name}::{schedule}", style="bold red")
            for f in failures:
                out.print(f"  {f['invariant']}: {f['message']}")
    if not keep:
        shutil.rmtree(Path(base.run.case_dir).parent, ignore_errors=True)
    if loaded.expect_failure:
        # `chaos run` is the repro command: it exits 1 when the finding reproduces (a campaign counts it as expected).
        out.print(f"expected failure: {' '.join(loaded.expect_failure.split())}"
                  + (" — it did not fail (unexpected pass)" if not failed else ""), style="yellow")
    kept = work.exists() and any(work.iterdir())
    if not kept and work.exists():
        work.rmdir()
        _remove_if_empty(made)
    out.print(f"{len(todo)} case(s), {failed} did not pass" + (f"; case directories under {work}" if kept else ""))
    raise SystemExit(1 if failed else 0)


def _bundle_hint(scenario: str, target_args: list[str], planned: bool) -> str:
    """Where a repro bundle comes from: a kept case directory is the raw evidence of one run here, not something
    to hand on (a bundle carries the scenario, the target and a repro.sh that checks it reproduces). ``planned``:
    every failing schedule is one the scenario's campaign runs (a kill point its baseline reaches, or pinned); else
    the schedule must be pinned first. ``target_args``: the options that name the run's target again."""
    import shlex

    command = shlex.join(["chaos", "campaign", str(scenario), *target_args])
    if planned:
        return f"a repro bundle of each failure: `{command}` (reports/<campaign>/failures/<case>/)"
    return (f"a repro bundle of a failure: pin its schedule in the scenario's [[schedules]], then `{command}` "
            "(reports/<campaign>/failures/<case>/)")


def _require_environment(loaded) -> None:
    """Exit 2 with the one command to run when a probe scenario's interpreter environment is not prepared."""
    if not loaded.the_target.probe.python:
        _fail_usage([f"{loaded.source}: its interpreter environment is not prepared: run `chaos targets prepare "
                     f"{loaded.source}`"])


@main.command("killpoints")
@click.argument("scenario", type=click.Path(path_type=str))
def killpoints_command(scenario: str) -> None:
    """List every kill point the crash-free baseline of SCENARIO reaches (exit 1 if the baseline fails)."""
    loaded = _load_scenario_or_exit(scenario)
    import tempfile
    from pathlib import Path

    from chaos.target import is_probe

    if is_probe(loaded):  # a probe scenario: the program's own durable writes
        from chaos.case import shared_launcher
        from chaos.probecase import kill_points, run_probe_case

        _require_environment(loaded)
        with tempfile.TemporaryDirectory(prefix="chaos-killpoints-") as tmp:
            base = run_probe_case(loaded.the_target.probe, (), Path(tmp), name="baseline",
                                  launcher=shared_launcher(loaded.the_target), model=loaded if loaded.runs else None)
        if not base.passed:
            for prop in base.failed:
                click.echo(f"BASELINE {loaded.name}: {prop}: {base.problems[prop][0]}", err=True)
            raise SystemExit(1)
        points = kill_points(base.run)
        click.echo("\n".join(points))
        click.echo(f"{len(points)} kill point(s); `chaos run` and `chaos campaign` kill at each")
        return

    from chaos import verdict
    from chaos.case import run_baseline

    out = verdict.console()
    with tempfile.TemporaryDirectory(prefix="chaos-killpoints-") as tmp:
        baseline = run_baseline(loaded, work_dir=Path(tmp), keep="none")
    if not baseline.ok:
        out.print(verdict.case_table([baseline.result]))
        out.print(verdict.failure_details([baseline.result]))
        raise SystemExit(1)
    out.print(verdict.killpoint_table(baseline))
    plain = baseline.schedules()
    out.print(f"{len(baseline.killpoints)} kill point(s) in {len(plain) // 2} transaction(s); `chaos run` runs the "
              f"{len(plain)} at before-write and after-sync")


# ---- repro bundles and reports (chaos.bundle, chaos.report) ----------------------------------------------------


def _bundle_or_exit(path: str):
    from chaos.bundle import BundleError, load_bundle

    try:
        return load_bundle(path)
    except BundleError as exc:
        _fail_usage([str(exc)])


@main.command("repro")
@click.argument("bundle", type=click.Path(path_type=str))
@click.option("--work", type=click.Path(path_type=str), default=None,
              help="directory for the re-run's case directories (default: a temporary one)")
@click.option("--keep", is_flag=True, help="keep the case directories (in --work, or a printed temporary path)")
@click.option("--planner-dir", "planner_dir", metavar="DIR", type=click.Path(path_type=str),
              help="where the bundle's planner command runs here [default: the directory it ran in when found]")
def repro_command(bundle: str, work: str | None, keep: bool, planner_dir: str | None) -> None:
    """Re-run a repro bundle's case (baseline first) and print the verdict.

    Exit 1 when a recorded invariant fails again (reproduced), 0 when every invariant holds, 3 when the case now
    fails differently (another invariant, or the baseline), 2 when BUNDLE is not a usable bundle or its foreign
    planner command gives no plan here (it is not part of the bundle: --planner-dir says where it is).
    """
    from chaos.bundle import BundleError

    loaded = _bundle_or_exit(bundle)
    if planner_dir is not None:
        try:
            loaded = loaded.with_planner_dir(planner_dir)
        except BundleError as exc:
            _fail_usage([str(exc)])
    # A bundle does not carry the planner: is it here, where it was?
    _preflight_or_exit(loaded.target, f"{bundle}: ", "" if planner_dir else " (--planner-dir DIR: where it is here)")
    if work:
        _output_directory("repro", "--work", work)  # once the bundle is usable: a refused repro makes nothing
    import shutil
    import tempfile
    from pathlib import Path

    from chaos import verdict
    from chaos.bundle import reproduce
    from chaos.divergence import planner_environment, planner_timeout

    out = verdict.console()
    target = loaded.target
    label, where = target.label(), target.planner_dir or "each case's workspace"  # (a record from before a dir)
    out.print(f"repro {loaded.data['case']}" + (f"  ({label})" if label != "bundled" else "")
              # the bound the agent will use (the pre-flight above refused one it would not)
              + (f"\nplanner command runs in {where}, within {planner_timeout(planner_environment(target)):g} s"
                 if target.planner_command else "")
              + f"\nrecorded: {', '.join(loaded.invariants)} failed")
    base = Path(work) if work else Path(tempfile.mkdtemp(prefix="chaos-repro-"))
    try:
        with out.status(f"{loaded.data['case']}: baseline and case"):
            rep = reproduce(loaded, base, keep="all" if (keep or work) else "none")
        results = [rep.baseline.result] + ([rep.result] if rep.result is not None else [])
        out.print(verdict.case_table(results, title=f"chaos repro {loaded.path}"))
        out.print(verdict.failure_details(results))
        style = {0: "bold green", 1: "bold red", 3: "bold yellow"}.get(rep.code, "bold")
        out.print(rep.message, style=style)
    finally:
        if keep or work:
            click.echo(f"case directories under {base}")
        else:
            shutil.rmtree(base, ignore_errors=True)
    raise SystemExit(rep.code)


@main.command("export")
@click.argument("bundle", type=click.Path(path_type=str))
@click.argument("directory", type=click.Path(path_type=str))
@click.option("--force", is_flag=True, help="replace an existing regression file with other content")
def export_command(bundle: str, directory: str, force: bool) -> None:
    """Write BUNDLE's scenario with its minimal schedule pinned into DIRECTORY (e.g. scenarios/regressions/)."""
    loaded = _bundle_or_exit(bundle)
    from chaos.bundle import BundleError, export

    try:
        path = export(loaded, directory, force=force)
    except BundleError as exc:
        _fail_usage([str(exc)])
    import shlex

    click.echo(f"wrote {path}")
    click.echo("  fails:  " + shlex.join(["chaos", "run", str(path), "--kill", "+".join(loaded.schedule),
                                          *loaded.target.cli_args()]))
    click.echo(f"  check:  chaos validate {directory}")


def _render_campaign_report(result, directory):
    """summary.json, junit.xml, index.html and a repro bundle per failure in the campaign directory; returns the
    ``chaos.report.render.Rendered`` (None when not written) for the summary to print.

    A report that cannot be written is one line on stderr: it must not hide the campaign's own exit status.
    """
    from chaos.errors import ChaosError
    from chaos.report.render import render_result

    try:
        rendered = render_result(result, directory)
    except (ChaosError, OSError) as exc:
        click.echo(f"report: not written: {exc}", err=True)
        return None
    for note in rendered.notes:
        click.echo(f"  note: {note}", err=True)
    return rendered


@main.group("report")
def report_group() -> None:
    """Render campaign reports (summary.json, junit.xml, index.html, repro bundles) and merge shards."""


def _print_rendered(rendered) -> None:
    for note in rendered.notes:
        click.echo(f"note: {note}", err=True)
    for kind in ("summary", "junit", "html"):
        click.echo(f"{kind}: {rendered.paths[kind]}")
    for case_id, command in rendered.reproduce.items():
        click.echo(f"reproduce {case_id}: {command}")


@report_group.command("render")
@click.argument("directory", type=click.Path(path_type=str))
def report_render(directory: str) -> None:
    """Re-render a campaign directory's report from its journal (bundles for failures that have none yet)."""
    from chaos.campaign import CampaignError
    from chaos.errors import ChaosError
    from chaos.report.render import render_campaign

    try:
        rendered = render_campaign(directory)
    except CampaignError as exc:
        _fail_usage(exc.messages)
    except ChaosError as exc:
        _fail_usage([str(exc)])
    _print_rendered(rendered)


@report_group.command("merge")
@click.argument("directories", nargs=-1, required=True, type=click.Path(path_type=str))
@click.option("--out", required=True, type=click.Path(path_type=str), help="the merged campaign directory (new)")
@click.option("--force", is_flag=True,
              help="merge even a directory given twice, or campaigns of other scenario sets or targets")
def report_merge(directories: tuple[str, ...], out: str, force: bool) -> None:
    """Join shard directories (e.g. one per CI job) into one journal and report in OUT.

    Exit 0 when the merged campaign is complete and held, 1 when it has a failure (a sharded CI's final job must be
    red), 2 on usage errors (not shards of one campaign, without --force), 4 when a shard is incomplete."""
    from chaos.campaign import CampaignError, exit_code
    from chaos.errors import ChaosError
    from chaos.report.render import merge_campaigns

    try:
        result, rendered = merge_campaigns(list(directories), out, force=force)
    except CampaignError as exc:
        _fail_usage(exc.messages)
    except ChaosError as exc:
        _fail_usage([str(exc)])
    c = result.cases
    click.echo(f"merged {len(directories)} shard(s): {c['done']} case(s), {c['fail']} failed, {c['flaky']} flaky")
    if not result.complete:
        click.echo(f"INCOMPLETE: {result.not_run_text()}")
    _print_rendered(rendered)
    raise SystemExit(exit_code(result))


@report_group.command("history")
@click.argument("out_dir", type=click.Path(path_type=str))
def report_history(out_dir: str) -> None:
    """Rebuild OUT_DIR/history.json and OUT_DIR/index.html from the campaign directories in OUT_DIR (--out) and
    print, per target and scenario set, the latest runs and what changed: new, still failing, fixed, flaky."""
    from pathlib import Path

    from chaos.report.history import HISTORY, INDEX, rebuild, text_lines

    try:
        history = rebuild(out_dir)
    except (ValueError, OSError) as exc:
        _fail_usage([f"chaos report history: {exc}"])
    for line in text_lines(history):
        click.echo(line)
    base = Path(out_dir)  # "reports/" → reports/history.json, not reports//history.json
    click.echo(f"history: {base / HISTORY}, {base / INDEX}")


@main.command("show")
@click.argument("log", type=click.Path(path_type=str))
def show_command(log: str) -> None:
    """Print a session log (JSONL) as a readable transcript: turns, tool calls, results, records, where it was cut."""
    import json

    from chaos.inputs import read_input
    from chaos.transcript import transcript_lines

    try:
        data = read_input(log)
    except (OSError, ValueError) as exc:  # ValueError: a NUL in the path
        _fail_usage([f"chaos show: {log}: {getattr(exc, 'strerror', None) or exc}"])
    first = data.split(b"\n", 1)[0]
    if data:  # (an empty file is shown as one: "no header line")
        # A log the reducer rejects is still shown (that is what it is for); a file whose first line is no header at
        # all (a scenario, a binary, a pretty-printed JSON file, a campaign's journal) is not a session log.
        try:
            header = json.loads(first)
        except (UnicodeDecodeError, ValueError, RecursionError):
            header = None
        if not isinstance(header, dict) or header.get("kind") != "header":
            _fail_usage([f"chaos show: {log}: not a session log (a session log's line 1 is its header, a JSON "
                         'object with "kind": "header")'])
    for line in transcript_lines(data):
        click.echo(line)


def _campaign_usage(lines: list[str]) -> None:
    """One line per problem on stderr, exit 2 (the campaign's usage errors)."""
    for line in lines:
        click.echo(line, err=True)
    raise SystemExit(2)


@main.command("campaign")
@click.argument("scenarios", nargs=-1, type=click.Path(path_type=str))
@click.option("--mode", type=click.Choice(["exhaustive", "random"]), default="exhaustive", show_default=True,
              help="exhaustive: every kill point the baseline reaches (+ pinned schedules); random: seeded schedules")
@click.option("--depth", type=click.IntRange(1, 2), default=1, show_default=True,
              help="2: also every kill point reached during the recovery after each first kill")
@click.option("--faults", default="kill", show_default=True, metavar="ACTIONS",
              help="exhaustive fault actions, comma-separated: kill,int,ioerror,dresume,torn,powerloss or all")
@click.option("--seed", type=int, help="random mode: the seed (a case is reproducible from seed and index)")
@click.option("--cases", "case_count", type=click.IntRange(min=1),
              help="random mode: number of cases (at most 100,000; longer: --duration)")
@click.option("--duration", metavar="DURATION", help="random mode: run for this long (e.g. 30m)")
@click.option("--max-faults", type=click.IntRange(min=1), default=3, show_default=True,
              help="random mode: at most K faults per case")
@click.option("--budget", metavar="DURATION", help="stop starting cases after this long (e.g. 2h); --resume continues")
@click.option("-j", "--workers", type=WORKERS, default=0,
              help="parallel workers; 0: one per CPU [default: 0; on --resume, the stored count]")
@click.option("--shard", metavar="K/N", help="run the K-th of N deterministic parts (by first fault)")
@click.option("--fail-fast", is_flag=True, help="stop starting cases after the first reproduced failure")
@click.option("--pinned-only", is_flag=True, help="only the scenarios' pinned [[schedules]] (CI regressions)")
@target_options
@click.option("--agent", "agent_config", type=click.Path(path_type=str), metavar="TARGET.toml", hidden=True,
              help="alias of --target (round 1's name)")
@click.option("--tag", "tags", multiple=True, help="only scenarios with this tag (repeatable: any of them)")
@click.option("--list", "list_only", is_flag=True, help="print the case ids and exit")
@click.option("--nightly", is_flag=True, help="preset: every fault action, depth 2, regressions enumerated (the selected scenarios; default the full library)")
@click.option("--name", default="", help="campaign name: reports/<name>/ [default: campaign-<UTC time>]")
@click.option("--out", default="reports", show_default=True, type=click.Path(path_type=str),
              help="where campaign directories go")
@click.option("--cache", type=click.Path(path_type=str), help="kill-point cache [default: <out>/.cache]")
@click.option("--resume", "resume_dir", type=click.Path(path_type=str), metavar="DIR",
              help="continue the campaign in DIR (finished cases are not run again)")
@click.option("--keep", type=click.Choice(["failing", "all", "none"]), default="failing", show_default=True,
              help="which case directories to keep")
@click.option("--no-shrink", is_flag=True, help="report failures without shrinking their schedules")
@click.option("--case-timeout", type=SECONDS, default=120.0, show_default=True,
              help="wall-clock limit per case, seconds")
@click.option("--no-replay", is_flag=True,
              help="plan order only: do not run first the cases that failed or were flaky in earlier runs under --out")
@click.option("--launcher-check", is_flag=True,
              help="run a sample of the scenarios' cases (one per fault action and per kill point kind) under both "
                   "launchers and fail when a verdict or transcript differs (chaos/launchercheck.py)")
def campaign_command(scenarios, mode, depth, faults, seed, case_count, duration, max_faults, budget, workers, shard,
                     fail_fast, pinned_only, target_file, agent_bugs, planner_cmd, planner_dir, planner_timeout,
                     planner_scope, launcher, agent_config, tags,
                     list_only, nightly, name, out, cache, resume_dir, keep, no_shrink, case_timeout,
                     no_replay, launcher_check) -> None:
    """Run many cases in parallel: with no arguments, every bundled scenario at every kill point (exhaustive, depth 1).

    Exit 0 when every planned case ran and held (flaky cases are reported, not failed), 1 when a failure
    reproduced, a baseline did not pass or the harness could not run a case (even if incomplete), 2 on usage
    errors, 4 when incomplete (every case that ran held, but not every planned case ran: --budget, --fail-fast),
    130 on SIGINT, 143 on SIGTERM, 70 on an internal error of chaos itself (a bug to report). --resume DIR
    continues a campaign with its stored options (a new --budget or --workers may be given; any other changed
    option is refused).
    """
    import sys
    from pathlib import Path

    from chaos import campaign as cp

    if target_file and agent_config:
        _campaign_usage(["--agent is an alias of --target: give one of them"])
    context = click.get_current_context()
    explicit = {p for p in context.params if context.get_parameter_source(p) in (
        click.core.ParameterSource.COMMANDLINE, click.core.ParameterSource.ENVIRONMENT)}
    if resume_dir is None:
        # Options another one overrides or ignores are refused, not silently dropped (the report would describe a
        # campaign other than the one asked for).
        random_only = [flag for flag, name in (("--seed", "seed"), ("--cases", "case_count"), ("--duration", "duration"),
                                            ("--max-faults", "max_faults")) if name in explicit]
        if nightly and explicit & {"mode", "depth", "faults"}:
            _campaign_usage(["--nightly sets --mode exhaustive, --depth 2 and --faults all: give those without it"])
        if mode == "exhaustive" and random_only:
            _campaign_usage([f"{', '.join(random_only)}: random mode only (add --mode random)"])
    target = None
    if resume_dir is not None and planner_cmd and planner_timeout is None:
        # The planner typed again on a resume: its stored timeout is part of it (the shell's variable is not).
        from chaos.target import Target

        try:
            planner_timeout = Target.from_json(cp.stored_options(resume_dir).target).planner_timeout
        except cp.CampaignError:
            pass  # an unusable directory is said below, in one line
    if resume_dir is None or explicit & {"target_file", "agent_config", "agent_bugs", "planner_cmd", "planner_dir",
                                         "planner_timeout", "planner_scope", "launcher"}:
        # On --resume the stored target runs (given options only may not differ from it): that one is asked below.
        target = _target_or_exit(target_file or agent_config, agent_bugs, planner_cmd, planner_scope, launcher,
                                 planner_dir=planner_dir, planner_timeout=planner_timeout,
                                 preflight=not list_only and resume_dir is None, resuming=resume_dir is not None)
    try:
        families = list(cp.FAULT_FAMILIES) if faults.strip() == "all" else [
            f.strip() for f in faults.split(",") if f.strip()]
        options = cp.CampaignOptions(
            scenarios=list(scenarios), tags=list(tags), mode=mode, depth=depth, faults=families, seed=seed,
            cases=case_count, duration=cp.parse_duration(duration) if duration else None, max_faults=max_faults,
            budget=cp.parse_duration(budget) if budget else None, workers=workers, shard=shard,
            fail_fast=fail_fast, pinned_only=pinned_only, name=name, out=out, cache=cache, keep=keep,
            shrink=not no_shrink, case_seconds=case_timeout, replay=not no_replay,
            **({"target": target.to_json()} if target is not None else {}),
        )
        if nightly:
            cp.nightly(options)
        if launcher_check:
            from chaos.launchercheck import run_check

            check = run_check(options, say=lambda line: click.echo(line, err=True), workers=workers or None)
            for line in check.lines():
                click.echo(line)
            raise SystemExit(0 if check.ok else 1)
        if resume_dir is not None:
            # The stored options rule on resume: a changed one is refused in one line, never silently ignored.
            stored = cp.stored_options(resume_dir)
            problems = cp.resume_conflicts(stored, options, explicit)
            if problems:
                _campaign_usage(problems)
            if not list_only:  # the stored planner command asked again: its script or directory may be gone
                from chaos.target import Target

                _preflight_or_exit(Target.from_json(stored.target))
        reporter = cp.RichReporter() if sys.stderr.isatty() and not list_only else cp.Reporter(
            lambda line: click.echo(line, err=True))
        result = cp.run_campaign(options, reporter=reporter, command=["chaos", *sys.argv[1:]], resume=resume_dir,
                                 list_only=list_only, workers=workers or None,
                                 budget=options.budget if resume_dir is not None else None)
    except cp.CampaignError as exc:
        _campaign_usage(exc.messages)
    if list_only:
        for case_id in result:
            click.echo(case_id)
        return
    directory = Path(result.shards[0]) if result.shards else Path(resume_dir or Path(options.out) / result.name)
    rendered = None
    try:
        rendered = _render_campaign_report(result, directory)  # first: each finding's summary line names its command
    finally:  # whatever rendering does, the campaign's summary is printed
        for line in cp.summary_lines(result, directory, reproduce=rendered.reproduce if rendered else None):
            click.echo(line)
    if rendered is not None:
        bundles = "; repro bundles under failures/" if (directory / "failures").is_dir() else ""
        click.echo(f"  report: {rendered.paths['html']} (summary.json, junit.xml{bundles})")
    raise SystemExit(cp.exit_code(result))


@main.command("mutants")
@click.argument("scenarios", nargs=-1, type=click.Path(path_type=str))
@click.option("--switch", "switches", multiple=True, metavar="NAME",
              help="only this known-bug switch (repeatable) [default: every switch of `python -m agent bugs`]")
@click.option("--fast", is_flag=True,
              help="CI preset: a few library scenarios plus each regression's pinned schedule (scenarios/regressions)")
@click.option("-j", "--workers", type=WORKERS, default=0, help="parallel workers; 0: one per CPU [default: 0]")
@click.option("--out", default="reports/mutants", show_default=True, type=click.Path(path_type=str),
              help="where the campaigns and summary.json go")
@click.option("--name", default="", help="this run's directory under --out [default: mutants-<UTC time>]")
@click.option("--case-timeout", type=SECONDS, default=120.0, show_default=True,
              help="wall-clock limit per case, seconds")
@click.option("--target", "target_file", type=click.Path(path_type=str), metavar="TARGET.toml",
              help="the system under test whose switches are exercised (docs/targets.md) [default: the bundled agent]")
@click.option("--planner-cmd", "planner_cmd", metavar="CMD",
              help="a foreign recovery planner the agent consults in every campaign (in --planner-dir); asked for "
                   "one plan before any case (docs/targets.md)")
@planner_place_options
@click.option("--planner-scope", type=click.Choice(["recovery", "all"]), default=None,
              help="which plans --planner-cmd decides [default: recovery]")
@click.option("--launcher", type=click.Choice(["zygote", "exec"]), default=None,
              help="how agent processes start [default: zygote where the target allows it]")
def mutants_command(scenarios, switches, fast, workers, out, name, case_timeout, target_file, planner_cmd,
                    planner_dir, planner_timeout, planner_scope, launcher) -> None:
    """Run the campaign on the correct agent and once per known-bug switch: is every switch detected?

    Prints a table (per switch: detected, the invariant that caught it, the first failing case, its shrunk
    schedule, the time to first detection) and writes <out>/summary.json. Exit 0 when every switch was detected
    and the correct agent had no failure, 1 when a switch survived or the correct agent failed (a false alarm),
    2 on usage errors, 130 when interrupted.
    """
    import sys

    from chaos import mutants as mu
    from chaos import verdict

    target = _target_or_exit(target_file, "", planner_cmd, planner_scope, launcher, planner_dir=planner_dir,
                             planner_timeout=planner_timeout)
    options = mu.MutantsOptions(scenarios=list(scenarios), switches=list(switches), fast=fast, workers=workers,
                                out=out, name=name, case_seconds=case_timeout, target=target)
    try:
        result = mu.run_mutants(options, say=lambda line: click.echo(line, err=True),
                                command=["chaos", *sys.argv[1:]])
    except mu.MutantsError as exc:
        _fail_usage(exc.messages)
    except KeyboardInterrupt:  # between campaigns (a campaign itself returns its partial result)
        click.echo("interrupted", err=True)
        raise SystemExit(130) from None
    console = verdict.console()
    console.print(mu.table(result))
    for line in mu.verdict_lines(result):
        console.print(line)
    if result.interrupted:
        raise SystemExit(130)
    raise SystemExit(0 if result.ok else 1)


# ---- conformance of other implementations against crash-prefix corpora (chaos.conformance, chaos.corpus) -------


class _OneLineUsage(click.Command):
    """A command whose usage errors are one line on stderr and exit 2, not click's usage block."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, args)
        except click.UsageError as exc:
            names, c = [], ctx
            while c.parent is not None:  # "chaos corpus build", whatever the program was called as
                names.append(c.info_name)
                c = c.parent
            click.echo(f"chaos {' '.join(reversed(names))}: {exc.format_message()}", err=True)
            ctx.exit(2)


def _progress_printer(what: str):
    """A progress callback printing a line to stderr about every 10% (and at the end)."""
    state = {"next": 0.0}

    def show(done: int, total: int, failures: int) -> None:
        if done >= state["next"] or done == total:
            state["next"] = done + max(1, total // 10)
            click.echo(f"{what}: {done}/{total} prefixes, {failures} failure(s)", err=True)

    return show


@main.command("conformance", cls=_OneLineUsage)
@click.option("--impl", "impl_command", metavar="CMD",
              help='the implementation\'s command prefix, e.g. "python3 -m agent" (it gets `reduce FILE` and '
                   "`plan FILE CURRENT.json`)")
@click.option("--corpus", "corpora", multiple=True, type=click.Path(path_type=str), metavar="DIR",
              help="a built corpus (directory or .zip) or ../shared/session-contract (or its fixtures/, "
                   "planner-fixtures/); repeatable [default: the shipped corpus of the default campaign]")
@click.option("--json", "json_path", type=click.Path(path_type=str), metavar="FILE",
              help="write the full report as JSON (- for stdout; the table then goes to stderr)")
@click.option("--timeout", type=SECONDS, default=30.0, show_default=True,
              help="seconds allowed per implementation command")
@click.option("-j", "--jobs", type=WORKERS, default=0, help="parallel checks; 0: one per CPU [default: 0]")
@click.option("--no-closed-loop", is_flag=True, help="skip closed-loop convergence")
@click.option("--no-reduce", is_flag=True, help="skip the reduce checks (a planner-only implementation)")
@click.option("--rule", "rules", multiple=True, metavar="RULE",
              help="only plan checks of this SPEC §14.4 rule or its sub-rules (P7.1 = P7.1.*); repeatable")
@click.option("--sample", type=click.IntRange(min=1), metavar="N",
              help="at most N plan checks per (rule, scenario): a quick run that still reaches every rule")
@click.option("--bound", type=click.IntRange(min=1), default=64, show_default=True,
              help="closed loop: plans allowed before it must be idle or blocked")
@click.option("--fail-fast", is_flag=True, help="stop starting checks after the first failure")
def conformance_command(impl_command, corpora, json_path, timeout, jobs, no_closed_loop, no_reduce, rules, sample,
                        bound, fail_fast) -> None:
    """Check an implementation's `reduce` and `plan` against crash-prefix corpora, with closed-loop convergence.

    Exit 0 when every check agreed, 1 when one did not, 2 on usage errors (docs/conformance.md).
    """
    import json
    import shlex
    import sys

    from chaos import conformance as cf
    from chaos import verdict
    from chaos.campaign import PLANNER_RULES
    from chaos.corpus import CorpusError, default_corpus, load_corpus

    if not impl_command or not impl_command.strip():
        _fail_usage(["chaos conformance: --impl CMD is required (e.g. --impl \"python3 -m agent\")"])
    try:
        argv = shlex.split(impl_command)
    except ValueError as exc:
        _fail_usage([f"chaos conformance: --impl: {exc}"])
    unknown = [r for r in rules if not any(p == r or p.startswith(r + ".") for p in PLANNER_RULES)]
    if unknown:
        _fail_usage([f"chaos conformance: --rule {unknown[0]}: not a SPEC §14.4 rule (P0, P1.2, P7.1, …)"])
    try:
        impl = cf.Implementation(argv, timeout=timeout)
        loaded = [load_corpus(p) for p in (corpora or [str(default_corpus())])]
    except (cf.ConformanceError, CorpusError) as exc:
        _fail_usage([f"chaos conformance: {exc}"])
    if rules or sample:
        loaded = [c.select(rules, sample) for c in loaded]
    options = cf.Options(timeout=timeout, jobs=jobs, reduce=not no_reduce, closed_loop=not no_closed_loop,
                         bound=bound, fail_fast=fail_fast)
    try:
        report = cf.run_conformance(impl, loaded, options, progress=_progress_printer("conformance"))
    except cf.ConformanceError as exc:  # the command answers nothing at all (its preflight)
        _fail_usage([f"chaos conformance: {exc}"])
    cf.render(report, verdict.console(stderr=json_path == "-"))
    if json_path:
        text = json.dumps(report.to_json(), indent=1, ensure_ascii=False) + "\n"
        if json_path == "-":
            sys.stdout.write(text)
        else:
            try:
                with open(json_path, "w", encoding="utf-8") as handle:
                    handle.write(text)
            except OSError as exc:
                click.echo(f"chaos conformance: --json {json_path}: {exc.strerror or exc}", err=True)
                raise SystemExit(2) from None
    raise SystemExit(0 if report.ok else 1)


@main.group("corpus")
def corpus_group() -> None:
    """Crash-prefix corpora for `chaos conformance`: build one from a campaign, show one."""


@corpus_group.command("build", cls=_OneLineUsage)
@click.argument("scenarios", nargs=-1, type=click.Path(path_type=str))
@click.option("--out", required=True, type=click.Path(path_type=str), metavar="DIR",
              help="a new or empty directory, or a path ending in .zip (packed)")
@click.option("-j", "--workers", type=WORKERS, default=0, help="parallel workers; 0: one per CPU [default: 0]")
def corpus_build(scenarios: tuple[str, ...], out: str, workers: int) -> None:
    """Run a campaign (default: the default campaign) that keeps the log at every kill, with reference outputs.

    Exit 0 when the corpus reaches every planner rule the campaign reached, 1 when it does not, 2 on usage errors.
    """
    from chaos.campaign import PLANNER_RULES, CampaignError, Reporter
    from chaos.corpus import CorpusError, build_corpus

    try:
        index, result = build_corpus(list(scenarios), out, workers,
                                     reporter=Reporter(lambda line: click.echo(line, err=True)))
    except (CampaignError, CorpusError) as exc:
        _fail_usage([f"chaos corpus build: {line}" for line in getattr(exc, "messages", [str(exc)])])
    reached = [r for r in PLANNER_RULES if r in index["rules"]]
    campaign_rules = set(result.coverage.get("rules", {})) & set(PLANNER_RULES)
    lost = sorted(campaign_rules - set(reached), key=PLANNER_RULES.index)
    cases = result.cases
    click.echo(f"corpus {out}: {len(index['prefixes'])} prefixes, {len(index['checks'])} plan checks, "
               f"{len(reached)}/{len(PLANNER_RULES)} planner rules "
               f"(the campaign reached {len(campaign_rules)}); {cases.get('done', 0)} cases, "
               f"{cases.get('fail', 0)} failed")
    missing = [r for r in PLANNER_RULES if r not in reached]
    if missing:
        click.echo(f"  rules not reached: {', '.join(missing)}")
    if lost:
        click.echo(f"  the corpus lost rules the campaign reached: {', '.join(lost)}", err=True)
    raise SystemExit(1 if lost else 0)


@corpus_group.command("info", cls=_OneLineUsage)
@click.argument("path", required=False, type=click.Path(path_type=str))
def corpus_info(path: str | None) -> None:
    """Show a corpus (default: the shipped one): prefixes, plan checks, planner rules reached and checks per rule."""
    from chaos.campaign import PLANNER_RULES
    from chaos.corpus import CorpusError, default_corpus, load_corpus

    try:
        corpus = load_corpus(path or default_corpus())
    except CorpusError as exc:
        _fail_usage([f"chaos corpus info: {exc}"])
    counts: dict[str, int] = {}
    for check in corpus.checks:
        counts[check.rule] = counts.get(check.rule, 0) + 1
    reached = [r for r in PLANNER_RULES if r in counts]
    click.echo(f"{corpus.name} ({corpus.kind}, {corpus.path}): {len(corpus.prefixes)} prefixes, "
               f"{len(corpus.checks)} plan checks, {len(reached)}/{len(PLANNER_RULES)} planner rules")
    click.echo("  " + ", ".join(f"{r}×{counts[r]}" for r in reached))
    missing = [r for r in PLANNER_RULES if r not in counts]
    if missing:
        click.echo(f"  rules not reached: {', '.join(missing)}")


# ---- python targets' interpreter environments (chaos.environments) -----------------------------------------------


@main.group("targets")
def targets_group() -> None:
    """Interpreter environments of python targets (scenarios/frameworks/)."""


@targets_group.command("prepare")
@click.argument("paths", nargs=-1, type=click.Path(path_type=str))
def targets_prepare(paths: tuple[str, ...]) -> None:
    """Build (or reuse) the environment of every python target under PATHS (default: the bundled
    scenarios/frameworks/): one virtual environment per pinned requirements list, cached; exit 1 when one failed."""
    from chaos.campaign import bundled_scenarios
    from chaos.environments import PrepareError, env_dir, prepare
    from chaos.scenario import load_scenarios
    from chaos.target import is_probe

    scenarios, problems = load_scenarios(list(paths) or [bundled_scenarios() / "frameworks"])
    if problems:
        _fail_usage(problems)
    wanted: dict[tuple[str, ...], list[str]] = {}
    for sc in scenarios:
        if is_probe(sc) and sc.the_target.probe.requirements:
            wanted.setdefault(tuple(sorted(sc.the_target.probe.requirements)), []).append(sc.name)
    if not wanted:
        click.echo("no python target with requirements under " + (", ".join(paths) or "scenarios/frameworks/"))
        return
    failed = 0
    for i, (reqs, names) in enumerate(sorted(wanted.items()), 1):
        click.echo(f"[{i}/{len(wanted)}] {', '.join(names)}: {' '.join(reqs)}")
        try:
            prepare(reqs, log=click.echo)
        except PrepareError as exc:
            failed += 1
            click.echo(f"  FAILED {env_dir(reqs)}: {exc}", err=True)
    raise SystemExit(1 if failed else 0)


if __name__ == "__main__":
    main()
