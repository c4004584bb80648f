"""Tests of agent.tools: definitions, declarations, schema validation, confinement, and real bash processes."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from agent.tools import (
    OUTPUT_CAP,
    TOOL_NAMES,
    ToolResult,
    ToolRunner,
    WorkspaceError,
    declaration,
    definition,
    validate_arguments,
)
from tests.integration import gone, until


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    """A workspace directory with a sibling ``outside`` directory holding a secret."""
    (tmp_path / "ws").mkdir()
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret.txt").write_text("top secret\n")
    return tmp_path / "ws"


@pytest.fixture
def runner(ws: Path) -> ToolRunner:
    return ToolRunner(ws, environ=dict(os.environ, KILLPOINT_TEST_VAR="inherited"))


def run(runner: ToolRunner, name: str, **arguments) -> ToolResult:
    return runner.run(name, arguments, call_id="call_1", started_id="018f0000-0000-7000-8000-000000000009")


def wait_gone(pid: int) -> bool:
    return until(lambda: gone(pid), 2.0)


class TestDefinitionsAndDeclarations:
    def test_every_tool_has_a_function_element(self):
        """Each built-in tool has a {type:function, function:{name, description, parameters}} element."""
        assert TOOL_NAMES == ("read", "write", "edit", "bash")
        for name in TOOL_NAMES:
            element = definition(name)
            assert element["type"] == "function"
            assert set(element["function"]) == {"name", "description", "parameters"}
            assert element["function"]["name"] == name
            assert element["function"]["parameters"]["type"] == "object"

    def test_definition_is_a_fresh_copy(self):
        """Mutating a returned definition does not change the next one."""
        definition("read")["function"]["parameters"]["properties"].clear()
        assert "path" in definition("read")["function"]["parameters"]["properties"]

    def test_declarations_follow_spec_8_6(self):
        """read is safe with builtin:read:v1; write, edit and bash are never with their own keys."""
        assert [declaration(n) for n in TOOL_NAMES] == [
            {"replay": "safe", "replayKey": "builtin:read:v1"},
            {"replay": "never", "replayKey": "builtin:write:v1"},
            {"replay": "never", "replayKey": "builtin:edit:v1"},
            {"replay": "never", "replayKey": "builtin:bash:v1"},
        ]

    def test_declarations_are_not_in_definitions(self):
        """Replay declarations stay out of the model-facing definition."""
        for name in TOOL_NAMES:
            assert "replay" not in str(definition(name))


class TestValidation:
    @pytest.mark.parametrize(
        "name, arguments, fragment",
        [
            ("read", {}, "missing required property 'path'"),
            ("read", {"path": 3}, "property 'path' must be a string"),
            ("read", {"path": ""}, "property 'path' must not be empty"),
            ("read", {"path": "a", "offset": 0}, "property 'offset' must be >= 1"),
            ("read", {"path": "a", "limit": True}, "property 'limit' must be an integer"),
            ("read", {"path": "a", "limit": 2.0}, "property 'limit' must be an integer"),
            ("read", {"path": "a", "mode": "x"}, "unexpected property 'mode'"),
            ("write", {"path": "a"}, "missing required property 'content'"),
            ("edit", {"path": "a", "old_string": "x", "new_string": "y", "replace_all": "yes"},
             "property 'replace_all' must be true or false"),
            ("bash", {"command": "ls", "timeout": 601}, "property 'timeout' must be <= 600"),
            ("bash", [], "arguments must be a JSON object"),
        ],
    )
    def test_violations_have_helpful_messages(self, name, arguments, fragment):
        """Each schema violation yields a message naming the problem and the expected signature."""
        message = validate_arguments(name, arguments)
        assert message is not None and fragment in message
        assert f"Expected {name}(" in message and "not executed" in message

    def test_valid_arguments_pass(self):
        """Arguments matching the schema yield None."""
        assert validate_arguments("read", {"path": "a", "offset": 2, "limit": 5}) is None
        assert validate_arguments("bash", {"command": "ls", "timeout": 600}) is None

    def test_invalid_arguments_have_no_effect(self, runner, ws):
        """A write with a schema violation is an error result and creates no file."""
        result = runner.run("write", {"path": "new.txt", "content": "x", "mode": "w"}, call_id="c", started_id="s")
        assert result.type == "error" and "unexpected property 'mode'" in result.content
        assert not (ws / "new.txt").exists()

    def test_bash_schema_violation_runs_nothing(self, runner, ws):
        """A bash call with an out-of-range timeout runs no command."""
        result = run(runner, "bash", command="touch ran", timeout=0)
        assert result.type == "error" and not (ws / "ran").exists()

    def test_unknown_tool_is_an_error_result(self, runner):
        """Running a name that is no built-in tool is an error result."""
        assert run(runner, "rm", path="x").type == "error"


class TestRead:
    def test_reads_a_file(self, runner, ws):
        """read returns the file's text."""
        (ws / "a.txt").write_text("hello\nworld\n")
        assert run(runner, "read", path="a.txt") == ToolResult("hello\nworld\n", "success")

    def test_offset_and_limit_select_lines(self, runner, ws):
        """offset (1-based) and limit select a range of lines."""
        (ws / "a.txt").write_text("".join(f"line{i}\n" for i in range(1, 11)))
        assert run(runner, "read", path="a.txt", offset=3, limit=2).content == "line3\nline4\n"
        assert run(runner, "read", path="a.txt", offset=10).content == "line10\n"

    def test_offset_past_end_is_an_error(self, runner, ws):
        """An offset after the last line is an error naming the line count."""
        (ws / "a.txt").write_text("one\n")
        result = run(runner, "read", path="a.txt", offset=5)
        assert result.type == "error" and "1 lines" in result.content

    def test_missing_file_and_directory_are_errors(self, runner, ws):
        """A missing path or a directory is an error result."""
        (ws / "d").mkdir()
        assert "does not exist" in run(runner, "read", path="nope.txt").content
        assert "is a directory" in run(runner, "read", path="d").content

    def test_fifo_is_refused_without_hanging(self, runner, ws):
        """A FIFO is refused at once instead of blocking the agent."""
        os.mkfifo(ws / "pipe")
        result = run(runner, "read", path="pipe")
        assert result.type == "error" and "not a regular file" in result.content

    def test_invalid_utf8_is_replaced(self, runner, ws):
        """Bytes that are not UTF-8 are decoded with replacement characters."""
        (ws / "b.bin").write_bytes(b"a\xffb")
        assert run(runner, "read", path="b.bin").content == "a\ufffdb"

    def test_output_is_capped(self, runner, ws):
        """A file larger than the cap is cut to OUTPUT_CAP bytes with a note."""
        (ws / "big.txt").write_text("x" * (OUTPUT_CAP + 5000))
        result = run(runner, "read", path="big.txt")
        assert result.type == "success"
        assert result.content.startswith("x" * OUTPUT_CAP + "\n[output truncated")
        assert str(OUTPUT_CAP + 5000) in result.content

    def test_absolute_path_inside_is_allowed(self, runner, ws):
        """An absolute path inside the workspace is read normally."""
        (ws / "a.txt").write_text("in")
        assert run(runner, "read", path=str(ws / "a.txt")).content == "in"


