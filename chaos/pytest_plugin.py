"""pytest plugin (entry point ``pytest11`` ``killpoint``): scenario files as test items, for CI.

What it is for. A CI pipeline already runs pytest; with this plugin ``pytest scenarios/regressions`` (or
``pytest --killpoint-scenarios scenarios``) runs killpoint cases as ordinary test items, with pytest's selection
(``-k``, node ids), parallelism (``-n auto``, ``--tx 2*popen``, ``--tx ssh=…`` across hosts: pytest-xdist) and reports
(``--junitxml``). One item per scenario × kill point of the exhaustive depth-1 policy plus its pinned schedules; a
regression scenario (in a ``regressions/`` directory, or tagged ``regression``) contributes only its pinned
schedules. The case ids and schedules are exactly those of ``chaos campaign`` (``chaos.schedules``), and a failure
is shown as the invariant that failed and its evidence, with the ``chaos run`` command that reproduces it — never a
harness traceback.

Invariants it protects:

- **Opt-in.** Scenario files are collected only when the user asks: a ``.toml`` file named on the command line, a
  directory argument inside a scenario root (ini ``killpoint_scenario_dirs``, default ``scenarios``), or
  ``--killpoint-scenarios DIR``. The project's own ``pytest -n auto`` (testpaths = tests), ``pytest tests`` or even
  ``pytest .`` never turns into a campaign, and ``.toml`` files elsewhere (test fixtures) are never touched.
- **Same items on every xdist worker.** Kill points come from running the crash-free baseline, so each worker would
  otherwise compute its own list. They are computed once per (scenario file digest, target) and cached on
  disk in the campaign's own cache (``chaos.cache.BaselineCache``; default ``<rootdir>/reports/.cache``), so a
  campaign and a pytest run on one machine share their baselines: a
  per-scenario ``flock`` makes one process compute while the others wait, and the file is published
  first-writer-wins. Every worker then builds its items from the same bytes, so xdist's collection check agrees.
- **Light at load time.** pytest imports this module in every run of the environment. It imports nothing but pytest
  and the standard library; pydantic, the supervisor and the oracle are imported when a scenario file is collected.

- **One name per case.** A case's JUnit ``classname``/``name`` are ``chaos campaign``'s (``killpoint.<scenario>``, the
  schedule), its ``reproduce:`` line is relative to the directory pytest was started from, and
  ``--killpoint-case-dir`` puts kept case directories where CI collects artifacts. A failing baseline item shows why
  (tool error results and the agent's stderr tail, ``chaos.transcript.baseline_why``).

What it does not do: it does not shrink failures or write repro bundles (``chaos campaign`` does), and it runs
depth 1 only (depth 2, torn writes and random schedules are the campaign's nightly job).
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Sequence
from pathlib import Path

import pytest

# The exhaustive policy: every kill point of the baseline at before-write and after-sync, plus pinned schedules.
# "pinned": pinned schedules only (the fast CI subset; regression files are always pinned-only).
MODES = ("exhaustive", "pinned")
_STATE = pytest.StashKey["_KillpointState"]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("killpoint", "killpoint crash-injection scenarios (chaos harness)")
    group.addoption("--killpoint-scenarios", action="append", default=[], metavar="DIR",
                    help="collect the scenario files (**/*.toml) under DIR as killpoint cases (repeatable)")
    group.addoption("--killpoint-mode", choices=MODES, default="exhaustive",
                    help="exhaustive: every kill point of the crash-free baseline + pinned schedules (default); "
                         "pinned: pinned schedules only")
    group.addoption("--killpoint-target", default=None, metavar="TARGET.toml",
                    help="the system under test (docs/targets.md; default: the bundled agent)")
    group.addoption("--killpoint-agent-bugs", default="", metavar="NAMES",
                    help="known-bug switches of the target for the cases (the baseline always runs the correct one)")
    group.addoption("--killpoint-planner-cmd", default=None, metavar="CMD",
                    help="a foreign recovery planner the agent consults (`CMD plan LOG CURRENT.json`, in "
                         "--killpoint-planner-dir); asked for one plan before any item runs")
    group.addoption("--killpoint-planner-timeout", default=None, metavar="SECONDS",
                    help="seconds the agent gives the planner command per decision, recorded with the target "
                         "(default: the target file's AGENT_PLANNER_TIMEOUT, else this environment's, else 30)")
    group.addoption("--killpoint-planner-dir", default=None, metavar="DIR",
                    help="where the planner command runs (default: where pytest was started for "
                         "--killpoint-planner-cmd, the target file's directory for its planner_command)")
    group.addoption("--killpoint-planner-scope", choices=("recovery", "all"), default=None,
                    help="which plans --killpoint-planner-cmd decides (default: recovery)")
    group.addoption("--killpoint-launcher", choices=("zygote", "exec"), default=None,
                    help="how agent processes start (default: zygote where the target allows it)")
    group.addoption("--killpoint-cache", default=None, metavar="DIR",
                    help="kill-point cache shared with `chaos campaign` (default: <rootdir>/reports/.cache)")
    group.addoption("--killpoint-keep", choices=("failing", "all", "none"), default="failing",
                    help="which case directories to keep under pytest's temporary directory (default: failing)")
    group.addoption("--killpoint-case-timeout", type=float, default=120.0, metavar="SECONDS",
                    help="wall-clock limit per case (the supervisor's watchdog; default 120)")
    group.addoption("--killpoint-case-dir", default=None, metavar="DIR",
                    help="put the kept case directories under DIR (e.g. a CI artifact directory) instead of "
                         "pytest's temporary directory")
    parser.addini("killpoint_scenario_dirs", type="paths", default=["scenarios"],
                  help="directories whose scenario files pytest collects when a path inside them is given")


class _KillpointState:
    """Per-process plugin state: the scenario roots, and (once a scenario is collected) the harness context."""

    def __init__(self, config: pytest.Config):
        self.config = config
        rootdir = Path(str(config.rootpath))
        # An ini value is resolved by pytest against the ini file; the default ("scenarios") is the rootdir's, also
        # when pytest is started from a subdirectory.
        roots = [rootdir / p for p in config.getini("killpoint_scenario_dirs")]
        self.explicit = [Path(p).resolve() for p in config.getoption("killpoint_scenarios")]
        self.roots = [p.resolve() for p in roots] + self.explicit
        cache = config.getoption("killpoint_cache")
        self.cache = Path(cache).resolve() if cache else rootdir / "reports" / ".cache"
        self.bugs = tuple(b.strip() for b in config.getoption("killpoint_agent_bugs").split(",") if b.strip())
        self.target_file = config.getoption("killpoint_target")
        self.planner_cmd = config.getoption("killpoint_planner_cmd")
        self.planner_scope = config.getoption("killpoint_planner_scope")
        self.planner_timeout = config.getoption("killpoint_planner_timeout")
        planner_dir = config.getoption("killpoint_planner_dir")
        # Relative to where pytest was started, like every other path on its command line; so is a command given
        # there (an xdist worker may run elsewhere).
        self.planner_dir = str((Path(config.invocation_params.dir) / planner_dir).resolve()) if planner_dir else (
            str(config.invocation_params.dir) if self.planner_cmd else None)
        self.launcher = config.getoption("killpoint_launcher")
        self.target = None  # chaos.target.Target, resolved on first use (it imports the harness)
        self.mode = config.getoption("killpoint_mode")
        self.keep = config.getoption("killpoint_keep")
        self.case_seconds = config.getoption("killpoint_case_timeout")
        case_dir = config.getoption("killpoint_case_dir")
        # Relative to where pytest was started, like every other path on its command line.
        self.case_dir = (Path(config.invocation_params.dir) / case_dir).resolve() if case_dir else None
        self.asked = self._asked_paths(config)
        self._context = None

    def _asked_paths(self, config: pytest.Config) -> list[Path]:
        """The command-line paths that ask for scenarios: inside a scenario root, or given with the option."""
        asked = list(self.explicit)
        if config.args_source == pytest.Config.ArgsSource.ARGS:
            for arg in config.args:
                path = Path(str(arg).split("::", 1)[0]).resolve()
                if path.suffix == ".toml" or any(_inside(path, root) for root in self.roots):
                    asked.append(path)
        return asked

    def wants(self, path: Path) -> bool:
        """Whether ``path`` (a ``.toml`` file met during collection) is a scenario the user asked for."""
        path = path.resolve()
        return any(path == a or _inside(path, a) for a in self.asked)

    def resolve_target(self):
        """The target of this run (``chaos.target.resolve_target``: file, switches, foreign planner)."""
        if self.target is None:
            from chaos.target import TargetError, resolve_target

            try:
                try:
                    timeout = float(self.planner_timeout) if self.planner_timeout else None
                except ValueError:
                    raise TargetError(f"--killpoint-planner-timeout {self.planner_timeout!r}: must be a number of "
                                      "seconds") from None
                # As `chaos` reads it: the option, else the target file's, else the agent's variable here.
                self.target = resolve_target(self.target_file, bugs=self.bugs, planner_command=self.planner_cmd,
                                             planner_scope=self.planner_scope, launcher=self.launcher,
                                             planner_dir=self.planner_dir, planner_timeout=timeout,
                                             environ=os.environ)
            except TargetError as exc:
                raise pytest.UsageError("--killpoint-target/--killpoint-agent-bugs: " + "; ".join(exc.messages)) \
                    from None
            # A command that cannot plan would fail every item alike. Asked once, where the run is decided (not in
            # each xdist worker: the controller asked already), and not when nothing will run.
            if not hasattr(self.config, "workerinput") and not self.config.option.collectonly:
                from chaos.preflight import planner_problem

                problem = planner_problem(self.target)
                if problem is not None:
                    self.target = None
                    flag = "--killpoint-planner-cmd" if self.planner_cmd else "--killpoint-target"
                    raise pytest.UsageError(f"{flag}: {problem}")
        return self.target

    def context(self):
        """The harness context of this process (``chaos.workers.Context``), created on first use."""
        if self._context is None:
            from chaos.workers import Context, WorkerConfig

            if self.case_dir is not None:
                # Every xdist worker shares DIR: case directories are named by case id, and a taken name gets a
                # numbered sibling (chaos.case), so workers and repeated runs never overwrite each other's.
                work = self.case_dir
                work.mkdir(parents=True, exist_ok=True)
            else:
                factory = self.config._tmp_path_factory  # noqa: SLF001 - pytest's own basetemp, per xdist worker
                work = factory.mktemp("killpoint", numbered=True)
            config = WorkerConfig(scenarios={}, target=self.resolve_target(), cache=str(self.cache),
                                  cache_keys={}, work=str(work),
                                  limits={"case_seconds": self.case_seconds}, shrink=False, keep=self.keep)
            self._context = Context(config)
        return self._context


def _inside(path: Path, root: Path) -> bool:
    try:
        path.relative_to(root)
    except ValueError:
        return False
    return True


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "killpoint: a killpoint crash case collected from a scenario file")
    state = _KillpointState(config)
    config.stash[_STATE] = state
    config.pluginmanager.register(_JunitNames(config), "killpoint-junit-names")
    if (state.bugs or state.target_file or state.planner_cmd or state.planner_dir or state.planner_scope
            or state.planner_timeout):
        # Checked now, not at the first case: a typo must not make every case "pass" with the correct agent.
        state.resolve_target()
    if state.explicit:
        # `pytest --killpoint-scenarios DIR` alone means "run the scenarios", not "the testpaths and the scenarios".
        if config.args_source != pytest.Config.ArgsSource.ARGS:
            config.args[:] = []
            config.args_source = pytest.Config.ArgsSource.ARGS
        for path in state.explicit:
            # Idempotent: xdist hands the controller's (already extended) args to its workers.
            if str(path) not in config.args:
                config.args.append(str(path))


class _JunitNames:
    """``--junitxml`` names a killpoint item as ``chaos campaign``'s ``junit.xml`` does (``classname`` =
    ``killpoint.<scenario>``, ``name`` = the schedule, ``baseline`` for the baseline), not after the file path, so a
    dashboard tracks one case under one name whichever tool ran it. Runs where the XML is written (the xdist
    controller), from the ``case_id`` property every item carries, before pytest's own junitxml hook."""

    def __init__(self, config: pytest.Config):
        self.config = config

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        from _pytest.junitxml import xml_key

        xml = self.config.stash.get(xml_key, None)
        case_id = dict(report.user_properties).get("case_id")
        if xml is None or not isinstance(case_id, str) or "::" not in case_id:
            return
        scenario, _, schedule = case_id.partition("::")
        classname = f"killpoint.{scenario}" if not xml.prefix else f"{xml.prefix}.killpoint.{scenario}"
        reporter = xml.node_reporter(report)
        # pytest restores attributes set before it records the report over the ones it derives from the node id.
        reporter.add_attribute("classname", classname)
        reporter.add_attribute("name", schedule)


