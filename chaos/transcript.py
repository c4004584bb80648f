"""``chaos show LOG``: a session log as a readable transcript, and why a crash-free baseline failed.

A failing case leaves JSONL session logs (``sessions/*.jsonl``, the log at each kill under ``kills/``) whose lines
are transactions of facts with UUIDs, digests and configuration snapshots: exact, and unreadable at 7 a.m. This
module turns one into what happened, line by line — each run as a turn, the user's prompt, the assistant's text and
tool calls with their arguments, each tool's result (errors marked), the durable records (step attempts, tool
starts, aborts, operation outcomes) — and says where the log stops being valid: a torn last line (bytes after the
last LF, which the reducer ignores) or the first line the reference reducer rejects, with its SPEC error code.

Only the contract is used to read it: ``agent.session``'s framing (committed lines, strict JSON) and its reducer
(each line applied in turn; the state at the end, described with the scenario condition vocabulary of
``chaos.oracle.conditions_at``). Nothing of the agent's own code is imported.

``baseline_why`` reads a failing crash-free run's kept case directory for the evidence a reader can act on: the
error results tools returned (``invalid arguments for tool 'write': missing required property 'content'``) and the
tail of the agent's stderr. Pure functions over bytes and dicts, plus one small reader (``baseline_why``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from agent.session.errors import CorruptionError
from agent.session.framing import parse_line
from agent.session.reducer import Reducer

STDERR_TAIL = 6  # lines of the agent's stderr that go with a failing baseline
# Record fields that identify or fingerprint rather than say what happened; left out of the readable line.
_NOISE = frozenset({"type", "operationId", "stepId", "attemptId", "configurationDigest", "configurationSnapshot",
                    "contextThroughEntryId", "inputEntryId", "assistantEntryId", "resultEntryId", "finalEntryId",
                    "toolStartedId", "environmentIdentity", "replayKey", "sourceDigest"})


def _text(value: Any) -> str:
    """A JSON value as one line of text (strings as they are, the rest as compact JSON)."""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, sort_keys=True)


def _one_line(value: Any) -> str:
    """Text on one line: newlines shown as ``\\n`` so a transcript line stays one line."""
    return _text(value).replace("\r", "\\r").replace("\n", "\\n")


def describe_fact(fact: Mapping[str, Any]) -> list[str]:
    """Readable lines for one fact of a transaction (an entry, a record, usage)."""
    kind = fact.get("kind")
    if kind == "entry":
        return _entry_lines(fact.get("entry") or {})
    if kind == "record":
        return [_record_line(fact.get("record") or {})]
    if kind == "usage":
        usage = fact.get("usage") or {}
        return ["usage " + " ".join(f"{k}={v}" for k, v in usage.items())]
    return [f"{kind}: {_one_line(fact)}"]


def _entry_lines(entry: Mapping[str, Any]) -> list[str]:
    message = entry.get("message")
    if entry.get("type") != "message" or not isinstance(message, Mapping):
        details = {k: v for k, v in entry.items() if k not in _NOISE}
        return [f"entry {entry.get('type')}: {_one_line(details)}"]
    role = message.get("role")
    if role == "user":
        return [f"user: {_one_line(message.get('content'))}"]
    if role == "assistant":
        head = f"assistant ({entry.get('stopReason', '?')})"
        lines = [f"{head}: {_one_line(message.get('content'))}" if message.get("content") is not None else head]
        for call in message.get("tool_calls") or []:
            function = call.get("function") or {}
            lines.append(f"  → call {call.get('id')} {function.get('name')}({_one_line(function.get('arguments'))})")
        return lines
    if role == "tool":
        error = (entry.get("result") or {}).get("type") == "error"
        name = entry.get("toolName") or "?"
        return [f"← result of {message.get('tool_call_id')} ({name}){' ERROR' if error else ''}: "
                f"{_one_line(message.get('content'))}"]
    return [f"{role}: {_one_line(message.get('content'))}"]


def _record_line(record: Mapping[str, Any]) -> str:
    kind = record.get("type")
    if kind == "runStarted":
        return f"── {record.get('operationKind', 'run')} started (operation {record.get('operationId')})"
    if kind == "operationFinished":
        extra = f", error {_one_line(record['error'])}" if record.get("error") else ""
        return (f"── {record.get('operationKind', 'operation')} finished: {record.get('outcome')} "
                f"({record.get('completion')}){extra}")
    if kind == "stepAttempt":
        return f"step attempt {record.get('attempt')} ({record.get('stepKind')})"
    if kind == "toolStarted":
        return (f"tool started: {record.get('toolName')} {record.get('toolCallId')} "
                f"(replay {record.get('replay')}) {_one_line(record.get('arguments'))}")
    details = {k: v for k, v in record.items() if k not in _NOISE}
    return f"{kind}" + (f": {_one_line(details)}" if details else "")


def transcript_lines(data: bytes) -> list[str]:
    """The readable transcript of a session log's bytes, ending with where it stops being valid and its state."""
    from chaos.oracle import conditions_at

    if not data:
        return ["(empty file: no header line — MISSING_HEADER at line 1)"]
    end = data.rfind(b"\n") + 1
    raw_lines = data[:end].split(b"\n")[:-1]
    tail = data[end:]
    out: list[str] = []
    reducer: Reducer | None = Reducer()
    rejected = None
    for number, raw in enumerate(raw_lines, start=1):
        text = raw.decode("utf-8", errors="replace")
        try:
            value = parse_line(text, number)
        except CorruptionError as exc:
            value = None
            rejected = rejected or exc
        if reducer is not None and value is not None:
            try:
                if number == 1:
                    reducer.apply_header(value, 1)
                else:
                    reducer.apply(value, number)
            except CorruptionError as exc:
                rejected = rejected or exc
        if rejected is not None and reducer is not None:
            out.append(f"✗ line {number}: the reference reducer rejects the log here: {rejected} "
                       "(the lines below are shown as written, not as a valid state)")
            reducer = None
        if value is None:
            out.append(f"line {number}: not JSON: {_one_line(text)}")
        elif number == 1 and isinstance(value, Mapping) and value.get("kind") == "header":
            out.append(f"session {value.get('id')} · {value.get('provider')}/{value.get('model')} · "
                       f"environment {value.get('environmentIdentity')} · version {value.get('version')}")
        else:
            facts = value if isinstance(value, list) else [value]
            for i, fact in enumerate(facts):
                prefix = f"line {number}" if i == 0 else " " * len(f"line {number}")
                lines = describe_fact(fact) if isinstance(fact, Mapping) else [_one_line(fact)]
                pad = " " * len(prefix)
                out += [f"{prefix if j == 0 else pad}  {line}" for j, line in enumerate(lines)]
    if tail:
        out.append(f"✂ the log was cut here: {len(tail)} byte(s) after line {len(raw_lines)} with no final LF "
                   f"(a torn write; the reducer ignores them): {_one_line(tail.decode('utf-8', errors='replace'))}")
    if reducer is not None and raw_lines:
        state = reducer.export(end)
        conds = conditions_at(state)
        out.append(f"state at the end: {state['operation'].get('kind')}; conditions: {', '.join(conds) or '(none)'}")
    elif not raw_lines:
        out.append("(no complete line: the header itself is torn)")
    return out


