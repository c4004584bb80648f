"""Unit tests of chaos.transcript: ``chaos show LOG`` and the evidence of a failing crash-free baseline."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from chaos.transcript import baseline_why, tool_errors, transcript_lines
from tests.unit.chaos.test_oracle import Log, good_log

ERROR = ("Error: invalid arguments for tool 'write': missing required property 'content'. Expected write(path: "
         "string, content: string). The tool was not executed.")


def log_with_tool_error() -> Log:
    log = Log()
    log.run("Write the file.")
    log.attempt()
    log.answer(calls=[("call_1", "bash", '{"command":"deploy"}')])
    ts, res = log.started()
    log.commit({"kind": "entry", "id": res, "entry": {
        "type": "message", "stepId": log.step, "toolStartedId": ts, "toolName": "bash", "result": {"type": "error"},
        "message": {"role": "tool", "tool_call_id": "call_1", "content": ERROR}}})
    return log


class TestTranscript:
    def test_turns_calls_results_and_records_read_in_order(self):
        """A finished session reads as prompt, call with arguments, result, answer, outcome, and its end state."""
        text = "\n".join(transcript_lines(good_log().data))
        order = ["user: Deploy.", "run started", "step attempt 1 (assistant)",
                 '→ call call_1 bash({"command":"deploy"})', "tool started: bash call_1 (replay never)",
                 "← result of call_1 (bash): ok", "assistant (stop): Done.",
                 "run finished: completed (normal)", "state at the end: idle"]
        positions = [text.index(part) for part in order]
        assert positions == sorted(positions)

    def test_a_torn_tail_is_shown_as_the_place_the_log_was_cut(self):
        """Bytes after the last LF are reported as a torn write, with their count and content."""
        data = good_log().data + b'{"kind":"rec'
        last = transcript_lines(data)[-2]
        assert last.startswith("✂ the log was cut here: 12 byte(s) after line") and last.endswith('{"kind":"rec')

    def test_the_first_line_the_reducer_rejects_is_named_with_its_code(self):
        """A line that breaks the contract is flagged where it is, with the reducer's error code."""
        log = good_log()
        lines = log.data.split(b"\n")
        lines[3] = lines[3].replace(b'"seq":', b'"seq":9', 1)  # a seq out of order
        text = transcript_lines(b"\n".join(lines))
        flagged = [line for line in text if line.startswith("✗ line 4: the reference reducer rejects the log here")]
        assert flagged and not any(line.startswith("state at the end") for line in text)

    def test_tool_error_results_are_marked(self):
        """A tool's error result is marked ERROR in the transcript and listed by tool_errors."""
        data = log_with_tool_error().data
        assert any("(bash) ERROR: " + ERROR in line for line in transcript_lines(data))
        assert tool_errors(data) == [f"tool bash returned an error: {ERROR}"]


class TestBaselineWhy:
    def test_the_tool_error_and_the_stderr_tail_of_the_kept_run(self, tmp_path):
        """From a kept case directory: the tool's error result, then the last launch's stderr tail."""
        case = tmp_path / "w_baseline"
        (case / "sessions").mkdir(parents=True)
        (case / "sessions" / "s.jsonl").write_bytes(log_with_tool_error().data)
        stderr = case / "00-step.stderr"
        stderr.write_text("agent: session s.jsonl\nagent: something went wrong\n")
        (case / "caserun.json").write_text(json.dumps({"launches": [{"index": 0, "role": "step",
                                                                     "stderr": str(stderr)}]}))
        assert baseline_why([case]) == [f"tool bash returned an error: {ERROR}",
                                        "agent stderr (launch 0, step): agent: session s.jsonl | agent: something "
                                        "went wrong"]
        assert baseline_why([tmp_path / "gone"]) == []


def test_chaos_show_prints_a_log_and_refuses_a_missing_file_in_one_line(tmp_path):
    """`chaos show LOG` prints the transcript; a missing file is one line on stderr and exit 2."""
    path = tmp_path / "s.jsonl"
    path.write_bytes(good_log().data)
    ok = subprocess.run([sys.executable, "-m", "chaos.cli", "show", str(path)], capture_output=True, text=True)
    assert ok.returncode == 0 and "← result of call_1 (bash): ok" in ok.stdout
    bad = subprocess.run([sys.executable, "-m", "chaos.cli", "show", str(tmp_path / "nope.jsonl")],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "No such file" in bad.stderr


@pytest.mark.parametrize("content", [b"name = 'x'\n[workspace]\n", b"\x7fELF\x02\x01\x01\x00\n\x00\x00",
                                     b'{\n "options": {}\n}\n', b'{"id": "s::tx:1@after-sync", "status": "pass"}\n',
                                     b"no newline at all"])
def test_chaos_show_refuses_a_file_that_is_not_a_session_log_in_one_line(tmp_path, content):
    """A scenario, a binary, a pretty-printed JSON file or a journal: one line, exit 2, not a line-by-line dump."""
    path = tmp_path / "f"
    path.write_bytes(content)
    done = subprocess.run([sys.executable, "-m", "chaos.cli", "show", str(path)], capture_output=True, text=True)
    assert done.returncode == 2 and done.stdout == "" and done.stderr.count("\n") == 1
    assert "not a session log" in done.stderr


def test_chaos_show_still_shows_a_log_the_reducer_rejects(tmp_path):
    """A session log corrupted after its header is shown, with where the reference reducer rejects it."""
    data = good_log().data
    path = tmp_path / "s.jsonl"
    path.write_bytes(data + b'{"kind": "record", "seq": 999}\n')
    done = subprocess.run([sys.executable, "-m", "chaos.cli", "show", str(path)], capture_output=True, text=True)
    assert done.returncode == 0 and "the reference reducer rejects the log here" in done.stdout