def pytest_collect_file(file_path: Path, parent: pytest.Collector):
    if file_path.suffix != ".toml":
        return None
    state = parent.config.stash.get(_STATE, None)
    if state is None or not state.wants(file_path):
        return None
    return ScenarioFile.from_parent(parent, path=file_path)


# --------------------------------------------------------------------------------------------------------------
# Collection


class ScenarioFile(pytest.File):
    """One scenario file: its kill points (from the cache, computed once) become ``KillpointCase`` items."""

    def collect(self):
        state: _KillpointState = self.config.stash[_STATE]
        from chaos.errors import ScenarioError
        from chaos.scenario import load_scenario

        try:
            scenario = load_scenario(self.path)
        except ScenarioError as exc:
            raise self.CollectError("\n".join(exc.messages)) from None
        from chaos.target import is_probe

        if is_probe(scenario):
            pytest.skip(f"{self.path.name}: a probe scenario (a Python program under chaos.probe) runs with "
                        f"`chaos campaign {self.path}`, not the pytest plugin")
        points, baseline = _kill_points(state, scenario, self.path)
        if points is None:
            from chaos.transcript import baseline_why

            yield BaselineProblem.from_parent(self, name="baseline", scenario=scenario.name,
                                              problems=baseline.get("problems") or ["the baseline did not pass"],
                                              why=baseline_why(baseline.get("case_dirs") or []))
            return
        from chaos.schedules import pinned_cases
        from chaos.schedules.exhaustive import Exhaustive

        regression = "regression" in scenario.tags or "regressions" in self.path.parts
        if regression or state.mode == "pinned":
            specs = list(pinned_cases(points))
        else:
            specs = list(Exhaustive(("kill",), pinned=True).cases([points]))
        for spec in specs:
            yield KillpointCase.from_parent(self, name=spec.id.partition("::")[2], case_id=spec.id,
                                            origin=spec.origin, index=spec.index)