class TestWrite:
    def test_writes_and_creates_parents(self, runner, ws):
        """write creates missing parent directories and the file with the exact content."""
        result = run(runner, "write", path="sub/dir/f.txt", content="é\n")
        assert result == ToolResult("Wrote 3 bytes to sub/dir/f.txt.", "success")
        assert (ws / "sub/dir/f.txt").read_text() == "é\n"

    def test_overwrites(self, runner, ws):
        """write replaces an existing file's content."""
        (ws / "f.txt").write_text("old content")
        run(runner, "write", path="f.txt", content="new")
        assert (ws / "f.txt").read_text() == "new"

    def test_directory_target_is_an_error(self, runner, ws):
        """Writing to a directory path is an error result."""
        (ws / "d").mkdir()
        assert run(runner, "write", path="d", content="x").type == "error"


class TestEdit:
    def test_replaces_unique_fragment(self, runner, ws):
        """edit replaces a fragment that occurs exactly once."""
        (ws / "f.py").write_text("a = 1\nb = 2\n")
        assert run(runner, "edit", path="f.py", old_string="b = 2", new_string="b = 3").type == "success"
        assert (ws / "f.py").read_text() == "a = 1\nb = 3\n"

    def test_ambiguous_fragment_is_refused(self, runner, ws):
        """A fragment occurring twice is an error without replace_all, and the file is unchanged."""
        (ws / "f.txt").write_text("x x")
        result = run(runner, "edit", path="f.txt", old_string="x", new_string="y")
        assert result.type == "error" and "occurs 2 times" in result.content
        assert (ws / "f.txt").read_text() == "x x"

    def test_replace_all(self, runner, ws):
        """replace_all replaces every occurrence and reports the count."""
        (ws / "f.txt").write_text("x x x")
        assert run(runner, "edit", path="f.txt", old_string="x", new_string="y", replace_all=True).content == \
            "Replaced 3 occurrences in f.txt."
        assert (ws / "f.txt").read_text() == "y y y"

    def test_missing_fragment_is_an_error(self, runner, ws):
        """A fragment that does not occur is an error telling the model to copy the exact text."""
        (ws / "f.txt").write_text("abc")
        result = run(runner, "edit", path="f.txt", old_string="zzz", new_string="y")
        assert result.type == "error" and "not found" in result.content

    def test_identical_strings_are_an_error(self, runner, ws):
        """old_string equal to new_string is an error (nothing to change)."""
        (ws / "f.txt").write_text("abc")
        assert run(runner, "edit", path="f.txt", old_string="a", new_string="a").type == "error"

    def test_non_utf8_file_is_not_edited(self, runner, ws):
        """A file that is not UTF-8 is refused rather than corrupted."""
        (ws / "f.bin").write_bytes(b"a\xffb")
        assert run(runner, "edit", path="f.bin", old_string="a", new_string="c").type == "error"
        assert (ws / "f.bin").read_bytes() == b"a\xffb"


