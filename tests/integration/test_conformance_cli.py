"""`chaos conformance` and `chaos corpus build` end to end, with real subprocesses: the correct agent passes the
shipped corpus and the contract corpus; deliberately wrong planners written as stdlib-only scripts (they never
import or run `agent`) and the agent's planner bug switches fail with the rule and the divergence named; usage
errors are one line and exit 2; a one-scenario corpus build works."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agent.session.planner import PLANNER_BUGS
from chaos.campaign import PLANNER_RULES
from chaos.corpus import DEFAULT_CORPUS, load_corpus
from tests.integration import gone

REPO = Path(__file__).resolve().parents[2]
AGENT = f"{sys.executable} -m agent"

# Stale assistantCalls in a few lines: after a crash between the final answer and its terminal record, it starts the
# previous answer's call again. It only knows the P5 situations (a settled `stop` answer) and idle.
STALE_PLANNER = '''
import json, sys
if sys.argv[1:2] != ["plan"]:
    sys.exit("only `plan FILE CURRENT.json` is implemented")
lines = [json.loads(l) for l in open(sys.argv[2], "rb").read().split(b"\\n")[1:] if l.strip()]
open_op, answers = False, []
for f in (f for l in lines for f in (l if isinstance(l, list) else [l])):
    kind = (f.get("record") or {}).get("type")
    open_op = kind in ("runStarted", "compactionStarted") or (open_op and kind != "operationFinished")
    if ((f.get("entry") or {}).get("message") or {}).get("role") == "assistant":
        answers.append((f["id"], f["entry"]))
if not open_op:
    plan = {"type": "finish", "outcome": "completed", "completion": "normal"}
elif answers and answers[-1][1]["stopReason"] == "stop":
    stale = [(i, e) for i, e in answers if e["message"].get("tool_calls")]
    if stale:  # the defect: the last answer that EVER had calls, not the current one
        entry_id, entry = stale[-1]
        call = entry["message"]["tool_calls"][0]["function"]
        plan = {"type": "startTool", "mode": "start", "assistantEntryId": entry_id, "toolIndex": 0,
                "toolName": call["name"], "arguments": json.loads(call["arguments"])}
    elif not (answers[-1][1]["message"].get("content") or "").strip():
        plan = {"type": "finish", "outcome": "failed",
                "error": {"code": "empty_response", "message": "model returned an empty final answer"}}
    else:
        plan = {"type": "finish", "outcome": "completed", "completion": "normal", "finalEntryId": answers[-1][0]}
else:
    plan = {"type": "blocked", "reason": "configuration_changed"}
print(json.dumps(plan))
'''

# A planner that cycles: it replays the last started tool of the open operation, again and again.
REPLAY_FOREVER = '''
import json, sys
lines = [json.loads(l) for l in open(sys.argv[2], "rb").read().split(b"\\n")[1:] if l.strip()]
open_op, started = False, None
for f in (f for l in lines for f in (l if isinstance(l, list) else [l])):
    record = f.get("record") or {}
    open_op = record.get("type") in ("runStarted", "compactionStarted") or (
        open_op and record.get("type") != "operationFinished")
    if record.get("type") == "toolStarted":
        started = dict(record, toolStartedId=f["id"])
if open_op and started:
    keys = ("assistantEntryId", "toolIndex", "toolStartedId", "toolName", "arguments")
    print(json.dumps({"type": "startTool", "mode": "replay", **{k: started[k] for k in keys}}))
else:
    print(json.dumps({"type": "finish", "outcome": "completed", "completion": "normal"}))
'''


def chaos(*args: str, env: dict[str, str] | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    """Run `python -m chaos ARGS` from the repository, capturing text output."""
    return subprocess.run([sys.executable, "-m", "chaos", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})}, check=False)


def script(tmp_path: Path, name: str, text: str) -> str:
    """Write a planner script and return its --impl command line (it runs without the agent package)."""
    path = tmp_path / f"{name}.py"
    path.write_text(text, encoding="utf-8")
    assert "agent" not in text  # neither imports nor runs the agent package
    return f"{sys.executable} -I {path}"


class TestWrongPlanners:
    def test_stale_assistant_calls_script_names_rule_and_divergence(self, tmp_path):
        """The stale-calls script fails P5.2 with its divergence, and its plan is rejected by the reference store."""
        impl = script(tmp_path, "stale", STALE_PLANNER)
        out = tmp_path / "report.json"
        proc = chaos("conformance", "--impl", impl, "--rule", "P5", "--no-reduce", "--json", str(out))
        assert proc.returncode == 1, proc.stdout + proc.stderr
        signature = "reference P5.2 finish completed; implementation startTool read#0 of an earlier assistant message"
        assert signature in proc.stdout
        assert "closed loop: startTool read#0 of an earlier assistant message rejected by the reference store" \
            in proc.stdout
        report = json.loads(out.read_text())
        assert report["byRule"]["P5.2"]["signatures"][signature] >= 1
        assert set(report["byRule"]) == {"P5.2"}  # right everywhere else it was asked (P5.1, P5.2 without calls)
        failing = [f for f in report["failures"] if f["kind"] == "closed-loop"]
        assert failing and all(f["step"] == 0 and f["plan"]["type"] == "startTool" for f in failing)

    def test_cycling_planner_is_caught_by_the_closed_loop(self, tmp_path):
        """A planner that replays a tool again after it was executed fails the closed loop as a cycle."""
        impl = script(tmp_path, "replay_forever", REPLAY_FOREVER)
        proc = chaos("conformance", "--impl", impl, "--rule", "P7.1.3.3", "--sample", "1", "--no-reduce")
        assert proc.returncode == 1, proc.stdout + proc.stderr
        assert "closed loop: cycle, startTool read#0 (replay) returned again after it was executed" in proc.stdout

    @pytest.mark.parametrize("switch", sorted(PLANNER_BUGS))
    def test_each_planner_bug_switch_fails(self, switch, tmp_path):
        """`python -m agent` with a planner bug switch in its environment fails, naming a rule and a divergence."""
        out = tmp_path / "report.json"
        proc = chaos("conformance", "--impl", AGENT, "--sample", "1", "--no-reduce", "--no-closed-loop",
                     "--fail-fast", "--json", str(out), env={"AGENT_BUGS": switch})
        assert proc.returncode == 1, proc.stdout + proc.stderr
        failure = json.loads(out.read_text())["failures"][0]
        assert failure["kind"] == "plan" and failure["rule"] in PLANNER_RULES
        assert failure["signature"].startswith(f"reference {failure['rule']} ")


class TestCorrectImplementation:
    @pytest.mark.slow
    def test_default_corpus_passes_everything(self, tmp_path):
        """The bundled agent agrees on every reduction and plan of the shipped corpus (all 27 rules) and every
        closed loop converges (about a minute on 2 cores: each check is a fresh agent process)."""
        out = tmp_path / "report.json"
        proc = chaos("conformance", "--impl", AGENT, "--json", str(out))
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
        [tally] = json.loads(out.read_text())["corpora"]
        corpus = load_corpus(DEFAULT_CORPUS)
        assert tally["reduce_agree"] == tally["reduce_checked"] == len(corpus.prefixes)
        assert tally["plans_agree"] == tally["plans_checked"] == len(corpus.checks)
        assert tally["loops_pass"] == tally["loops_checked"] == len(corpus.checks)
        assert tally["rules_missing"] == [] and f"{len(PLANNER_RULES)}/{len(PLANNER_RULES)} rules" in proc.stdout

    def test_sample_reaches_every_rule(self, tmp_path):
        """--sample 1 with --rule keeps one check per (rule, scenario) of those rules, reaches each of them, passes."""
        out = tmp_path / "report.json"
        proc = chaos("conformance", "--impl", AGENT, "--sample", "1", "--no-reduce", "--no-closed-loop",
                     "--rule", "P3", "--rule", "P7.1", "--json", str(out))
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
        [tally] = json.loads(out.read_text())["corpora"]
        sample = load_corpus(DEFAULT_CORPUS).select(["P3", "P7.1"], sample=1)
        assert tally["plans_agree"] == tally["plans_checked"] == len(sample.checks)
        assert sorted(tally["rules"]) == sorted(r for r in PLANNER_RULES if r.startswith(("P3.", "P7.1.")))

    def test_contract_corpus_passes(self, corpus):
        """The bundled agent passes the shared contract corpus (root folder, reducer and planner fixtures)."""
        proc = chaos("conformance", "--impl", AGENT, "--corpus", str(corpus))
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "46/46" in proc.stdout and "18/18" in proc.stdout

    def test_contract_subfolders_are_accepted(self, corpus):
        """--corpus accepts fixtures/ and planner-fixtures/ on their own."""
        proc = chaos("conformance", "--impl", AGENT, "--corpus", str(corpus / "fixtures"),
                     "--corpus", str(corpus / "planner-fixtures"), "--no-closed-loop")
        assert proc.returncode == 0, proc.stdout + proc.stderr


class TestUsage:
    @pytest.mark.parametrize("args", [
        [],
        ["--impl", "   "],
        ["--impl", AGENT, "--bogus"],
        ["--impl", AGENT, "--corpus", "/no/such/corpus"],
        ["--impl", AGENT, "--corpus", "."],
        ["--impl", AGENT, "--rule", "P9"],
        ["--impl", AGENT, "--timeout", "0"],
        ["--impl", "/no/such/planner"],
        ["--impl", "/tmp"],  # a directory: os.access says "executable" (searchable)
        ["--impl", "'unbalanced"],
    ])
    def test_usage_error_is_one_line_exit_2(self, args):
        """Each usage error prints exactly one line on stderr, no traceback, and exits 2."""
        proc = chaos("conformance", *args)
        assert proc.returncode == 2, proc.stdout + proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("chaos conformance: "), proc.stderr
        assert "Traceback" not in proc.stderr


    def test_sigterm_stops_a_run_at_once_and_leaves_no_process(self, tmp_path):
        """SIGTERM (a CI timeout) mid-corpus: exit 143 within seconds, queued checks dropped, running ones killed."""
        pids = tmp_path / "pids"
        impl = script(tmp_path, "slow", f"import json, os, time\nopen({str(pids)!r}, 'a').write(f'{{os.getpid()}}\\n')"
                                        "\ntime.sleep(0.3)\nprint(json.dumps({'ok': False, 'error': {'code': 'X', "
                                        "'line': 1}}))\nraise SystemExit(1)\n")
        proc = subprocess.Popen([sys.executable, "-m", "chaos", "conformance", "--impl", impl], cwd=REPO,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 60
            while not pids.exists() or len(pids.read_text().split()) < 5:  # the preflight, then checks under way
                assert time.monotonic() < deadline and proc.poll() is None
                time.sleep(0.05)
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(30) == 128 + signal.SIGTERM
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        assert all(gone(int(pid)) for pid in pids.read_text().split())

    def test_a_command_that_answers_nothing_stops_at_once(self, tmp_path):
        """A script that cannot start (exit 1, empty stdout) is one usage line naming its error, before the corpus."""
        impl = script(tmp_path, "broken", "raise SystemExit('Error: Cannot find module my-planner')\n")
        proc = chaos("conformance", "--impl", impl, timeout=120)
        assert proc.returncode == 2, proc.stdout + proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and "reduce FILE` exited 1 and printed nothing on stdout: Error: Cannot find module " \
            "my-planner (is the command right?)" in lines[0], proc.stderr
        assert "conformance" not in proc.stdout  # no progress: nothing of the corpus ran
        answers = script(tmp_path, "wrong", "print('{}')\nraise SystemExit(1)\n")  # an answer, if wrong: judged
        judged = chaos("conformance", "--impl", answers, "--rule", "P0", "--sample", "1", "--no-closed-loop",
                       timeout=300)
        assert judged.returncode == 1 and "FAIL" in judged.stdout, judged.stdout + judged.stderr
        # Crashing on one input only (here: the first it is given) is an answer to that log, judged as a failure.
        first = tmp_path / "first"
        once = script(tmp_path, "once", f"import os, sys\nif not os.path.exists({str(first)!r}):\n"
                                        f"    open({str(first)!r}, 'w').close()\n    sys.exit('Error: crashed')\n"
                                        "print('{}')\nraise SystemExit(1)\n")
        judged = chaos("conformance", "--impl", once, "--rule", "P0", "--sample", "1", "--no-closed-loop",
                       timeout=300)
        assert judged.returncode == 1 and "FAIL" in judged.stdout, judged.stdout + judged.stderr

    def test_corpus_build_usage(self, tmp_path):
        """`chaos corpus build` without --out, or into a non-empty directory, is one line and exit 2."""
        (tmp_path / "x").write_text("x")
        for args in (["corpus", "build"], ["corpus", "build", "--out", str(tmp_path)]):
            proc = chaos(*args)
            assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr


class TestCorpusBuild:
    def test_one_scenario_end_to_end(self, tmp_path):
        """A one-scenario build records every kill prefix with reference outputs, and the agent passes it."""
        out = tmp_path / "single.zip"
        proc = chaos("corpus", "build", "scenarios/read-then-answer.toml", "--out", str(out), "--workers", "2")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        built = load_corpus(out)
        assert len(built.prefixes) == len(built.checks) > 0
        assert {"P5.2", "P7.3"} <= built.rules()
        assert f"{len(built.prefixes)} prefixes" in proc.stdout
        proc = chaos("conformance", "--impl", AGENT, "--corpus", str(out))
        assert proc.returncode == 0, proc.stdout + proc.stderr
        proc = chaos("corpus", "info", str(out))
        assert proc.returncode == 0 and "P5.2×" in proc.stdout