def _kill_points(state: _KillpointState, scenario, path: Path):
    """(ScenarioPoints or None, cached baseline payload) for ``scenario``: from the cache, or computed under a lock."""
    import hashlib

    from chaos.cache import BaselineCache

    digest = hashlib.sha256(path.read_bytes()).hexdigest()[:16]
    # The campaign's cache and key: scenario name, file digest and the *correct* target (kill points never depend on
    # AGENT_BUGS: they come from the crash-free baseline of the correct implementation).
    cache = BaselineCache(state.cache, state.resolve_target())
    stem = cache.stem(scenario.name, digest)
    ctx = state.context()
    ctx.config.scenarios[scenario.name] = str(path)
    ctx.config.cache_keys[scenario.name] = stem
    payload = cache.load(stem)
    if payload is None:
        state.cache.mkdir(parents=True, exist_ok=True)
        with open(state.cache / f".{stem}.lock", "w") as lock:
            # One computing process per scenario; the others (xdist workers, shards) wait and read its result.
            fcntl.flock(lock, fcntl.LOCK_EX)
            payload = cache.load(stem)
            if payload is None:
                from chaos.workers import discover_baseline

                payload = cache.publish(stem, discover_baseline(ctx, scenario.name))
    if not payload.get("ok"):
        return None, payload
    from chaos.schedules import ScenarioPoints, Transaction

    points = ScenarioPoints(scenario.name, tuple(Transaction.from_json(t) for t in payload["transactions"]),
                            tuple(tuple(s.faults) for s in scenario.schedules), tuple(scenario.tags),
                            len(scenario.runs), tuple(len(r.turns) for r in scenario.runs))
    return points, payload


