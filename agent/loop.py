"""The live agent loop: plan, execute, repeat — one machine for live runs and for recovery (SPEC §15).

What it is for. ``run``, ``resume``, ``abort`` and ``compact`` all come down to the same loop over the durable state:
reduce (the store keeps the state current after every commit), ask ``plan_recovery`` for the next plan, execute it
(``agent.recovery.Executor``), repeat until the operation is idle or the plan is ``blocked``. The only live-only
actions are starting a new operation from idle — ``[user entry, runStarted]`` in one transaction (§15.3 step 1), or
``compactionStarted`` (§15.3) — and the content of model answers and tool results. Because the loop literally calls
the planner after every commit, a crash at any commit is followed by exactly the action the uncrashed agent would
have taken (§15.1 "live and recovery are the same machine").

Invariants it protects:

- **Step budget, the one executor policy.** ``--max-steps N`` bounds the model steps of a run. The count comes from
  the durable log (a crash does not reset it) and is checked only where the planner would start a new step (plan
  ``startStep`` attempt 1 of a run, i.e. every call resolved): the loop then writes ``operationFinished(failed,
  step_budget_exhausted)`` instead. This is the single documented exception to "the executor performs planner plans
  and nothing else"; it never lives inside ``plan_recovery``.
- **Abort (§15.5).** SIGINT/SIGTERM handlers only set the ``Interrupt`` flag and cancel in-flight I/O (close the
  HTTP request, SIGKILL the bash tool's process group). Between actions the loop sees the flag, writes
  ``abortRequested`` with the true phase (``tool`` + the pending call, ``compact`` for a compaction, else ``model``)
  and then executes the planner's P1 plans (closeAttempt, appendSynthetic, finish aborted) until idle. Once
  ``abortRequested`` is durable nothing live is written for the operation.
- **Progress.** Every executed plan must commit at least one transaction unless an interrupt cut it short; otherwise
  the loop stops with an internal error rather than spinning (a planner that repeats itself is a defect, §14.5).

- **Who decides.** ``Loop.plan`` asks ``plan_recovery`` — or, when ``AGENT_PLANNER_CMD`` is set and the decision is
  in its scope (``AGENT_PLANNER_SCOPE``: the recovery decision by default, every plan with ``all``), the foreign
  planner command (``agent.planner_cmd``). Such a plan is logged after a ``planner-cmd: decided the next plan`` line
  and executed exactly like the planner's own; the command wins over the planner-level ``AGENT_BUGS`` switches.

What it does not do: choose plans (planner), build facts (materialize), talk HTTP (provider), run tools (tools),
or parse the command line (cli: it imports this module, never the other way round; exit codes are in
``agent.exits``). ``execute_command`` is the glue between the CLI's arguments and these parts.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Mapping
from contextlib import contextmanager
from dataclasses import dataclass

from agent import bugs as bug_switches
from agent import exits
from agent.errors import AgentError
from agent.planner_cmd import PlannerCommand, PlannerCommandCancelled
from agent.recovery import Executor, Interrupt, Model, PlanExecutionError
from agent.session.planner import plan_recovery

STEP_BUDGET_CODE = "step_budget_exhausted"
_ABORT_PLANS = frozenset({"closeAttempt", "appendSynthetic", "finish"})


class ConfigurationError(AgentError):
    """The configuration flags or the workspace are unusable: a usage error (exit 2), nothing written."""

    exit_code = exits.EXIT_USAGE


@dataclass
class Result:
    """How a drive ended: ``status`` idle | blocked | interrupted; the last operation finished in this process."""

    status: str
    reason: str | None = None  # blocked reason
    finished: dict | None = None  # the finish plan executed last (outcome, completion, error…)
    finished_kind: str | None = None  # "run" | "compaction"
    final_text: str | None = None  # content of the final assistant entry of a completed run
    cause: str | None = None  # a run failed for its model step: that step's own error (the live failure), if found
    server: str | None = None  # ... and the model server it came from, when this process made that request


# ------------------------------------------------------------------------------------------------------------------
# Durable-log helpers that need more than the exported state
# ------------------------------------------------------------------------------------------------------------------


def _committed_facts(path, length: int):
    """Every fact of the committed region of a session file, in commit order (the file is valid: the store said so)."""
    with open(path, "rb") as handle:
        data = handle.read(length)
    for number, raw in enumerate(data.split(b"\n")[1:], start=2):
        if not raw:
            continue
        try:
            value = json.loads(raw)
        except ValueError:
            # Only possible if the file changed behind the store (or a writer appended after a torn tail).
            raise PlanExecutionError(f"{path}: line {number} is not what the store committed") from None
        yield from value if isinstance(value, list) else (value,)


class StepCounter:
    """Model steps per run, counted from the durable log: stepAttempt records with attempt 1 (retries do not count).

    Only a run that is unfinished when the session is opened has steps from before this process: they are counted
    by one scan of the committed bytes, made before this process commits anything (so the scan reads exactly what
    the store reduced). Every later step is reported by the executor through ``observe``.
    """

    def __init__(self, store):
        self._counts: dict[str, int] = {}
        operation = store.state["operation"]
        if operation["kind"] == "run":
            for fact in _committed_facts(store.path, store.state["repairedLength"]):
                self._add(self._counts, fact)

    def count(self, operation_id: str) -> int:
        return self._counts.get(operation_id, 0)

    def observe(self, committed: list[dict]) -> None:
        for fact in committed:
            self._add(self._counts, fact)

    @staticmethod
    def _add(counts: dict[str, int], fact: Mapping) -> None:
        record = fact.get("record") if fact.get("kind") == "record" else None
        if record and record.get("type") == "stepAttempt" and record.get("attempt") == 1:
            counts[record["operationId"]] = counts.get(record["operationId"], 0) + 1


def message_entries(store) -> list[tuple[str, dict]]:
    """(fact id, message) of every message entry, in commit order — what compactionStarted partitions (§6.2)."""
    entries = [
        (fact["id"], fact["entry"]["message"])
        for fact in _committed_facts(store.path, store.state["repairedLength"])
        if fact.get("kind") == "entry" and fact["entry"].get("type") == "message"
    ]
    if len(entries) != len(store.state["transcript"]):  # the transcript holds exactly the message entries
        raise PlanExecutionError("session file and in-memory state disagree on the message entries")
    return entries


def abort_phase(operation: Mapping) -> dict:
    """The ``abortRequested`` phase members of §15.5 step 2 for the current ``operation``."""
    if operation["kind"] == "compaction":
        return {"phase": "compact"}
    pending = [t for t in operation.get("toolCalls", ()) if t["status"] == "pending"]
    if pending:
        # A tool is executing, or a started tool is unresolved: its call (the lowest index when several).
        return {"phase": "tool", "toolCallId": min(pending, key=lambda t: t["toolIndex"])["toolCallId"]}
    return {"phase": "model"}


# ------------------------------------------------------------------------------------------------------------------
# The loop
# ------------------------------------------------------------------------------------------------------------------


class Loop:
    """Drives one open session: ``drive`` (plan/execute until idle or blocked), ``start_run``, ``start_compaction``,
    ``abort``. All writes go through ``executor.commit``."""

    def __init__(self, store, executor: Executor, model: Model, *, interrupt: Interrupt, max_steps: int = 20,
                 planner_bugs: frozenset[str] = frozenset(), planner_command: PlannerCommand | None = None,
                 note=None):
        self.store = store
        self.executor = executor
        self.model = model
        self.interrupt = interrupt
        self.max_steps = max_steps
        self.planner_bugs = planner_bugs
        self.planner_command = planner_command
        self.decided_by = "planner"  # who made the last plan: "planner" (in process) or "planner-cmd"
        self.steps = StepCounter(store)
        self.log_plans = False
        self._note = note or (lambda text: None)
        # Operations for which this process committed a stepFailed: their last one is then this process's (its
        # commits follow every earlier process's), so its live error came from this process's model server.
        self._failed_here: set[str] = set()
        executor.observers.append(self.steps.observe)
        executor.observers.append(self._observe_failures)

    def plan(self) -> dict:
        """The next plan for the durable state: from the planner command when one is configured and the decision
        is in its scope, else from ``plan_recovery`` (planner-level bug switches applied to recovery plans)."""
        # Planner-level bug switches model defects of *recovery* code (upstream's planner only ever decided what to
        # do with a state found on disk after a crash; its live loop decided on its own). So a switch applies to the
        # recovery decision of a process: the plans it makes before it has committed anything itself. That is what
        # makes the stale-assistantCalls defect invisible to crash-free runs and found only by a kill between the
        # final answer and its terminal record, as in the field. AGENT_PLANNER_SCOPE=recovery is the same window.
        recovering = self.executor.commits == 0
        command = self.planner_command
        if command is not None and command.in_scope(recovering):
            self.decided_by = "planner-cmd"  # the command wins over the in-process planner and its switches
            return command.plan(os.path.abspath(self.store.path), self.model.current)
        self.decided_by = "planner"
        bugs = self.planner_bugs if recovering else frozenset()
        return plan_recovery(self.store.state, self.model.current, bugs=bugs)

    # -------------------------------------------------------------------------------------------- drive

    def drive(self) -> Result:
        """Plan and execute until idle, blocked, or an interrupt has been reconciled."""
        finished: tuple[dict, str, str | None, str | None] | None = None  # plan, kind, final text, operation id
        while True:
            state = self.store.state
            operation = state["operation"]
            if operation["kind"] == "idle":
                # Checked before the interrupt: a signal that lands after the terminal record changes nothing.
                return self._result("idle", finished)
            if self.interrupt.requested:
                return self._interrupted(finished)
            try:
                plan = self.plan()
            except PlannerCommandCancelled:
                continue  # SIGINT/SIGTERM killed the planner command: the flag is set, reconcile at the top
            if plan["type"] == "blocked":
                return self._result("blocked", finished, reason=plan["reason"])
            plan = self._budget(state, plan)
            self._log(plan)
            final_text = self._final_text(state, plan)
            before = self.executor.commits
            self.executor.execute(plan)
            if plan["type"] == "finish":
                finished = (plan, operation["kind"], final_text, operation["operationId"])
            if self.executor.commits == before and not self.interrupt.requested:
                raise PlanExecutionError(f"plan {plan['type']} appended nothing; refusing to repeat it")

    def abort(self) -> Result:
        """The ``abort`` command (§15.5): abortRequested (unless already durable), then P1 plans until idle."""
        if self.store.state["operation"]["kind"] == "idle":
            return Result("idle")
        finished = self._reconcile_abort()
        return self._result("idle", finished)

    def _interrupted(self, finished) -> Result:
        return self._result("interrupted", self._reconcile_abort())

    def _reconcile_abort(self):
        operation = self.store.state["operation"]
        if not operation["abortRequested"]:  # §15.5 step 1: a crash during an earlier abort skips to step 4
            record = {"type": "abortRequested", "operationId": operation["operationId"],
                      "operationKind": operation["kind"], **abort_phase(operation), "reason": "escape"}
            if self.log_plans:  # not a planner plan: the loop's own §15.5 step 2
                self._note("abort " + json.dumps(abort_phase(operation), separators=(",", ":")))
            self.executor.commit([{"kind": "record", "id": self.store.allocate_id(), "record": record}])
        finished = None
        while self.store.state["operation"]["kind"] != "idle":
            kind = self.store.state["operation"]["kind"]
            plan = self.plan()
            # Under abort P1 yields only these three (§15.5 step 4); anything else would run live work after
            # abortRequested, so it is refused rather than executed.
            if plan["type"] not in _ABORT_PLANS:
                raise PlanExecutionError(f"planner returned {plan['type']} for an aborted operation")
            self._log(plan)
            before = self.executor.commits
            self.executor.execute(plan)
            if self.executor.commits == before:
                raise PlanExecutionError(f"plan {plan['type']} appended nothing during abort")
            if plan["type"] == "finish":
                finished = (plan, kind, None, None)
        return finished

    def _budget(self, state, plan: dict) -> dict:
        # The executor policy of issue [2/7]: checked only where the planner starts a new step of a run.
        if plan["type"] != "startStep" or plan["attempt"] != 1 or plan["stepKind"] != "assistant":
            return plan
        used = self.steps.count(state["operation"]["operationId"])
        if used < self.max_steps:
            return plan
        return {"type": "finish", "outcome": "failed",
                "error": {"code": STEP_BUDGET_CODE,
                          "message": f"the run used its budget of {self.max_steps} model steps"}}

    @staticmethod
    def _final_text(state, plan: dict) -> str | None:
        if plan["type"] == "finish" and plan.get("outcome") == "completed" and "completion" in plan:
            # The final entry is A, the last assistant message (§14.3): its content is the run's answer.
            for message in reversed(state["transcript"]):
                if message["role"] == "assistant":
                    return message.get("content") or ""
        return None

    def _result(self, status: str, finished, reason: str | None = None) -> Result:
        if finished is None:
            return Result(status, reason)
        plan, kind, text, operation_id = finished
        cause = server = None
        if plan.get("outcome") == "failed" and plan["error"].get("code") == "model_error" and operation_id:
            cause = self._step_failure(operation_id)
            # A refused connection or a 404 says little without the address: the server this process asked
            # (--base-url, else OPENAI_BASE_URL, else the default; never the API key or a password in the URL) —
            # only when the last step failure is this process's own: one written before a crash may have come
            # from another server.
            if operation_id in self._failed_here:
                server = getattr(self.executor.provider, "address", None)
        return Result(status, reason, plan, kind, text, cause, server)

    def _observe_failures(self, committed: list[dict]) -> None:
        for fact in committed:
            record = fact.get("record") if fact.get("kind") == "record" else None
            if record and record.get("type") == "stepFailed":
                self._failed_here.add(record.get("operationId"))

    def _step_failure(self, operation_id: str) -> str | None:
        """``code: message`` of the operation's last stepFailed. The §14.4 finish (P3.5) says only "provider request
        failed"; the live error it stands for (connection refused, HTTP 401…) is in the log, perhaps written by an
        earlier process, and is what a person needs. One read of the log, at the end of a failed run only; a log it
        cannot read back (a torn fragment left in place by a known-bug switch, say) gives no detail, never another
        exit status."""
        cause = None
        try:
            for fact in _committed_facts(self.store.path, self.store.offset):
                record = fact.get("record") if fact.get("kind") == "record" else None
                if record and record.get("type") == "stepFailed" and record.get("operationId") == operation_id:
                    cause = f"{record['error'].get('code')}: {record['error'].get('message')}"
        except (PlanExecutionError, OSError):
            return None
        return " ".join(cause.split()) if cause is not None else None  # one line, whatever the message held

    def _log(self, plan: dict) -> None:
        if self.log_plans:
            if self.decided_by == "planner-cmd":
                # Its own line, so the `agent: plan {…}` line keeps its exact shape for the readers that parse it.
                self._note("planner-cmd: decided the next plan")
            self._note("plan " + json.dumps(plan, ensure_ascii=False, separators=(",", ":")))

    # -------------------------------------------------------------------------------------------- new operations

    def start_run(self, prompt: str) -> None:
        """§15.3 step 1: ``[user entry, runStarted]`` as one transaction, from idle only, before anything else."""
        user_id = self.store.allocate_id()
        self.executor.commit([
            {"kind": "entry", "id": user_id,
             "entry": {"type": "message", "message": {"role": "user", "content": prompt}}},
            {"kind": "record", "id": self.store.allocate_id(),
             "record": {"type": "runStarted", "operationId": self.store.allocate_id(), "operationKind": "run",
                        "inputEntryId": user_id}},
        ])

    def start_compaction(self) -> bool:
        """§15.3 compaction from idle: compactionStarted retaining at least the latest user turn; False if nothing
        would be compacted (then no operation is started)."""
        from agent.session.digests import source_digest

        entries = message_entries(self.store)
        last_user = max((i for i, (_, message) in enumerate(entries) if message["role"] == "user"), default=None)
        if last_user is None or last_user == 0:
            return False
        ids = [entry_id for entry_id, _ in entries]
        record = {
            "type": "compactionStarted",
            "operationId": self.store.allocate_id(),
            "operationKind": "compaction",
            "inputThroughEntryId": ids[-1],
            "resultEntryId": self.store.allocate_id(),
            "compactedEntryIds": ids[:last_user],
            # The retained tail starts at a user message, so it is a legal transcript on its own (§5.7 step 11).
            "retainedEntryIds": ids[last_user:],
            "sourceDigest": source_digest([{"sourceEntryId": i, "message": m} for i, m in entries]),
        }
        self.executor.commit([{"kind": "record", "id": self.store.allocate_id(), "record": record}])
        return True


# ------------------------------------------------------------------------------------------------------------------
# Command glue: arguments -> store + configuration + executor -> loop -> exit status
# ------------------------------------------------------------------------------------------------------------------


@contextmanager
def _signal_handlers(interrupt: Interrupt):
    """SIGINT/SIGTERM only set the flag (and cancel in-flight I/O); the loop acts on it between actions."""

    def handler(signum, frame):  # noqa: ARG001 - signal API
        interrupt.request(signum)

    previous = {}
    for number in (signal.SIGINT, signal.SIGTERM):
        try:
            previous[number] = signal.signal(number, handler)
        except ValueError:  # not the main thread (embedding); signals then stay with the host
            pass
    try:
        yield
    finally:
        for number, old in previous.items():
            signal.signal(number, old)


def _note(text: str) -> None:
    sys.stderr.write(f"agent: {text}\n")
    sys.stderr.flush()


def _stdout(text: str) -> None:
    sys.stdout.flush()
    sys.stdout.buffer.write(text.encode("utf-8", "replace") + b"\n")
    sys.stdout.buffer.flush()


def _load_config(args, environ, *, workspace, model_default=None, provider=None):
    from agent import config as agent_config

    try:
        return agent_config.load_config(
            workspace=workspace,
            model=args.model if args.model is not None else model_default,
            base_url=args.base_url,
            provider=provider,
            tools=args.tools,
            replay=args.replay,
            environment_identity=args.environment_identity,
            request_timeout=args.request_timeout,
            max_steps=args.max_steps,
            environ=environ,
        )
    except agent_config.ConfigError as exc:
        raise ConfigurationError(str(exc)) from None


def _open_store(args, environ, bugs: frozenset[str], hook):
    """Open (or create) the session; returns (store, config). Nothing is written here but a new header and the
    repair of a torn tail (SPEC §13.5), and neither before the command line has been checked."""
    from agent.files import check_input_file
    from agent.session.errors import SessionFileError
    from agent.session.store import SessionStore

    if args.command == "run" and args.session_dir is not None:
        if args.workspace is None:
            raise ConfigurationError("run --session-dir needs --workspace DIR")
        if not args.prompt:
            raise ConfigurationError("PROMPT must not be empty")
        config = _load_config(args, environ, workspace=args.workspace)
        try:
            store = SessionStore.create(args.session_dir, cwd=config.workspace, provider=config.provider,
                                        model=config.model, environment_identity=config.environment_identity,
                                        hook=hook)
        except (SessionFileError, OSError) as exc:
            raise ConfigurationError(f"cannot create a session in {args.session_dir}: {exc}") from None
        return store, config

    path = args.session if args.command == "run" else args.file
    if args.command == "run" and not args.prompt:
        raise ConfigurationError("PROMPT must not be empty")
    check_input_file(path)  # missing / directory / not regular: exit 2 before anything is opened
    if os.path.islink(path):
        raise ConfigurationError(f"{path}: is a symbolic link; refusing to follow it")
    configs = []

    def configure(header: dict) -> None:
        # The session's own model and provider are the defaults: `resume FILE` continues the configuration the
        # session was created with unless a flag changes it (a supervisor changes it across a restart on purpose).
        # Checked inside the store's open, before its torn-tail repair (SPEC §13.5): a command refused for its
        # input leaves the file as it found it.
        configs.append(_load_config(args, environ, workspace=args.workspace or header["cwd"],
                                    model_default=header["model"], provider=header["provider"]))

    # no-torn-tail-repair (BUG switch): open without truncating a torn tail, so the next line is appended after it.
    store = SessionStore.open(path, hook=hook, repair="no-torn-tail-repair" not in bugs, check=configure)
    return store, configs[0]


def _exit_status(command: str, result: Result) -> int:
    if result.status == "blocked":
        # §15.2: blocked appends nothing; the reason goes to stdout for the supervisor / user.
        _stdout(json.dumps({"blocked": result.reason}))
        return exits.EXIT_BLOCKED
    if result.status == "interrupted":
        return exits.EXIT_INTERRUPTED
    plan = result.finished
    if plan is None:
        return exits.EXIT_OK
    if plan["outcome"] == "completed":
        if result.final_text is not None:
            _stdout(result.final_text)
        return exits.EXIT_OK
    if plan["outcome"] == "failed":
        error = plan["error"]
        because = f" ({result.cause})" if result.cause else ""
        because += f"; model server {result.server}" if result.server else ""
        _note(f"{result.finished_kind or 'operation'} failed: {error['code']}: {error['message']}{because}")
        return exits.EXIT_FAILED
    # aborted: the goal of `abort`; for any other command the operation was interrupted (now reconciled).
    return exits.EXIT_OK if command == "abort" else exits.EXIT_INTERRUPTED


def execute_command(args, environ: Mapping[str, str]) -> int:
    """``run`` / ``resume`` / ``abort`` / ``compact``: returns the exit status (raises AgentError subclasses)."""
    from agent import config as agent_config
    from agent.checkpoints import CheckpointChannel

    bugs = bug_switches.from_environ(environ)
    planner_command = PlannerCommand.from_environ(environ)  # a bad AGENT_PLANNER_* value: exit 2, nothing opened
    interrupt = Interrupt()
    channel = CheckpointChannel.from_environ(environ)
    with _signal_handlers(interrupt):
        store, config = _open_store(args, environ, bugs, channel.hook if channel else None)
        try:
            if channel is not None:
                # After creating/opening the file (header and repair are not barriers), before the first commit.
                channel.open(pid=os.getpid(), session=os.path.abspath(store.path))
            if args.command == "run":
                _note(f"session {os.path.abspath(store.path)}")
            client = agent_config.make_client(config)
            runner = agent_config.make_runner(config, environ=dict(environ))
            interrupt.on_request(client.cancel)
            interrupt.on_request(runner.abort)
            if planner_command is not None:
                interrupt.on_request(planner_command.cancel)
                _note(f"planner command: {planner_command.describe()}")
            model = Model(
                current=agent_config.current_configuration(config),
                request_body=lambda messages: agent_config.request_body(config, messages),
                model=config.model,
            )
            executor = Executor(store, model, client, runner, interrupt=interrupt, bugs=bugs)
            loop = Loop(store, executor, model, interrupt=interrupt, max_steps=config.max_steps,
                        planner_bugs=bugs & bug_switches.PLANNER_BUGS, planner_command=planner_command,
                        note=_note)
            if channel is not None:
                # The hello's answer, read only now (its round trip overlapped the set-up above): before the first
                # plan, which may run a replayed tool or a planner command, and while the lock is held.
                channel.settle()
            status = _command(args, loop)
            usage = store.state["usage"]
            _note("usage (session totals from the log): " + " ".join(f"{k}={usage[k]}" for k in usage))
            return status
        finally:
            if channel is not None:
                channel.settle()  # before the lock goes (a dresume sibling must not find it free meanwhile)
            store.close()
            if channel is not None:
                channel.close()


def _command(args, loop: Loop) -> int:
    command = args.command
    if command == "abort":
        loop.log_plans = True
        result = loop.abort()
        if result.finished is None:
            _note("nothing to abort: the session is idle")
        return _exit_status(command, result)

    if command == "run" and args.session_dir is not None:
        result = None
    else:
        # resume, compact, run --session: recover to idle first (§15.6), one stderr line per plan.
        loop.log_plans = True
        result = loop.drive()
        loop.log_plans = False
        if command == "resume" or result.status != "idle":
            return _exit_status(command, result)
    if loop.interrupt.requested:
        return _exit_status(command, Result("interrupted"))

    if command == "compact":
        if not loop.start_compaction():
            _note("nothing to compact: the history holds no more than the latest user turn")
            return _exit_status(command, Result("idle"))
    else:
        loop.start_run(_sanitize(args.prompt))
    return _exit_status(command, loop.drive())


def _sanitize(text: str) -> str:
    # §13.3 step 3: argv may carry lone surrogates (undecodable bytes under surrogateescape); facts may not.
    from agent.provider import sanitize_text

    return sanitize_text(text)