class TestConfinement:
    @pytest.mark.parametrize("tool", ["read", "write", "edit"])
    def test_dotdot_is_refused(self, runner, ws, tool):
        """A ../ path leading out of the workspace is refused by every file tool."""
        arguments = {"read": {}, "write": {"content": "pwned"}, "edit": {"old_string": "top", "new_string": "x"}}
        result = runner.run(tool, {"path": "../outside/secret.txt", **arguments[tool]}, call_id="c", started_id="s")
        assert result.type == "error" and "outside the workspace" in result.content
        assert (ws.parent / "outside" / "secret.txt").read_text() == "top secret\n"

    def test_absolute_path_outside_is_refused(self, runner, ws):
        """An absolute path outside the workspace is refused."""
        result = run(runner, "read", path=str(ws.parent / "outside" / "secret.txt"))
        assert result.type == "error" and "outside the workspace" in result.content
        assert run(runner, "write", path="/etc/killpoint-test", content="x").type == "error"
        assert not Path("/etc/killpoint-test").exists()

    def test_symlink_file_escape_is_refused(self, runner, ws):
        """A symlink inside the workspace pointing to a file outside is refused for read and write."""
        (ws / "link").symlink_to(ws.parent / "outside" / "secret.txt")
        assert "outside the workspace" in run(runner, "read", path="link").content
        assert run(runner, "write", path="link", content="pwned").type == "error"
        assert (ws.parent / "outside" / "secret.txt").read_text() == "top secret\n"

    def test_symlink_directory_escape_is_refused(self, runner, ws):
        """A path through a symlinked directory leading outside is refused, also for a new file."""
        (ws / "dir").symlink_to(ws.parent / "outside")
        assert run(runner, "write", path="dir/new.txt", content="x").type == "error"
        assert not (ws.parent / "outside" / "new.txt").exists()

    def test_dangling_symlink_out_is_refused(self, runner, ws):
        """A dangling symlink whose target lies outside cannot be used to create that target."""
        (ws / "dangling").symlink_to(ws.parent / "outside" / "created.txt")
        assert run(runner, "write", path="dangling", content="x").type == "error"
        assert not (ws.parent / "outside" / "created.txt").exists()

    def test_symlink_inside_is_followed(self, runner, ws):
        """A symlink that stays inside the workspace works."""
        (ws / "real.txt").write_text("inside")
        (ws / "alias").symlink_to(ws / "real.txt")
        assert run(runner, "read", path="alias").content == "inside"

    def test_workspace_itself_through_a_symlink(self, tmp_path, ws):
        """A workspace given through a symlink is confined to its real path."""
        (tmp_path / "wslink").symlink_to(ws)
        (ws / "a.txt").write_text("ok")
        linked = ToolRunner(tmp_path / "wslink")
        assert run(linked, "read", path="a.txt").content == "ok"
        assert run(linked, "read", path="../outside/secret.txt").type == "error"

    def test_missing_workspace_is_rejected(self, tmp_path):
        """A workspace that is not a directory raises WorkspaceError."""
        with pytest.raises(WorkspaceError):
            ToolRunner(tmp_path / "missing")