class KillpointFailure(Exception):
    """A case did not pass: ``text`` is the readable verdict (invariants and evidence), not a traceback."""

    def __init__(self, text: str, invariants: list[str]):
        super().__init__(text)
        self.text = text
        self.invariants = invariants


class KillpointCase(pytest.Item):
    """One case: the scenario under one fault schedule, run by the supervisor and judged by the oracle."""

    def __init__(self, *, case_id: str, origin: str, index: int, **kw):
        super().__init__(**kw)
        self.add_marker("killpoint")  # `-m killpoint` / `-m "not killpoint"` select crash cases
        self.case_id = case_id
        self.origin = origin
        self.index = index
        self.user_properties.append(("case_id", case_id))  # on every report: JUnit names (_JunitNames)

    def runtest(self) -> None:
        state: _KillpointState = self.config.stash[_STATE]
        from chaos.schedules import spec_from_id
        from chaos.status import FAIL, NOT_REACHED, PASS
        from chaos.workers import execute

        ctx = state.context()
        spec = spec_from_id(self.case_id, origin=self.origin, index=self.index)
        outcome = execute(ctx, spec)
        if outcome.status == PASS:
            return
        result = outcome.result
        lines = [f"killpoint case {self.case_id} did not pass: {outcome.status} (agent {result.verdict})"]
        target = state.resolve_target()
        if target.label() != "bundled":
            lines[0] += f" with {target.label()}"
        invariants = []
        if result.divergence:
            lines.append(f"  first divergence (kill {result.divergence['kill']}, {result.divergence['fault']}): "
                         f"{result.divergence['signature']}")
        if outcome.status == FAIL:
            for failure in outcome.failures:
                invariants.append(failure["invariant"])
                lines.append(f"  invariant {failure['invariant']} failed:")
                evidence = failure.get("evidence")
                texts = [_finding_text(e) for e in evidence] if isinstance(evidence, list) else [failure["message"]]
                lines += [f"    - {t}" for t in texts[:12]]
                if isinstance(evidence, list) and len(evidence) > 12:
                    lines.append(f"    … {len(evidence) - 12} more (see the case directory)")
        elif outcome.status == NOT_REACHED:
            lines.append(f"  a fault of the schedule was not reached or not applicable: {result.detail}")
        else:
            lines.append(f"  {result.detail}")
        if result.detail and outcome.status == FAIL:
            lines.append(f"  supervisor: {result.detail}")
        if result.case_dir:
            lines.append(f"  case directory: {result.case_dir}")
        for invariant in invariants:
            self.user_properties.append(("invariant", invariant))
        import os
        import shlex

        schedule = "+".join(spec.schedule)
        # Relative to the directory pytest was started from: where the person pastes the line (not the rootdir).
        where = os.path.relpath(self.path, self.config.invocation_params.dir)

        repro = shlex.join(["chaos", "run", str(where), "--kill", schedule, *target.cli_args()])
        lines.append(f"  reproduce: {repro}")
        raise KillpointFailure("\n".join(lines), invariants)

    def repr_failure(self, excinfo, style=None):
        if isinstance(excinfo.value, KillpointFailure):
            return excinfo.value.text
        return super().repr_failure(excinfo, style=style)

    def reportinfo(self):
        return self.path, None, f"killpoint {self.case_id}"


