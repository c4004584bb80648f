"""The agent's exit statuses: one table for every command, and the mapping of an expected failure onto it.

What it is for. A supervisor (the chaos harness, CI, a person) learns how a launch ended from its exit status alone,
so the numbers never change meaning. They are defined once here and used by the command line (``agent.cli``), the
loop (``agent.loop``) and the foreign-planner runner (``agent.planner_cmd``); the table is repeated in ``--help``
(``EXIT_CODES``) and in docs/agent.md.

Invariant it protects: every expected failure (an ``AgentError``) maps to one documented status and one stderr line
(``describe_error``); nothing here maps a defect of ours to a status that would hide it (an unknown ``AgentError``
is reported like a rejected transaction, 70).

What it does not do: print anything, or parse arguments. It imports nothing at module level but ``agent.errors``
(``describe_error`` imports the error classes it recognises lazily), so any module may import it cheaply.
"""

from __future__ import annotations

from agent.errors import AgentError

EXIT_OK = 0
EXIT_LOG_ERROR_JSON = 1  # reduce / plan only: the log does not reduce, reported as JSON on stdout
EXIT_USAGE = 2
EXIT_BLOCKED = 3
EXIT_FAILED = 4
EXIT_BAD_LOG = 5
EXIT_LOCKED = 6
EXIT_CHANNEL_LOST = 7
EXIT_PLANNER_CMD = 8  # the foreign planner command (AGENT_PLANNER_CMD) failed, timed out or printed no plan
EXIT_REJECTED = 70  # EX_SOFTWARE: the store rejected a transaction the agent built — a defect of the agent
EXIT_IO = 74  # EX_IOERR: writing the session failed (disk full, fsync error); nothing was acknowledged
EXIT_INTERRUPTED = 130

EXIT_CODES = f"""\
exit codes:
  {EXIT_OK}    completed, idle, or `abort` reconciled the operation
  {EXIT_LOG_ERROR_JSON}    reduce/plan: the log does not reduce ({{"ok":false,"error":…}} on stdout)
  {EXIT_USAGE}    usage error: bad arguments, missing file, a directory, unknown AGENT_BUGS name
  {EXIT_BLOCKED}    blocked: recovery cannot proceed safely (stdout {{"blocked": "<reason>"}})
  {EXIT_FAILED}    the run finished failed (provider error, dead-end answer, step budget)
  {EXIT_BAD_LOG}    the log does not reduce, or its file name does not match its header (code, line, seq)
  {EXIT_LOCKED}    the session is locked by another process
  {EXIT_CHANNEL_LOST}    the checkpoint channel (CHAOS_CONTROL) was lost; nothing more was written
  {EXIT_PLANNER_CMD}    the planner command (AGENT_PLANNER_CMD) failed, timed out or printed no plan
  {EXIT_REJECTED}   the store rejected a transaction the agent built (agent defect; code, line, seq on stderr)
  {EXIT_IO}   writing the session failed (disk full, fsync error); the transaction was not acknowledged
  {EXIT_INTERRUPTED}  interrupted by SIGINT/SIGTERM and reconciled as aborted
"""


def describe_error(exc: AgentError) -> tuple[int, str]:
    """The exit status and the one stderr line for an expected failure of any command."""
    code = getattr(exc, "exit_code", None)
    if isinstance(code, int):
        return code, str(exc)
    from agent.bugs import UnknownBugError
    from agent.session.errors import CorruptionError, SessionFileError, SessionLockedError, StoreError

    if isinstance(exc, UnknownBugError):
        return EXIT_USAGE, str(exc)
    if isinstance(exc, SessionLockedError):
        return EXIT_LOCKED, "session is locked by another process"
    if isinstance(exc, CorruptionError):
        # Raised by SessionStore.open: the committed prefix does not reduce (SPEC §13.5 step 3; file untouched).
        return EXIT_BAD_LOG, f"log does not reduce: {_corruption_text(exc)}"
    if isinstance(exc, SessionFileError):
        # Missing files, directories and links were refused before opening (exit 2); what is left is the
        # SPEC §13.1 file-name/header mismatch (or a race that replaced the file).
        return EXIT_BAD_LOG, str(exc)
    if isinstance(exc, StoreError):
        return EXIT_IO, f"session store: {exc}"
    # Any other AgentError is something the agent itself got wrong: report it like a rejected transaction.
    return EXIT_REJECTED, f"internal error: {type(exc).__name__}: {exc}"


def _corruption_text(exc) -> str:
    where = f"code {exc.code}, line {exc.line}"
    return where + (f", seq {exc.seq}" if exc.seq is not None else "")
