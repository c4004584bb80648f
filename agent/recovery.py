"""The plan executor: carry out one RecoveryPlan against the store, the provider and the tools (SPEC §15.2).

What it is for. The live loop and ``resume`` are the same machine (§15.1): after every commit the loop asks the
planner for the next plan and hands it to ``Executor.execute``. This module turns the plan into durable facts with
``materialize.transactions_for_plan`` / ``outcome_transaction`` and supplies the only two live-only things — the
model's answer and the tool's output — in between the two transactions of ``startStep`` and ``startTool``.

Invariants it protects (each is a crash window the chaos harness kills in):

- **Intent before effect.** ``stepAttempt`` is durable before the HTTP request is sent; ``toolStarted`` is durable
  before the tool runs (§15.3). A kill in between leaves an intent without outcome, which the planner resolves by a
  retry (attempt 2), a replay (safe tools) or an ``interrupted`` result (never tools) — never by a silent repeat.
- **Outcome in one transaction.** assistant entry + model usage; tool result + tool usage; ``stepFailed`` + usage.
- **No live write after an interrupt.** When SIGINT/SIGTERM arrived (``Interrupt.requested``), the executor stops
  after the intent it is committing and discards a cancelled request or a killed tool's output; the loop then writes
  ``abortRequested`` and reconciles through the planner (§15.5).
- **Live errors are final.** A provider failure is committed as ``stepFailed`` with its specific code and is never
  re-sent (§15.4); only a crash-unknown attempt is retried, and only because the planner says so (P3.3).

Known-bug switches implemented here (``agent.bugs``), each behind one flag at the line that does the wrong thing:
``effect-before-intent`` (the tool runs before its ``toolStarted`` is committed) and ``retry-live-failures`` (a
5xx/429 answer is re-sent on the spot).

What it does not do: decide anything. Which plan runs next, and whether the run may start another step (the step
budget), belong to ``agent.loop``; which facts a plan appends belongs to ``agent.session.materialize``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from agent.errors import AgentError
from agent.session.errors import CorruptionError, StoreError
from agent.session.store import fact_name
from agent.session.materialize import (
    MaterializeError,
    assistant_answer,
    compaction_summary,
    outcome_transaction,
    step_failure,
    tool_result,
    transactions_for_plan,
)

# retry-live-failures: how many times the defective executor re-sends a failed request (a typical client default).
_BUGGY_RESENDS = 2
_RETRIABLE_LIVE_ERRORS = frozenset({"server_error", "rate_limited"})


class RejectedTransactionError(AgentError):
    """The store rejected a transaction the agent built: a defect of the agent (exit 70, nothing written)."""

    exit_code = 70

    def __init__(self, error: CorruptionError, facts: list[dict]):
        self.error = error
        names = ",".join(fact_name(f) if isinstance(f, dict) else "?" for f in facts)
        where = f"code {error.code}, line {error.line}" + (f", seq {error.seq}" if error.seq is not None else "")
        super().__init__(f"the store rejected our own transaction [{names}]: {where}")


class SessionWriteError(AgentError):
    """A commit failed in the file system (write or fsync error, poisoned store): nothing was acknowledged."""

    exit_code = 74


class PlanExecutionError(AgentError):
    """A plan could not be turned into facts (materialisation refused it): a defect, exit 70."""

    exit_code = 70


@dataclass
class Interrupt:
    """The SIGINT/SIGTERM flag. Handlers only call ``request`` (flag + cancel in-flight I/O); the loop acts on it."""

    requested: bool = False
    signal_number: int | None = None
    _cancellers: list[Callable[[], None]] = field(default_factory=list)

    def on_request(self, cancel: Callable[[], None]) -> None:
        """Call ``cancel`` when an interrupt is requested (closing the HTTP request, killing the tool's group)."""
        self._cancellers.append(cancel)

    def request(self, signal_number: int | None = None) -> None:
        """Set the flag and cancel in-flight work; async-signal tolerant (no allocation-heavy work, no I/O waits)."""
        if self.requested:
            return
        self.requested = True
        self.signal_number = signal_number
        for cancel in self._cancellers:
            cancel()


@dataclass
class Model:
    """What the executor needs from the agent's model-facing configuration (built by ``agent.config``)."""

    current: dict  # CurrentConfiguration + "snapshot" (SPEC §8.7, materialize's CurrentWithSnapshot)
    request_body: Callable[[list], dict]  # active context -> the exact chat-completions body (SPEC §8.4)
    model: str  # the model name sent in requests (also for summaries)
    summary_options: dict | None = None  # output options of the compaction summary request


class Executor:
    """Executes plans for one open store; ``commits`` counts the transactions it committed (the loop's progress
    check) and ``observers`` see every committed transaction."""

    def __init__(self, store, model: Model, provider, tools, *, interrupt: Interrupt,
                 bugs: frozenset[str] = frozenset()):
        self.store = store
        self.model = model
        self.provider = provider
        self.tools = tools
        self.interrupt = interrupt
        self.bugs = bugs
        self.commits = 0
        # Called with every committed transaction (the loop's step counter listens here).
        self.observers: list[Callable[[list[dict]], None]] = []

    # ------------------------------------------------------------------------------------------------ commits

    def commit(self, facts: list[dict]) -> list[dict]:
        """Commit one transaction; map the store's refusals to the agent's exit-code errors."""
        try:
            committed = self.store.commit(facts)
        except CorruptionError as exc:
            # SPEC §13.3 step 4: nothing was written. The live loop turns every predictable rejection into a proper
            # fact (§15.4), so this is a defect of ours (or a known-bug switch at work).
            raise RejectedTransactionError(exc, facts) from None
        except (OSError, StoreError) as exc:
            raise SessionWriteError(f"writing the session failed: {exc}") from None
        self.commits += 1
        for observe in self.observers:
            observe(committed)
        return committed

    def _transactions(self, plan: Mapping) -> list[list[dict]]:
        try:
            return transactions_for_plan(self._state(), plan, self.model.current, self.store.allocate_id)
        except (MaterializeError, KeyError, IndexError, TypeError) as exc:
            raise PlanExecutionError(f"cannot materialise plan {plan.get('type')}: {exc}") from None

    def _outcome(self, state, plan: Mapping, intent: list[dict] | None, outcome: dict) -> list[dict]:
        try:
            return outcome_transaction(state, plan, intent, outcome, self.store.allocate_id)
        except (MaterializeError, KeyError, IndexError, TypeError) as exc:
            raise PlanExecutionError(f"cannot materialise the outcome of {plan.get('type')}: {exc}") from None

    # ------------------------------------------------------------------------------------------------ plans

    def execute(self, plan: Mapping) -> None:
        """Append the facts of ``plan`` (§15.2). Returns early, with only the intent durable, on an interrupt."""
        kind = plan["type"]
        if kind == "blocked":
            return  # §15.2: blocked appends nothing
        if kind == "startStep":
            self._start_step(plan)
        elif kind == "startTool":
            self._start_tool(plan)
        else:  # finish, closeAttempt, appendSynthetic: one transaction each (or none for the idle no-op)
            for facts in self._transactions(plan):
                self.commit(facts)

    def _state(self):
        """The durable state; for a compaction it carries ``compaction_started`` (the record whose ID lists
        materialize needs to build the compaction entry, SPEC §15.2) out of band, from the reducer."""
        return self.store.state

    def _start_step(self, plan: Mapping) -> None:
        state = self._state()
        [intent_facts] = self._transactions(plan)
        intent = self.commit(intent_facts)  # stepAttempt durable BEFORE the request (§15.3)
        if self.interrupt.requested:
            return  # "abort during the model call": the request is never sent
        if plan["stepKind"] == "compaction":
            outcome = self._summarize(state)
        else:
            # §15.2: system prompt + the durable activeContext. A retry (attempt 2) re-sends exactly the same
            # context: nothing but stepAttempt records was committed since attempt 1.
            outcome = self._ask(self.model.request_body(list(state["activeContext"])))
        if outcome is None or self.interrupt.requested:
            return  # cancelled in flight: discard (§15.5 step 3), the loop writes abortRequested
        self.commit(self._outcome(self._state(), plan, intent, outcome))

    def _ask(self, body: dict) -> dict | None:
        from agent.provider import Cancelled, Completion, LiveError

        answer = self.provider.chat(body)
        if "retry-live-failures" in self.bugs:  # BUG switch: a naive client retry policy re-sends 5xx/429
            resends = 0
            while (isinstance(answer, LiveError) and answer.code in _RETRIABLE_LIVE_ERRORS
                   and resends < _BUGGY_RESENDS and not self.interrupt.requested):
                resends += 1
                answer = self.provider.chat(body)
        if isinstance(answer, Cancelled):
            return None
        if isinstance(answer, Completion):
            return assistant_answer(answer.message, answer.stop_reason, answer.usage)
        if isinstance(answer, LiveError):
            return step_failure(answer.code, answer.message, answer.usage)
        raise PlanExecutionError(f"provider returned {type(answer).__name__}")

    def _summarize(self, state) -> dict | None:
        from agent.provider import Cancelled, LiveError, Summary

        started = getattr(state, "compaction_started", None)
        if not started:
            raise PlanExecutionError("compaction step without its compactionStarted record in the reduction")
        # §15.2: the summarization request covers the messages of compactedEntryIds, which are the first
        # |compactedEntryIds| messages of the transcript (§6.2 step 8 partition).
        messages = list(state["transcript"][: len(started["compactedEntryIds"])])
        answer = self.provider.summarize(self.model.model, messages, options=self.model.summary_options)
        if isinstance(answer, Cancelled):
            return None
        if isinstance(answer, Summary):
            return compaction_summary(answer.text, answer.usage)
        if isinstance(answer, LiveError):
            return step_failure(answer.code, answer.message, answer.usage)
        raise PlanExecutionError(f"provider returned {type(answer).__name__}")

    def _start_tool(self, plan: Mapping) -> None:
        state = self.store.state
        if plan["mode"] == "replay":
            # §15.2: no new toolStarted; re-run with the RECORDED effective arguments, commit into the reserved id.
            call = next((t for t in state["operation"].get("toolCalls", ())
                         if t["toolStartedId"] == plan.get("toolStartedId")), None)
            if call is None:  # only a plan from outside the planner (AGENT_PLANNER_CMD) can name a missing intent
                raise PlanExecutionError(f"cannot execute plan startTool replay: no started tool "
                                         f"{plan.get('toolStartedId')!r} in the current operation")
            result = self._run_tool(plan, call["toolCallId"], plan["toolStartedId"])
            if result is None:
                return
            self.commit(self._outcome(self.store.state, plan, None, result))
            return

        [intent_facts] = self._transactions(plan)
        record = intent_facts[0]
        if "effect-before-intent" in self.bugs:  # BUG switch: the effect runs before its intent is durable
            result = self._run_tool(plan, record["record"]["toolCallId"], record["id"])
            intent = self.commit(intent_facts)
        else:
            intent = self.commit(intent_facts)  # toolStarted durable BEFORE the effect (§15.3)
            if self.interrupt.requested:
                return  # "abort during a tool" at the toolStarted barrier: the tool never starts
            result = self._run_tool(plan, record["record"]["toolCallId"], intent[0]["id"])
        if result is None:
            return
        self.commit(self._outcome(self.store.state, plan, intent, result))

    def _run_tool(self, plan: Mapping, call_id: str, started_id: str) -> dict | None:
        result = self.tools.run(plan["toolName"], plan["arguments"], call_id=call_id, started_id=started_id)
        if getattr(result, "aborted", False):
            return None  # the process group was killed by the interrupt: the output is not a result (§15.5)
        return tool_result(result.content, error=result.type == "error")