class BaselineProblem(pytest.Item):
    """The crash-free baseline of a scenario did not pass (or did not repeat itself): no kill point can be trusted."""

    def __init__(self, *, scenario: str, problems: list[str], why: Sequence[str] = (), **kw):
        super().__init__(**kw)
        self.add_marker("killpoint")
        self.scenario = scenario
        self.problems = problems
        self.why = list(why)
        self.user_properties.append(("case_id", f"{scenario}::baseline"))

    def runtest(self) -> None:
        lines = [f"the crash-free baseline of {self.scenario} did not pass; no case was collected:"]
        lines += [f"  - {p}" for p in self.problems]
        if self.why:
            lines += ["  why (from the kept baseline run):"] + [f"    {w}" for w in self.why]
        text = "\n".join(lines)
        raise KillpointFailure(text, ["baseline"])

    def repr_failure(self, excinfo, style=None):
        if isinstance(excinfo.value, KillpointFailure):
            return excinfo.value.text
        return super().repr_failure(excinfo, style=style)

    def reportinfo(self):
        return self.path, None, f"killpoint {self.scenario} baseline"


def _finding_text(evidence) -> str:
    """One readable line from a finding's JSON (``chaos.oracle.Finding.to_json``)."""
    if not isinstance(evidence, dict):
        return str(evidence)
    where = [str(evidence[k]) for k in ("where",) if evidence.get(k)]
    for key in ("line", "seq", "call", "request"):
        if evidence.get(key) is not None:
            where.append(f"{key} {evidence[key]}")
    return (", ".join(where) + ": " if where else "") + str(evidence.get("message", ""))
