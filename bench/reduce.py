"""Benchmark of the session core: reduce_session throughput and SessionStore.commit latency (issue 2 "Speed").

What it measures, each against a baseline measured in the same run:
1. reduce: facts/second of ``reduce_session`` over a ~100,000-fact log, against plain ``json.loads`` of the same
   lines (decode + split + loads, no validation). Targets: >= 50,000 facts/s and <= 3x the json.loads time.
2. commit: mean latency of ``SessionStore.commit`` (serialize, strict parse, trial reduce, write, fsync) on the real
   disk, against a raw ``os.write`` + ``os.fsync`` of the very same bytes to a plain file in the same directory,
   interleaved commit by commit so both see the same disk conditions. Target: <= 1.5x.

How the log is built (every transaction goes through ``SessionStore.commit``): the store first writes the whole log
in a tmpfs directory (/dev/shm), where fsync costs ~1 µs, so 100,000 facts take seconds instead of minutes; the
commit path is otherwise identical (same serialization, validation and write). The file is then copied to the disk
directory, reopened there with ``SessionStore.open`` (a full reduce, timed too) and the commit phase continues the
same session with real fsyncs — so the measured commits run against a state of 100,000 facts, which is what shows
that commit cost does not grow with the file.

Fact mix (a tool-calling agent in the live durable order of SPEC §15.3; 4 tools in every configuration snapshot):
- every run: ``[user, runStarted]``; then ``run % 3`` tool steps (0, 1 or 2) of 1 or 2 calls (alternating), each
  ``stepAttempt`` · ``[assistant(toolUse), usage]`` · per call ``toolStarted`` · ``[toolResult, usage]``; then the
  final ``stepAttempt`` · ``[assistant(stop), usage]`` · ``operationFinished(completed)``; ~13.5 facts per run.
- every ``--compact-every`` runs (default 400): a compaction keeping the latest user turn: ``compactionStarted``
  (its ID lists cover the whole history, so these lines grow with the log) · ``stepAttempt(compaction)`` ·
  ``[compaction, usage]`` · ``operationFinished``.

Not a test: no thresholds fail anything; it prints figures, ratios and the targets next to them.
Run: ``python3 bench/reduce.py`` (full) or ``python3 bench/reduce.py --facts 10000 --commits 300`` (quick).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from agent.session import digests
from agent.session.reducer import reduce_session
from agent.session.store import SessionStore, fact_name

MODEL = "gpt-4o-mini"
SYSTEM_PROMPT = "You are a careful coding agent. Use the tools to inspect and change the workspace."
TOOL_NAMES = ("read", "write", "edit", "bash")
DECLARATIONS = {"read": ("safe", "builtin:read:v1"), "bash": ("never", "builtin:bash:v1")}
FILE_TEXT = "".join(f"def function_{i}(x):\n    return x * {i}  # ünïcode ✓\n" for i in range(12))


def _tool(name: str) -> dict:
    return {"type": "function", "function": {
        "name": name, "description": f"The {name} tool of the benchmark agent.",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}, "command": {"type": "string"}},
                       "additionalProperties": False}}}


def _snapshot() -> dict:
    return {
        "model": MODEL,
        "systemPromptDigest": digests.system_prompt_digest(SYSTEM_PROMPT),
        "tools": [{"name": n, "definitionDigest": digests.definition_digest(_tool(n))} for n in TOOL_NAMES],
        "adapterIdentity": "openai:chat-completions:v1",
        "routingIdentity": f"openai:{MODEL}",
        "outputOptionsDigest": digests.output_options_digest({"max_tokens": 4096, "temperature": 0.2}),
    }


class Workload:
    """Yields the transactions of the fact mix, tracking what later facts reference (boundary, messages)."""

    def __init__(self, new_id, compact_every: int) -> None:
        self.new_id = new_id
        self.compact_every = compact_every
        self.snapshot = _snapshot()
        self.digest = digests.configuration_digest(self.snapshot)
        self.messages: list[tuple[str, dict]] = []  # (entry id, message) in commit order, for compaction
        self.boundary = ""
        self.last_user_index = 0

    def _message(self, entry_id: str, message: dict) -> None:
        self.messages.append((entry_id, message))
        self.boundary = entry_id

    def _usage(self, op: str, owner: str, value: str, n: int) -> dict:
        return {"kind": "usage", "operationId": op, owner: value,
                "usage": {"input": 900 + n, "output": 40 + n % 97, "cacheRead": 512, "cacheWrite": 0}}

    def _attempt(self, op: str, kind: str) -> tuple[dict, str, str]:
        step, attempt = self.new_id(), self.new_id()
        return ({"kind": "record", "record": {
            "type": "stepAttempt", "operationId": op, "stepId": step, "attemptId": attempt, "stepKind": kind,
            "attempt": 1, "contextThroughEntryId": self.boundary, "configurationSnapshot": self.snapshot,
            "configurationDigest": self.digest}}, step, attempt)

    def transactions(self):
        run = 0
        while True:
            yield from self._run(run)
            run += 1
            if run % self.compact_every == 0:
                yield from self._compaction(run)

    def _run(self, run: int):
        op, user = self.new_id(), self.new_id()
        message = {"role": "user", "content": f"Task {run}: find why test_{run % 50} fails and fix it."}
        self.last_user_index = len(self.messages)
        self._message(user, message)
        yield [{"kind": "entry", "id": user, "entry": {"type": "message", "message": message}},
               {"kind": "record", "record": {"type": "runStarted", "operationId": op, "operationKind": "run",
                                             "inputEntryId": user}}]
        for step_number in range(run % 3):
            fact, step, attempt = self._attempt(op, "assistant")
            yield [fact]
            calls = []
            for index in range(1 + (run + step_number) % 2):
                name = "read" if index == 0 else "bash"
                arguments = {"path": f"src/module_{run % 40}.py"} if name == "read" else {"command": "pytest -q"}
                calls.append({"id": f"call_{run}_{step_number}_{index}", "type": "function",
                              "function": {"name": name, "arguments": json.dumps(arguments)}})
            assistant = self.new_id()
            message = {"role": "assistant", "content": "Let me look at the code first.", "tool_calls": calls}
            self._message(assistant, message)
            yield [{"kind": "entry", "id": assistant, "entry": {
                       "type": "message", "stepId": step, "attemptId": attempt, "stopReason": "toolUse",
                       "message": message}},
                   self._usage(op, "attemptId", attempt, run)]
            for index, call in enumerate(calls):
                started, result = self.new_id(), self.new_id()
                name = call["function"]["name"]
                replay, key = DECLARATIONS[name]
                yield [{"kind": "record", "id": started, "record": {
                    "type": "toolStarted", "operationId": op, "stepId": step, "assistantEntryId": assistant,
                    "toolIndex": index, "toolCallId": call["id"], "toolName": name,
                    "arguments": json.loads(call["function"]["arguments"]), "replay": replay, "replayKey": key,
                    "environmentIdentity": "/workspace", "resultEntryId": result}}]
                message = {"role": "tool", "tool_call_id": call["id"],
                           "content": FILE_TEXT if name == "read" else "3 passed, 1 failed in 0.42s"}
                self._message(result, message)
                yield [{"kind": "entry", "id": result, "entry": {
                           "type": "message", "stepId": step, "toolStartedId": started, "toolName": name,
                           "message": message, "result": {"type": "success"}}},
                       self._usage(op, "toolStartedId", started, run)]
        fact, step, attempt = self._attempt(op, "assistant")
        yield [fact]
        final = self.new_id()
        message = {"role": "assistant", "content": f"Fixed: the off-by-one in module_{run % 40} is gone."}
        self._message(final, message)
        yield [{"kind": "entry", "id": final, "entry": {
                   "type": "message", "stepId": step, "attemptId": attempt, "stopReason": "stop",
                   "message": message}},
               self._usage(op, "attemptId", attempt, run)]
        yield [{"kind": "record", "record": {"type": "operationFinished", "operationId": op, "operationKind": "run",
                                             "outcome": "completed", "completion": "normal",
                                             "finalEntryId": final}}]

    def _compaction(self, run: int):
        op, result = self.new_id(), self.new_id()
        ids = [entry_id for entry_id, _ in self.messages]
        compacted, retained = ids[: self.last_user_index], ids[self.last_user_index:]
        through = ids[-1]
        source = digests.source_digest([{"sourceEntryId": i, "message": m} for i, m in self.messages])
        yield [{"kind": "record", "record": {
            "type": "compactionStarted", "operationId": op, "operationKind": "compaction",
            "inputThroughEntryId": through, "resultEntryId": result, "compactedEntryIds": compacted,
            "retainedEntryIds": retained, "sourceDigest": source}}]
        fact, step, attempt = self._attempt(op, "compaction")
        yield [fact]
        tail = [{"sourceEntryId": i, "message": m} for i, m in self.messages[self.last_user_index:]]
        yield [{"kind": "entry", "id": result, "entry": {
                   "type": "compaction", "operationId": op, "summary": f"Summary of the first {run} runs.",
                   "compactedThroughEntryId": compacted[-1], "retainedTail": tail}},
               self._usage(op, "attemptId", attempt, run)]
        self.boundary = through  # SPEC §5.7: a compaction entry sets the boundary to inputThroughEntryId
        yield [{"kind": "record", "record": {"type": "operationFinished", "operationId": op,
                                             "operationKind": "compaction", "outcome": "completed",
                                             "finalEntryId": result}}]


def _fast_dir() -> Path | None:
    shm = Path("/dev/shm")
    return shm if shm.is_dir() and os.access(shm, os.W_OK) else None


def build(workdir: Path, facts: int, compact_every: int):
    """Phase 1: commit transactions until the log holds at least ``facts`` facts; returns (path, workload, stats)."""
    fast = _fast_dir()
    build_dir = Path(tempfile.mkdtemp(prefix="bench-build-", dir=fast)) if fast else workdir / "build"
    store = SessionStore.create(build_dir, cwd="/workspace", provider="openai", model=MODEL,
                                environment_identity="/workspace")
    workload = Workload(store.allocate_id, compact_every)
    source = workload.transactions()
    mix: collections.Counter = collections.Counter()
    count = commits = 0
    started = time.perf_counter()
    while count < facts:
        committed = store.commit(next(source))
        commits += 1
        count += len(committed)
        mix.update(fact_name(f) for f in committed)
    elapsed = time.perf_counter() - started
    store.close()
    path = workdir / store.path.name
    shutil.copyfile(store.path, path)
    if fast:
        shutil.rmtree(build_dir)
    with open(path, "rb") as f:
        os.fsync(f.fileno())
    return path, workload, source, {"facts": count, "commits": commits, "seconds": elapsed, "mix": mix,
                                    "build_dir": "tmpfs (/dev/shm)" if fast else str(build_dir)}


def measure_reduce(data: bytes, repeat: int) -> dict:
    """Phase 2: best-of-``repeat`` reduce_session vs json.loads over the same lines."""
    reduce_times, loads_times = [], []
    for _ in range(repeat):
        t = time.perf_counter()
        reduce_session(data)
        reduce_times.append(time.perf_counter() - t)
        t = time.perf_counter()
        lines = data[: data.rindex(b"\n")].decode("utf-8").split("\n")
        parsed = [json.loads(line) for line in lines]
        loads_times.append(time.perf_counter() - t)
    facts = sum(len(v) if isinstance(v, list) else 1 for v in parsed[1:])
    return {"facts": facts, "lines": len(parsed), "bytes": len(data), "reduce": min(reduce_times),
            "loads": min(loads_times)}


def measure_commit(path: Path, workdir: Path, source, commits: int) -> dict:
    """Phase 3: on the disk, each commit followed by a raw write+fsync of the same bytes to a plain file."""
    t = time.perf_counter()
    store = SessionStore.open(path)
    open_seconds = time.perf_counter() - t
    reader = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    raw_path = workdir / "raw-baseline.jsonl"
    raw = os.open(raw_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
    commit_times, raw_times, sizes = [], [], []
    try:
        for _ in range(commits):
            facts = next(source)
            before = store.offset
            t0 = time.perf_counter()
            store.commit(facts)
            t1 = time.perf_counter()
            line = os.pread(reader, store.offset - before, before)
            t2 = time.perf_counter()
            os.write(raw, line)
            os.fsync(raw)
            t3 = time.perf_counter()
            commit_times.append(t1 - t0)
            raw_times.append(t3 - t2)
            sizes.append(len(line))
    finally:
        store.close()
        os.close(reader)
        os.close(raw)
        raw_path.unlink()
    return {"open": open_seconds, "commit": commit_times, "raw": raw_times, "sizes": sizes,
            "state_facts": store.reducer.next_seq - 1}


def _verdict(ok: bool) -> str:
    return "meets target" if ok else "MISSES target"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--facts", type=int, default=100_000, help="facts in the log (default 100000)")
    parser.add_argument("--commits", type=int, default=2_000, help="commits timed on the disk (default 2000)")
    parser.add_argument("--repeat", type=int, default=3, help="reduce repetitions, best is kept (default 3)")
    parser.add_argument("--compact-every", type=int, default=400, help="runs between compactions (default 400)")
    parser.add_argument("--dir", type=Path, default=None, help="disk directory for the log (default: a temp dir)")
    args = parser.parse_args(argv)
    if args.facts < 1 or args.commits < 1 or args.repeat < 1 or args.compact_every < 1:
        parser.error("--facts, --commits, --repeat and --compact-every must be positive")

    workdir = Path(tempfile.mkdtemp(prefix="bench-reduce-", dir=args.dir))
    try:
        path, _workload, source, built = build(workdir, args.facts, args.compact_every)
        data = path.read_bytes()
        print(f"log: {built['facts']:,} facts in {built['commits']:,} commits, {len(data) / 1e6:.1f} MB "
              f"(built through SessionStore.commit on {built['build_dir']} in {built['seconds']:.1f} s, "
              f"{built['commits'] / built['seconds']:,.0f} commits/s without fsync cost)")
        print("fact mix: " + ", ".join(f"{name} {n:,}" for name, n in built["mix"].most_common()))

        r = measure_reduce(data, args.repeat)
        assert r["facts"] == built["facts"], "the reduce phase must see every committed fact"
        rate = r["facts"] / r["reduce"]
        ratio = r["reduce"] / r["loads"]
        print(f"\nreduce_session: {r['reduce']:.3f} s = {rate:,.0f} facts/s "
              f"({r['lines']:,} lines, best of {args.repeat})   target >= 50,000 facts/s: {_verdict(rate >= 50_000)}")
        print(f"json.loads baseline (same lines): {r['loads']:.3f} s = {r['facts'] / r['loads']:,.0f} facts/s")
        print(f"ratio reduce / json.loads: {ratio:.2f}x   target <= 3x: {_verdict(ratio <= 3)}")

        c = measure_commit(path, workdir, source, args.commits)
        mean_commit = statistics.fmean(c["commit"])
        mean_raw = statistics.fmean(c["raw"])
        ratio = mean_commit / mean_raw
        print(f"\nSessionStore.open of that log on disk (reduce + fsync): {c['open']:.3f} s")
        print(f"commit on disk: {len(c['commit']):,} commits against a state of {c['state_facts']:,} facts, "
              f"mean line {statistics.fmean(c['sizes']):,.0f} bytes")
        print(f"  SessionStore.commit:     mean {mean_commit * 1e6:8.1f} us   median "
              f"{statistics.median(c['commit']) * 1e6:8.1f} us")
        print(f"  raw write+fsync (same bytes, plain file, interleaved): mean {mean_raw * 1e6:8.1f} us   median "
              f"{statistics.median(c['raw']) * 1e6:8.1f} us")
        print(f"  ratio commit / raw: {ratio:.2f}x   target <= 1.5x: {_verdict(ratio <= 1.5)}")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
