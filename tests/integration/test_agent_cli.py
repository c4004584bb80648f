"""Integration tests of the agent CLI's stable shapes: ``reduce`` / ``plan`` output, usage errors, help, bugs.

Most cases call ``agent.cli.main`` in-process (fast); one subprocess case per shape proves the real
``python -m agent`` entry point behaves identically (exit status, one-line stderr, no traceback).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from agent import cli
from tests.conftest import CORPUS, planner_manifest, reducer_manifest


def run_cli(capsys, argv, environ=None):
    """Run ``python -m agent ARGV`` in-process; returns (status, stdout, stderr)."""
    status = cli.main(argv, environ={} if environ is None else environ)
    out, err = capsys.readouterr()
    return status, out, err


def _planner_case(name):
    entry = next(e for e in planner_manifest() if e["name"] == name)
    spec = json.loads((CORPUS / "planner-fixtures" / entry["input"]).read_text())
    expected = json.loads((CORPUS / "planner-fixtures" / entry["expected"]).read_text())
    return spec, expected


class TestReduce:
    @pytest.mark.parametrize("entry", reducer_manifest(), ids=lambda e: e["name"])
    def test_every_reducer_fixture_through_the_cli(self, corpus, capsys, entry):
        """`reduce FILE` prints the expected {ok,state} or {ok:false,error} and exits 0 or 1."""
        expected = json.loads((corpus / "fixtures" / entry["expected"]).read_text())
        status, out, err = run_cli(capsys, ["reduce", str(corpus / "fixtures" / entry["file"])])
        assert out.count("\n") == 1
        got = json.loads(out)
        assert got["ok"] == expected["ok"]
        if expected["ok"]:
            assert status == 0 and got["state"] == expected["state"]
        else:
            assert status == 1
            assert {k: got["error"].get(k) for k in ("code", "line")} == \
                {k: expected["error"][k] for k in ("code", "line")}
            assert got["error"].get("seq") == expected["error"].get("seq")
        assert err == ""

    def test_reduce_does_not_touch_the_file(self, corpus, tmp_path, capsys):
        """Reducing a file with a torn tail leaves every byte in place (readers never repair)."""
        data = (corpus / "fixtures" / "torn-tail.jsonl").read_bytes()
        path = tmp_path / "torn.jsonl"
        path.write_bytes(data)
        status, _, _ = run_cli(capsys, ["reduce", str(path)])
        assert status == 0 and path.read_bytes() == data


class TestPlan:
    @pytest.mark.parametrize("entry", planner_manifest(), ids=lambda e: e["name"])
    def test_every_planner_fixture_through_the_cli(self, corpus, tmp_path, capsys, entry):
        """`plan FILE CURRENT.json` prints exactly the expected plan and exits 0."""
        spec, expected = _planner_case(entry["name"])
        current = tmp_path / "current.json"
        current.write_text(json.dumps(spec["current"]))
        status, out, _ = run_cli(capsys, ["plan", str(corpus / "fixtures" / spec["sessionFile"]), str(current)])
        assert status == 0 and json.loads(out) == expected

    def test_plan_of_a_corrupt_log(self, corpus, tmp_path, capsys):
        """A log that does not reduce gives the reducer's error object and exit 1."""
        spec, _ = _planner_case("start-run-step")
        current = tmp_path / "current.json"
        current.write_text(json.dumps(spec["current"]))
        status, out, _ = run_cli(capsys, ["plan", str(corpus / "fixtures" / "crlf.jsonl"), str(current)])
        assert status == 1 and json.loads(out) == {"ok": False, "error": {"code": "CRLF_NOT_ALLOWED", "line": 1}}

    def test_planner_bug_switch_applies(self, corpus, tmp_path, capsys):
        """AGENT_BUGS planner switches change `plan` output (here the upstream stale-calls defect)."""
        entry = next(e for e in planner_manifest() if e["name"] == "ours-stale-calls-same-run")
        spec = json.loads((corpus / "planner-fixtures" / entry["input"]).read_text())
        current = tmp_path / "current.json"
        current.write_text(json.dumps(spec["current"]))
        argv = ["plan", str(corpus / "fixtures" / spec["sessionFile"]), str(current)]
        _, good, _ = run_cli(capsys, argv)
        _, bad, _ = run_cli(capsys, argv, {"AGENT_BUGS": "stale-assistant-calls"})
        assert json.loads(good)["type"] == "finish"
        assert json.loads(bad)["type"] == "startTool"

    @pytest.mark.parametrize("content,field", [
        ("[]", "(top level)"),
        ('{"configurationDigest":"sha256:00","environmentIdentity":"e","tools":[]}', "configurationDigest"),
        ('{"configurationDigest":"sha256:' + "0" * 64 + '","environmentIdentity":"","tools":[]}',
         "environmentIdentity"),
        ('{"configurationDigest":"sha256:' + "0" * 64 + '","environmentIdentity":"e","tools":[{"name":"read"}]}',
         "tools[0]"),
        ("{nope", "not a JSON document"),
        ("[" * 100_000, "nested too deeply to read"),  # json's C decoder recurses: no RecursionError traceback
    ])
    def test_bad_current_is_a_usage_error(self, corpus, tmp_path, capsys, content, field):
        """A malformed CurrentConfiguration is one stderr line naming the field, exit 2."""
        current = tmp_path / "current.json"
        current.write_text(content)
        status, out, err = run_cli(capsys, ["plan", str(corpus / "fixtures" / "run-accepted.jsonl"), str(current)])
        assert status == 2 and out == ""
        assert err.count("\n") == 1 and field in err