class TestBash:
    def test_runs_in_workspace_and_reports_exit_status(self, runner, ws):
        """bash runs in the workspace and reports output and exit status 0 as success."""
        result = run(runner, "bash", command="pwd; echo out; echo err >&2")
        assert result == ToolResult(f"{os.path.realpath(ws)}\nout\nerr\n\n[exit status 0]", "success")

    def test_nonzero_exit_is_an_error(self, runner):
        """A non-zero exit status is an error result naming the status."""
        result = run(runner, "bash", command="echo no; exit 3")
        assert result == ToolResult("no\n\n[exit status 3]", "error")

    def test_environment_carries_ids_and_agent_env(self, runner):
        """The command sees the agent's environment plus AGENT_TOOL_CALL_ID and AGENT_TOOL_STARTED_ID."""
        result = run(runner, "bash", command='echo "$AGENT_TOOL_CALL_ID $AGENT_TOOL_STARTED_ID $KILLPOINT_TEST_VAR"')
        assert result.content.startswith("call_1 018f0000-0000-7000-8000-000000000009 inherited\n")

    def test_own_process_group_in_agent_session(self, runner):
        """The command leads its own process group but stays in the agent's session."""
        result = run(runner, "bash", command="echo $$; cat /proc/$$/stat")
        pid_line, stat_line = result.content.splitlines()[:2]
        pgrp, session = stat_line.rsplit(")", 1)[1].split()[2:4]
        assert int(pgrp) == int(pid_line) != os.getpgrp()
        assert int(session) == os.getsid(0)

    def test_output_is_capped(self, runner):
        """Output beyond OUTPUT_CAP is discarded with a note giving the total size."""
        result = run(runner, "bash", command=f"head -c {OUTPUT_CAP * 3} /dev/zero | tr '\\0' a")
        assert result.content.startswith("a" * OUTPUT_CAP + "\n[output truncated")
        assert str(OUTPUT_CAP * 3) in result.content and result.type == "success"

    def test_invalid_utf8_output_is_replaced(self, runner):
        """Output bytes that are not UTF-8 are decoded with replacement characters."""
        assert run(runner, "bash", command="printf 'a\\377b'").content.startswith("a\ufffdb")

    def test_timeout_kills_the_whole_group(self, ws, tmp_path):
        """On timeout the command and its background children are SIGKILLed and the result says so."""
        runner = ToolRunner(ws, bash_timeout=0.5)
        pidfile = tmp_path / "bg.pid"
        start = time.monotonic()
        result = run(runner, "bash", command=f"sleep 30 & echo $! > {pidfile}; sleep 30")
        assert time.monotonic() - start < 10
        assert result.type == "error" and "timed out after 0.5 s" in result.content
        assert wait_gone(int(pidfile.read_text()))
        assert runner.running_pgid is None

    def test_background_stragglers_die_when_command_exits(self, runner, tmp_path):
        """A background process left behind by a finished command is killed; the call does not wait for it."""
        pidfile = tmp_path / "bg.pid"
        start = time.monotonic()
        result = run(runner, "bash", command=f"sleep 30 & echo $! > {pidfile}; echo done")
        assert time.monotonic() - start < 10
        assert result == ToolResult("done\n\n[exit status 0]", "success")
        assert wait_gone(int(pidfile.read_text()))

    def test_exit_polling_without_pidfd(self, runner, tmp_path, monkeypatch):
        """Without pidfd support, exit is polled (WNOWAIT): status, output and straggler cleanup still hold."""
        monkeypatch.delattr(os, "pidfd_open")
        pidfile = tmp_path / "bg.pid"
        result = run(runner, "bash", command=f"sleep 30 & echo $! > {pidfile}; echo done; exit 2")
        assert result == ToolResult("done\n\n[exit status 2]", "error")
        assert wait_gone(int(pidfile.read_text()))

    def test_command_that_closes_stdout_is_still_awaited(self, runner):
        """A command that closes its output early is awaited until it exits."""
        result = run(runner, "bash", command="exec >&- 2>&-; sleep 0.2; exit 4")
        assert result == ToolResult("\n[exit status 4]", "error")

    def test_abort_from_signal_handler_kills_running_group(self, runner, tmp_path):
        """abort() from a real signal handler kills the running command's group; later calls do nothing."""
        seen = []

        def handler(*_):
            seen.append(runner.running_pgid)
            runner.abort()

        previous = signal.signal(signal.SIGALRM, handler)
        try:
            signal.setitimer(signal.ITIMER_REAL, 0.3)
            start = time.monotonic()
            result = run(runner, "bash", command="sleep 30")
            elapsed = time.monotonic() - start
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
        assert result.aborted and result.type == "error" and elapsed < 10
        assert seen and seen[0] is not None and wait_gone(seen[0])
        marker = tmp_path / "ran"
        later = run(runner, "bash", command=f"touch {marker}")
        assert later.aborted and not marker.exists()