# ---- why a crash-free baseline failed -------------------------------------------------------------------------


def tool_errors(data: bytes) -> list[str]:
    """The error results tools returned in a log (``write: invalid arguments …``), in log order. Pure."""
    out = []
    end = data.rfind(b"\n") + 1
    for number, raw in enumerate(data[:end].split(b"\n")[:-1], start=1):
        try:
            value = parse_line(raw.decode("utf-8", errors="replace"), number)
        except CorruptionError:
            continue
        for fact in value if isinstance(value, list) else [value]:
            entry = fact.get("entry") if isinstance(fact, Mapping) else None
            if isinstance(entry, Mapping) and (entry.get("result") or {}).get("type") == "error":
                content = (entry.get("message") or {}).get("content")
                out.append(f"tool {entry.get('toolName') or '?'} returned an error: {_one_line(content)}")
    return out


def baseline_why(case_dirs: Iterable[str | Path]) -> list[str]:
    """Evidence of why a crash-free baseline failed, from its kept case directories: each tool error result of its
    session log, and the agent's stderr tail (last launch). Missing files give nothing (never an exception)."""
    out: list[str] = []
    for case_dir in case_dirs:
        case_dir = Path(case_dir)
        for log in sorted((case_dir / "sessions").glob("*.jsonl")):
            try:
                out += [line for line in tool_errors(log.read_bytes()) if line not in out]
            except OSError:
                continue
        try:
            run = json.loads((case_dir / "caserun.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        launches = [launch for launch in run.get("launches") or [] if launch.get("stderr")]
        if launches:
            try:
                text = Path(launches[-1]["stderr"]).read_text(encoding="utf-8", errors="replace")
            except OSError:
                continue
            tail = [line.strip() for line in text.splitlines() if line.strip()][-STDERR_TAIL:]
            if tail:
                last = launches[-1]
                line = f"agent stderr (launch {last.get('index')}, {last.get('role')}): " + " | ".join(tail)
                if line not in out:
                    out.append(line)
        break  # the first run's evidence; the second run of a deterministic baseline says the same
    return out