class TestUsageErrors:
    @pytest.mark.parametrize("argv", [
        [], ["bogus"], ["reduce"], ["reduce", "a", "b"], ["plan", "x"], ["run", "p"],
        ["resume", "f", "--max-steps", "0"], ["resume", "f", "--request-timeout", "-1"],
    ])
    def test_bad_arguments(self, capsys, argv):
        """Bad arguments give one stderr line and exit 2."""
        status, out, err = run_cli(capsys, argv)
        assert status == 2 and out == ""
        assert err.count("\n") == 1 and err.startswith("agent: ")

    @pytest.mark.parametrize("command", ["resume", "abort", "compact"])
    def test_a_refused_command_line_leaves_a_torn_tail_in_place(self, corpus, tmp_path, capsys, command):
        """Flags are checked before the store opens the session, whose open would truncate a torn tail: a command
        refused for its input changes no byte of the file."""
        data = (corpus / "fixtures" / "torn-tail.jsonl").read_bytes()
        path = tmp_path / "torn.jsonl"
        path.write_bytes(data)
        status, out, err = run_cli(capsys, [command, str(path), "--workspace", str(tmp_path), "--replay", "bogus"])
        assert status == 2 and out == "" and err.count("\n") == 1 and "--replay" in err
        assert path.read_bytes() == data

    @pytest.mark.parametrize("command", ["reduce", "resume", "abort", "compact"])
    def test_missing_file_and_directory(self, tmp_path, capsys, command):
        """A missing path or a directory is one stderr line and exit 2."""
        for path, text in ((tmp_path / "absent.jsonl", "no such file"), (tmp_path, "is a directory")):
            status, out, err = run_cli(capsys, [command, str(path)])
            assert status == 2 and out == "" and text in err and err.count("\n") == 1

    def test_unknown_bug_switch(self, corpus, tmp_path, capsys):
        """An unknown AGENT_BUGS name is a usage error naming it."""
        current = tmp_path / "current.json"
        current.write_text(json.dumps(_planner_case("start-run-step")[0]["current"]))
        status, _, err = run_cli(capsys, ["plan", str(corpus / "fixtures" / "run-accepted.jsonl"), str(current)],
                                 {"AGENT_BUGS": "no-such-bug"})
        assert status == 2 and "no-such-bug" in err


class TestHelpAndBugs:
    def test_help_documents_exit_codes(self, capsys):
        """--help lists every exit code."""
        with pytest.raises(SystemExit) as exc:
            cli.main(["--help"], environ={})
        out = capsys.readouterr().out
        assert exc.value.code == 0
        for code in (0, 2, 3, 4, 5, 6, 7, 70, 130):
            assert f"\n  {code} " in out

    def test_bugs_lists_every_switch(self, capsys):
        """`bugs` prints one line per known-bug switch (ten)."""
        status, out, _ = run_cli(capsys, ["bugs"])
        assert status == 0 and len(out.splitlines()) == 10 and "stale-assistant-calls" in out

    def test_describe_says_what_a_harness_needs(self, capsys, tmp_path):
        """`describe` prints the tools, the summary prompt, the switches and the CurrentConfiguration of its flags."""
        from agent.config import current_configuration, load_config

        status, out, _ = run_cli(capsys, ["describe", "--workspace", str(tmp_path), "--model", "m1",
                                          "--environment-identity", "here"])
        data = json.loads(out)
        expected = current_configuration(load_config(workspace=tmp_path, model="m1", environment_identity="here"))
        assert status == 0 and data["current"] == expected and data["protocol"] == 1
        assert [t["function"]["name"] for t in data["tools"]] == ["read", "write", "edit", "bash"]
        assert data["summarySystemPrompt"] and "stale-assistant-calls" in [b["name"] for b in data["bugs"]]

    def test_describe_refuses_a_bad_configuration(self, capsys, tmp_path):
        """A configuration `run` would refuse is a usage error for `describe` too."""
        status, _, err = run_cli(capsys, ["describe", "--workspace", str(tmp_path / "missing")])
        assert status == 2 and "workspace" in err


class TestRealProcess:
    def test_reduce_and_usage_error_in_a_subprocess(self, corpus, tmp_path):
        """The real entry point prints the same shapes and never a traceback."""
        ok = subprocess.run([sys.executable, "-m", "agent", "reduce", str(corpus / "fixtures" / "crlf.jsonl")],
                            capture_output=True, text=True, timeout=60)
        assert ok.returncode == 1
        assert json.loads(ok.stdout) == {"ok": False, "error": {"code": "CRLF_NOT_ALLOWED", "line": 1}}
        bad = subprocess.run([sys.executable, "-m", "agent", "reduce", str(tmp_path)],
                             capture_output=True, text=True, timeout=60)
        assert bad.returncode == 2 and bad.stdout == "" and bad.stderr.count("\n") == 1
        assert "Traceback" not in bad.stderr