class TestSpecialFiles:
    """read, write and edit refuse FIFOs and sockets at once; a blocking open would hang the agent for good."""

    @staticmethod
    def run_guarded(runner: ToolRunner, fifo: Path, name: str, **arguments) -> ToolResult:
        """Run the tool in a thread; if it blocks on the FIFO, unblock it by opening the other end, then fail."""
        import threading

        out: list[ToolResult] = []
        thread = threading.Thread(target=lambda: out.append(run(runner, name, **arguments)), daemon=True)
        thread.start()
        thread.join(5.0)
        if thread.is_alive():
            # Open both ends non-blocking so the tool's blocked open returns and the thread ends.
            reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
            writer = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
            thread.join(5.0)
            os.close(writer)
            os.close(reader)
            pytest.fail(f"{name} blocked on the FIFO for 5 s")
        return out[0]

    @pytest.mark.parametrize("name, arguments", [
        ("write", {"content": "x"}),
        ("edit", {"old_string": "a", "new_string": "b"}),
        ("read", {}),
    ])
    def test_fifo_is_refused_at_once(self, runner, ws, name, arguments):
        """A FIFO with no reader or writer is refused at once with an error result, not opened blocking."""
        os.mkfifo(ws / "pipe")
        started = time.monotonic()
        result = self.run_guarded(runner, ws / "pipe", name, path="pipe", **arguments)
        assert result.type == "error" and "not a regular file" in result.content, result
        assert time.monotonic() - started < 2.0
        assert os.path.exists(ws / "pipe")  # the FIFO is left as it was

    def test_write_refuses_a_fifo_that_has_a_reader(self, runner, ws):
        """A FIFO that some process reads is refused too: nothing is written into it."""
        os.mkfifo(ws / "pipe")
        reader = os.open(ws / "pipe", os.O_RDONLY | os.O_NONBLOCK)
        try:
            result = self.run_guarded(runner, ws / "pipe", "write", path="pipe", content="payload")
            assert result.type == "error" and "not a regular file" in result.content
            assert os.read(reader, 100) == b""  # end of file: no writer ever held it, nothing was written
        finally:
            os.close(reader)

    def test_socket_is_refused(self, runner, ws):
        """A UNIX socket in the workspace is refused by every file tool."""
        import socket

        server = socket.socket(socket.AF_UNIX)
        server.bind(str(ws / "sock"))
        try:
            for name, arguments in (("write", {"content": "x"}), ("edit", {"old_string": "a", "new_string": "b"}),
                                    ("read", {})):
                result = run(runner, name, path="sock", **arguments)
                assert result.type == "error" and "not a regular file" in result.content, (name, result)
        finally:
            server.close()

    def test_write_into_a_regular_file_truncates(self, runner, ws):
        """The non-blocking open still replaces a longer existing content entirely."""
        (ws / "f.txt").write_text("a much longer old content")
        assert run(runner, "write", path="f.txt", content="new").type == "success"
        assert (ws / "f.txt").read_text() == "new"


def test_tool_result_outcome_matches_materialize():
    """ToolResult.as_outcome() gives exactly materialize.tool_result's value (no usage for built-in tools)."""
    from agent.session import materialize

    assert ToolResult("out", "success").as_outcome() == materialize.tool_result("out")
    assert ToolResult("bad", "error").as_outcome() == materialize.tool_result("bad", error=True)
