"""A foreign recovery planner: ``AGENT_PLANNER_CMD`` decides the agent's recovery plans instead of ``plan_recovery``.

What it is for. The bundled executor, store and oracle can then judge *another* implementation's planner (or the
bundled one in another process, with other switches): for each decision in scope the agent runs

    CMD plan LOG CURRENT.json

(``CMD`` split with ``shlex.split``; LOG the session file — the store has already repaired a torn tail on open;
CURRENT.json the CurrentConfiguration this process runs with, SPEC §8.7, in a private temporary file removed
afterwards) and reads the plan from stdout in exactly the shape ``python -m agent plan`` prints (SPEC §14.2). So
``AGENT_PLANNER_CMD="python3 -m agent"`` is the bundled planner out of process, and reaches the same end.

Settings (read once per process, ``PlannerCommand.from_environ``; a bad value is a usage error, exit 2):

- ``AGENT_PLANNER_SCOPE`` — ``recovery`` (default): only the recovery decision, i.e. the plans the process makes
  before it has committed anything itself, exactly where the planner-level ``AGENT_BUGS`` switches apply; ``all``:
  every plan. For the decisions in scope the command wins over the in-process planner and its switches.
- ``AGENT_PLANNER_TIMEOUT`` — seconds per invocation (default 30).
- ``AGENT_PLANNER_DIR`` — the directory the command runs in (default: the agent's own working directory), so that
  the command means what it meant where it was written: ``node planner.js`` or ``python3 -m mypkg.planner`` typed in
  a project's directory, while the agent runs in a case's workspace (the harness sets it to the directory the chaos
  command ran in, or the target file's). LOG is passed as an absolute path either way.

Invariants it protects:

- **Fail closed, nothing written.** A command that cannot start, exits non-zero, outlives its timeout or prints
  anything but one well-formed plan (``agent.session.plan_shape``) stops the agent with exit 8
  (``PlannerCommandError``): one stderr line saying what happened, then the last lines of the command's stderr.
  Nothing is committed for that decision. A well-formed but *wrong* plan is executed as usual; the materializer or
  the store refuses it (exit 70).
- **Bounded.** The command runs in its own session (process group); at the timeout, or when SIGINT/SIGTERM reaches
  the agent (``cancel``, called from the agent's interrupt flag), the whole group is killed.
- **No harness access.** The command inherits the agent's environment minus ``CHAOS_CONTROL``, so a foreign planner
  never talks to the supervisor's checkpoint channel.
- **No cost without the variable.** ``from_environ`` returns None when ``AGENT_PLANNER_CMD`` is unset or empty;
  ``subprocess``, ``shlex`` and ``tempfile`` are imported only when it is set.

What it does not do: execute plans, or judge them against the state (the executor, materializer and store do).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from agent.errors import AgentError
from agent.exits import EXIT_INTERRUPTED, EXIT_PLANNER_CMD, EXIT_USAGE

CMD_VAR = "AGENT_PLANNER_CMD"
DIR_VAR = "AGENT_PLANNER_DIR"
SCOPE_VAR = "AGENT_PLANNER_SCOPE"
TIMEOUT_VAR = "AGENT_PLANNER_TIMEOUT"
SCOPES = ("recovery", "all")
DEFAULT_TIMEOUT = 30.0
STDERR_TAIL = 20  # lines of the command's stderr repeated on the agent's stderr when it failed
_MAX_LINE = 500  # characters kept of one such line
_CURRENT_MEMBERS = ("configurationDigest", "environmentIdentity", "tools")  # SPEC §8.7, a closed shape


class PlannerSettingError(AgentError):
    """``AGENT_PLANNER_CMD`` / ``_SCOPE`` / ``_TIMEOUT`` / ``_DIR`` cannot be used as given: a usage error (exit 2)."""

    exit_code = EXIT_USAGE


class PlannerCommandError(AgentError):
    """The planner command failed, timed out or printed no plan (exit 8); ``details`` is its stderr tail."""

    exit_code = EXIT_PLANNER_CMD

    def __init__(self, message: str, stderr: bytes = b""):
        lines = stderr.decode("utf-8", "replace").splitlines()[-STDERR_TAIL:]
        self.details = tuple("planner-cmd stderr: " + _clip(line) for line in lines)
        more = "; its stderr ends:" if self.details else "; it wrote nothing on stderr"
        super().__init__(message + more)


class PlannerCommandCancelled(AgentError):
    """SIGINT/SIGTERM arrived while the command ran: it was killed, nothing was decided (the loop aborts)."""

    exit_code = EXIT_INTERRUPTED


class PlannerCommand:
    """The configured command; ``plan`` runs it once, ``in_scope`` says whether it decides a given plan."""

    def __init__(self, argv: list[str], *, scope: str = "recovery", timeout: float = DEFAULT_TIMEOUT,
                 environ: Mapping[str, str] | None = None, directory: str | None = None):
        from agent.checkpoints import ENV_VAR as CHANNEL_VAR

        self.argv = list(argv)
        self.directory = directory  # None: the agent's working directory
        self.scope = scope
        self.timeout = timeout
        self.environ = {k: v for k, v in (os.environ if environ is None else environ).items() if k != CHANNEL_VAR}
        self.invocations = 0
        self._proc = None  # the running command (cancel kills its process group)
        self._cancelled = False

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> PlannerCommand | None:
        """The command of ``environ[AGENT_PLANNER_CMD]``, or None when it is unset or empty."""
        text = environ.get(CMD_VAR)
        if not text:
            return None
        import shlex

        try:
            argv = shlex.split(text)
        except ValueError as exc:
            raise PlannerSettingError(f"{CMD_VAR}: cannot split {text!r}: {exc}") from None
        if not argv:
            raise PlannerSettingError(f"{CMD_VAR}: no command in {text!r}")
        scope = environ.get(SCOPE_VAR) or "recovery"
        if scope not in SCOPES:
            raise PlannerSettingError(f"{SCOPE_VAR}: must be recovery or all, not {scope!r}")
        raw = environ.get(TIMEOUT_VAR)
        timeout = DEFAULT_TIMEOUT
        if raw:
            try:
                timeout = float(raw)
            except ValueError:
                timeout = -1.0
            if not 0 < timeout < float("inf"):
                raise PlannerSettingError(f"{TIMEOUT_VAR}: must be a positive number of seconds, not {raw!r}")
        directory = environ.get(DIR_VAR) or None
        if directory is not None:
            if not os.path.isdir(directory):
                raise PlannerSettingError(f"{DIR_VAR}: not a directory: {directory!r}")
            directory = os.path.abspath(directory)
        return cls(argv, scope=scope, timeout=timeout, environ=environ, directory=directory)

    def describe(self) -> str:
        """``CMD (scope S, timeout T s[, in DIR])``, for the agent's stderr."""
        import shlex

        where = f", in {self.directory}" if self.directory else ""
        return f"{shlex.join(self.argv)} (scope {self.scope}, timeout {self.timeout:g} s{where})"

    def in_scope(self, recovering: bool) -> bool:
        """Whether the command decides a plan; ``recovering``: the process has committed nothing itself yet."""
        return recovering or self.scope == "all"

    # ------------------------------------------------------------------------------------------------ running

    def plan(self, log_path: str, current: Mapping) -> dict:
        """Run ``CMD plan LOG CURRENT.json`` once; the plan it printed, or PlannerCommandError (exit 8)."""
        import tempfile

        fd, current_path = tempfile.mkstemp(prefix="agent-current-", suffix=".json")  # mode 0600
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                import json

                json.dump({k: current[k] for k in _CURRENT_MEMBERS}, handle, separators=(",", ":"))
            # Absolute: the command may run in another directory (AGENT_PLANNER_DIR) than the agent's.
            out, err, status = self._run([*self.argv, "plan", os.path.abspath(log_path), current_path])
        finally:
            try:
                os.unlink(current_path)
            except OSError:
                pass
        if status != 0:
            how = f"was killed by signal {-status}" if status < 0 else f"exited {status}"
            raise PlannerCommandError(f"planner command {how}: {self._name()}", err)
        return self._parse(out, err)

    def cancel(self) -> None:
        """Kill the running command's process group (the agent's SIGINT/SIGTERM); safe in a signal handler."""
        proc = self._proc
        if proc is not None and proc.returncode is None:
            self._cancelled = True
            _kill_group(proc.pid)

    def _run(self, argv: list[str]) -> tuple[bytes, bytes, int]:
        import subprocess

        self.invocations += 1
        self._cancelled = False
        try:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    env=self.environ, cwd=self.directory, start_new_session=True)
        except OSError as exc:
            raise PlannerCommandError(f"planner command cannot be started: {self._name()}: "
                                      f"{exc.strerror or exc}") from None
        self._proc = proc
        try:
            try:
                out, err = proc.communicate(timeout=self.timeout)
            except subprocess.TimeoutExpired:
                _kill_group(proc.pid)
                out, err = _drain(proc)
                if not self._cancelled:
                    raise PlannerCommandError(f"planner command timed out after {self.timeout:g} s (its process "
                                              f"group was killed): {self._name()}", err) from None
        finally:
            self._proc = None
        if self._cancelled:
            raise PlannerCommandCancelled("interrupted while the planner command ran; nothing was decided")
        return out, err, proc.returncode

    def _parse(self, out: bytes, err: bytes) -> dict:
        import json

        from agent.session.plan_shape import plan_problem

        def pairs(items):
            seen = {}
            for key, value in items:
                if key in seen:
                    raise ValueError(f"duplicate member {key!r}")
                seen[key] = value
            return seen

        def constant(name):
            raise ValueError(f"{name} is not JSON")

        head = out[:80].decode("utf-8", "replace")
        try:
            value = json.loads(out.decode("utf-8"), object_pairs_hook=pairs, parse_constant=constant)
        except (UnicodeDecodeError, ValueError, RecursionError) as exc:
            what = "nothing" if not out.strip() else f"no JSON document ({exc}; stdout starts {head!r})"
            raise PlannerCommandError(f"planner command printed {what}: {self._name()}", err) from None
        problem = plan_problem(value)
        if problem is not None:
            raise PlannerCommandError(f"planner command printed no plan: {problem}: {self._name()}", err)
        return value

    def _name(self) -> str:
        import shlex

        return shlex.join(self.argv)


def _kill_group(pgid: int) -> None:
    import signal

    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):  # the group is already gone
        pass


def _drain(proc) -> tuple[bytes, bytes]:
    """What the killed command wrote; gives up (and closes the pipes) if a process that left its group holds them."""
    import subprocess

    try:
        return proc.communicate(timeout=5)
    except subprocess.TimeoutExpired:
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()
        proc.wait()
        return b"", b""


def _clip(line: str) -> str:
    return line if len(line) <= _MAX_LINE else line[:_MAX_LINE] + "…"
