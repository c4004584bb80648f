"""The agent's built-in tools: ``read``, ``write``, ``edit`` (confined to one workspace) and ``bash``.

What it is for: the effects the model can ask for. Three things are kept apart on purpose:

- **definitions** (``definition(name)``): the ``{"type":"function","function":{name,description,parameters}}``
  elements sent in the request's ``tools`` array. Their canonical JSON is the ``definitionDigest`` (SPEC §8.4), so
  any change to a description or schema changes the configuration identity — deliberately.
- **declarations** (``declaration(name)``): replay policy and replay key (SPEC §8.6), outside every digest.
  ``read`` is the only ``safe`` tool: an exact built-in, side-effect-free reader.
- **execution** (``ToolRunner.run``): validate the arguments against the tool's parameter schema (a small stdlib
  validator), then act. A schema violation is an ``error`` result with a helpful message and **no effect**
  (SPEC §15.4: schema validation is part of executing the tool, the planner never sees schemas).

Invariants it protects:

- **Confinement.** Every path is resolved to its real path (symlinks followed) and must stay inside the workspace's
  real path; ``../``, absolute paths elsewhere and symlinks leading out are refused with an error result. The file
  is then opened by that resolved path. (A concurrent attacker swapping directories between check and use is out of
  scope: the workspace belongs to the agent.)
- **Regular files only, never blocking.** ``read``, ``write`` and ``edit`` refuse anything but a regular file (a
  FIFO, socket or device) with an error result: checked with ``lstat`` before opening, opened with
  ``O_NONBLOCK | O_NOFOLLOW`` and checked again with ``fstat``. A blocking open of a FIFO would hang the agent where
  SIGINT/SIGTERM cannot reach it (the interrupted open is retried), against its documented exit 130.
- **Bounded bash, not confined.** ``bash`` is *not* confined to the workspace (it starts there, and can touch
  whatever the agent's user can); it is bounded by time and by its process group only. ``bash -c`` runs in its
  **own process group but the agent's session** (``process_group=0``, not ``start_new_session``): a supervisor that
  kills the agent's session kills the command too, and the agent can kill exactly the command's group. The group is SIGKILLed on timeout, on ``abort()`` and
  when the command exits (background stragglers never outlive the call). Output is capped; the command's
  environment is the agent's plus ``AGENT_TOOL_CALL_ID`` and ``AGENT_TOOL_STARTED_ID`` (effect witnesses).
- **Sanitized text.** Every output is decoded as UTF-8 with replacement: results go into facts (SPEC §13.3 step 3).

Aborting: ``ToolRunner.abort()`` may be called from a signal handler (or another thread). It sets a sticky flag and
SIGKILLs the running command's process group (``running_pgid``); the interrupted ``select`` is retried by Python
(PEP 475), sees the pipe close, and ``run`` returns a result with ``aborted=True`` — which the loop discards, since
after ``abortRequested`` nothing live is written (§15.5). A ``run`` after ``abort()`` does nothing and returns an
aborted result, so a signal that lands just before a command starts is not lost.

What it does not do: decide whether a call may run (unknown tools and non-object arguments are the loop's
pre-execution rules, §15.4), write facts, or retry.
"""

from __future__ import annotations

import copy
import os
import selectors
import signal
import stat
import subprocess
import time
from dataclasses import dataclass

from agent.errors import AgentError

OUTPUT_CAP = 64 * 1024  # bytes of tool output kept for the model (and the log)
MAX_READ_BYTES = 8 * 1024 * 1024  # larger files are refused by read/edit: use bash to look at parts
DEFAULT_BASH_TIMEOUT = 120.0
MAX_BASH_TIMEOUT = 600
# After the command itself exited and its group was killed, output still buffered in the pipe is drained for at
# most this long: a process that escaped the group (setsid) could otherwise hold the pipe open until the timeout.
DRAIN_GRACE = 1.0

TOOL_NAMES = ("read", "write", "edit", "bash")  # canonical order of the request's tools array

_DEFINITIONS: dict[str, dict] = {
    "read": {
        "type": "function",
        "function": {
            "name": "read",
            "description": (
                "Read a UTF-8 text file in the workspace. The path is relative to the workspace root; paths that "
                "resolve outside the workspace are refused. Optional offset (1-based first line) and limit (number "
                "of lines) select a range of lines. Output is capped at 64 KiB."
            ),
            "parameters": {
                "type": "object",
                "properties": {
                    "path": {"type": "string", "minLength": 1, "description": "File path inside the workspace."},
                    "offset": {"type": "integer", "minimum": 1, "description": "First line to return (1-based)."},
                    "limit": {"type": "integer", "minimum": 1, "description": "Maximum number of lines to return."},
                },
                "required": ["path"],
                "additionalProperties": False,
            },
        },
    },
    "write": {
        "type": "function",
        "function": {
            "name": "write",
            "description": (
                "Create or overwrite a file in the workspace with the given content (UTF-8). Missing parent "
                "directories are created. Paths that resolve outside the workspace are refused."
            ),
            "parameters": {
                "type": "object",
                "properties": {
                    "path": {"type": "string", "minLength": 1, "description": "File path inside the workspace."},
                    "content": {"type": "string", "description": "The complete new content of the file."},
                },
                "required": ["path", "content"],
                "additionalProperties": False,
            },
        },
    },
    "edit": {
        "type": "function",
        "function": {
            "name": "edit",
            "description": (
                "Replace an exact text fragment in a UTF-8 file in the workspace. old_string must match the file "
                "exactly (including whitespace and indentation) and exactly once, unless replace_all is true, "
                "which replaces every occurrence."
            ),
            "parameters": {
                "type": "object",
                "properties": {
                    "path": {"type": "string", "minLength": 1, "description": "File path inside the workspace."},
                    "old_string": {"type": "string", "minLength": 1, "description": "Exact text to replace."},
                    "new_string": {"type": "string", "description": "Replacement text."},
                    "replace_all": {"type": "boolean", "description": "Replace every occurrence (default false)."},
                },
                "required": ["path", "old_string", "new_string"],
                "additionalProperties": False,
            },
        },
    },
    "bash": {
        "type": "function",
        "function": {
            "name": "bash",
            "description": (
                "Run a command with bash -c in the workspace directory (non-interactive, empty stdin). Returns the "
                "combined stdout and stderr, capped at 64 KiB, and the exit status. The command and everything it "
                "started are killed after timeout seconds (default 120, at most 600); background processes are "
                "killed when the command exits."
            ),
            "parameters": {
                "type": "object",
                "properties": {
                    "command": {"type": "string", "minLength": 1, "description": "The bash command line."},
                    "timeout": {"type": "integer", "minimum": 1, "maximum": MAX_BASH_TIMEOUT,
                                "description": "Seconds before the command is killed."},
                },
                "required": ["command"],
                "additionalProperties": False,
            },
        },
    },
}

# SPEC §8.6. A replayKey names the exact implementation and the semantics of its effect: change it whenever either
# changes (for read: what it returns for the same arguments and file).
_DECLARATIONS: dict[str, dict] = {
    "read": {"replay": "safe", "replayKey": "builtin:read:v1"},
    "write": {"replay": "never", "replayKey": "builtin:write:v1"},
    "edit": {"replay": "never", "replayKey": "builtin:edit:v1"},
    "bash": {"replay": "never", "replayKey": "builtin:bash:v1"},
}


class WorkspaceError(AgentError):
    """The workspace given to the tools is not an existing directory."""


@dataclass(frozen=True)
class ToolResult:
    """The outcome of one tool call: ``content`` for the tool message, ``type`` "success" or "error".

    ``aborted`` is True when ``ToolRunner.abort()`` stopped (or pre-empted) the call; such a result is never
    committed (SPEC §15.5).
    """

    content: str
    type: str
    aborted: bool = False

    def as_outcome(self) -> dict:
        """The tool-result outcome value of ``agent.session.materialize`` (built-in tools report no usage)."""
        return {"content": self.content, "type": self.type, "usage": None}


def definition(name: str) -> dict:
    """A fresh copy of tool ``name``'s request element. Raises KeyError for an unknown tool."""
    return copy.deepcopy(_DEFINITIONS[name])


def request_elements(names) -> list[dict]:
    """The request's ``tools`` array for ``names``: the definitions themselves, shared, not copies. A request body is
    serialised and never changed; a deep copy of four definitions for every model request cost ~60 µs, on the path
    of every step. KeyError for an unknown tool."""
    return [_DEFINITIONS[name] for name in names]


def declaration(name: str) -> dict:
    """A fresh copy of tool ``name``'s built-in declaration ``{"replay", "replayKey"}``. KeyError if unknown."""
    return dict(_DECLARATIONS[name])


# --- argument validation (the subset of JSON Schema our definitions use) -------------------------------------------


def _check(schema: dict, value: object, where: str) -> str | None:
    kind = schema.get("type")
    if kind == "object":
        if not isinstance(value, dict):
            return f"{where} must be a JSON object"
        for name in schema.get("required", ()):
            if name not in value:
                return f"missing required property {name!r}"
        properties = schema.get("properties", {})
        if schema.get("additionalProperties") is False:
            for name in value:
                if name not in properties:
                    return f"unexpected property {name!r}"
        for name, sub in properties.items():
            if name in value:
                problem = _check(sub, value[name], f"property {name!r}")
                if problem:
                    return problem
        return None
    if kind == "string":
        if not isinstance(value, str):
            return f"{where} must be a string"
        if len(value) < schema.get("minLength", 0):
            return f"{where} must not be empty"
        return None
    if kind == "integer":
        # bool is an int in Python but not in JSON; 5.0 is not an integer in our strict reading either.
        if isinstance(value, bool) or not isinstance(value, int):
            return f"{where} must be an integer"
        if "minimum" in schema and value < schema["minimum"]:
            return f"{where} must be >= {schema['minimum']}"
        if "maximum" in schema and value > schema["maximum"]:
            return f"{where} must be <= {schema['maximum']}"
        return None
    if kind == "boolean":
        return None if isinstance(value, bool) else f"{where} must be true or false"
    raise ValueError(f"unsupported schema type {kind!r}")  # our own definitions are wrong: a defect


def _signature(name: str) -> str:
    parameters = _DEFINITIONS[name]["function"]["parameters"]
    required = parameters.get("required", ())
    parts = [f"{key}{'' if key in required else '?'}: {sub['type']}" for key, sub in parameters["properties"].items()]
    return f"{name}({', '.join(parts)})"


def validate_arguments(name: str, arguments: object) -> str | None:
    """None when ``arguments`` satisfy tool ``name``'s parameter schema, else a helpful one-line message."""
    problem = _check(_DEFINITIONS[name]["function"]["parameters"], arguments, "arguments")
    if problem is None:
        return None
    return f"Error: invalid arguments for tool {name!r}: {problem}. Expected {_signature(name)}. " \
           "The tool was not executed."


# --- execution -------------------------------------------------------------------------------------------------------


class _Refused(Exception):
    """A path or file the tool will not touch; the message becomes an error result."""


def _error(message: str) -> ToolResult:
    return ToolResult(message, "error")


def _cap_note(total: int) -> str:
    return f"\n[output truncated: {total} bytes, the first {OUTPUT_CAP} shown]"


class ToolRunner:
    """Executes tool calls in one workspace; see the module docstring for confinement and aborting."""

    def __init__(self, workspace: str | os.PathLike, *, environ: dict | None = None,
                 bash_timeout: float = DEFAULT_BASH_TIMEOUT):
        root = os.path.realpath(os.fspath(workspace))
        if not os.path.isdir(root):
            raise WorkspaceError(f"workspace {os.fspath(workspace)!r} is not a directory")
        self.root = root
        self._prefix = root if root.endswith(os.sep) else root + os.sep
        self._environ = environ
        self.bash_timeout = bash_timeout
        self._aborted = False
        self._pgid: int | None = None

    # -- abort ----------------------------------------------------------------------------------------------------

    @property
    def running_pgid(self) -> int | None:
        """The process group of the running bash command, or None."""
        return self._pgid

    @property
    def aborted(self) -> bool:
        """True once ``abort()`` was called."""
        return self._aborted

    def abort(self) -> None:
        """Kill the running command's process group and refuse later calls. Safe in a signal handler."""
        self._aborted = True
        self._kill_group()

    def _kill_group(self) -> None:
        pgid = self._pgid
        if pgid is not None:
            try:
                os.killpg(pgid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):  # the group is already gone
                pass

    # -- dispatch -------------------------------------------------------------------------------------------------

    def run(self, name: str, arguments: object, *, call_id: str, started_id: str) -> ToolResult:
        """Validate ``arguments`` against tool ``name``'s schema, then execute it (no effect when invalid)."""
        if self._aborted:
            return ToolResult("Error: aborted before the tool started.", "error", aborted=True)
        if name not in _DEFINITIONS:
            return _error(f"Error: unknown tool {name!r}; the tool was not executed.")
        problem = validate_arguments(name, arguments)
        if problem:
            return _error(problem)
        assert isinstance(arguments, dict)
        try:
            if name == "read":
                return self._read(arguments["path"], arguments.get("offset"), arguments.get("limit"))
            if name == "write":
                return self._write(arguments["path"], arguments["content"])
            if name == "edit":
                return self._edit(arguments["path"], arguments["old_string"], arguments["new_string"],
                                  arguments.get("replace_all", False))
            timeout = arguments.get("timeout", self.bash_timeout)
            return self._bash(arguments["command"], float(timeout), call_id, started_id)
        except _Refused as exc:
            return _error(f"Error: {exc}")
        except OSError as exc:
            return _error(f"Error: {name} failed: {exc.strerror or exc}")

    # -- paths ----------------------------------------------------------------------------------------------------

    def _resolve(self, path: str) -> str:
        if "\x00" in path:
            raise _Refused("the path contains a NUL character")
        candidate = path if os.path.isabs(path) else os.path.join(self.root, path)
        # realpath follows every symlink, also dangling ones, so a link pointing out is caught even for a new file.
        real = os.path.realpath(candidate)
        if real != self.root and not real.startswith(self._prefix):
            raise _Refused(f"path {path!r} resolves outside the workspace; only paths inside {self.root} are allowed")
        return real

    def _show(self, real: str) -> str:
        return os.path.relpath(real, self.root)

    @staticmethod
    def _refuse_special(info: os.stat_result, path: str) -> None:
        """Refuse anything but a regular file: a FIFO, socket or device could block or have effects on open/IO."""
        if stat.S_ISDIR(info.st_mode):
            raise _Refused(f"{path!r} is a directory, not a file (use bash with ls to list it)")
        if not stat.S_ISREG(info.st_mode):
            raise _Refused(f"{path!r} is not a regular file (a FIFO, socket or device); the tool was not executed")

    def _read_regular(self, real: str, path: str) -> bytes:
        try:
            # lstat before open: a special file is refused without being opened at all.
            self._refuse_special(os.lstat(real), path)
            # O_NONBLOCK: should the path become a FIFO after the lstat, opening it still cannot hang the agent;
            # O_NOFOLLOW: `real` is resolved, so a symlink here appeared after the check and is not followed.
            fd = os.open(real, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            raise _Refused(f"file {path!r} does not exist") from None
        except IsADirectoryError:
            raise _Refused(f"{path!r} is a directory, not a file (use bash with ls to list it)") from None
        try:
            info = os.fstat(fd)
            self._refuse_special(info, path)  # what was opened is what counts (the path may have been replaced)
            if info.st_size > MAX_READ_BYTES:
                raise _Refused(f"{path!r} is larger than {MAX_READ_BYTES} bytes; use bash (head, sed -n) for parts")
        except BaseException:
            os.close(fd)
            raise
        with open(fd, "rb") as handle:
            return handle.read(MAX_READ_BYTES + 1)

    def _write_regular(self, real: str, path: str, data: bytes) -> None:
        """Replace the content of the regular file ``real`` (created if absent) with ``data``; never blocks.

        A plain ``open(real, "wb")`` of a FIFO blocks until a reader appears, and a signal cannot end that wait
        (Python retries the interrupted open after running the handler, PEP 475): the agent would hang.
        """
        try:
            self._refuse_special(os.lstat(real), path)
        except FileNotFoundError:
            pass  # a new file
        # O_NONBLOCK: a FIFO that appeared after the lstat fails with ENXIO (no reader) or opens at once, and fstat
        # refuses it; no O_TRUNC: nothing is truncated before fstat says it is a regular file.
        fd = os.open(real, os.O_WRONLY | os.O_CREAT | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
        try:
            self._refuse_special(os.fstat(fd), path)
            os.ftruncate(fd, 0)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]  # a short write (a signal, a large content): keep writing
        finally:
            os.close(fd)

    # -- the tools ------------------------------------------------------------------------------------------------

    def _read(self, path: str, offset: int | None, limit: int | None) -> ToolResult:
        real = self._resolve(path)
        text = self._read_regular(real, path).decode("utf-8", errors="replace")
        if offset is not None or limit is not None:
            lines = text.splitlines(keepends=True)
            start = (offset or 1) - 1
            if start >= len(lines) and lines:
                return _error(f"Error: offset {offset} is past the end of {path!r} ({len(lines)} lines)")
            text = "".join(lines[start: start + limit if limit is not None else None])
        data = text.encode("utf-8")
        if len(data) > OUTPUT_CAP:
            text = data[:OUTPUT_CAP].decode("utf-8", errors="replace") + _cap_note(len(data)) + \
                " Use offset and limit to read the rest."
        return ToolResult(text, "success")

    def _write(self, path: str, content: str) -> ToolResult:
        real = self._resolve(path)
        if os.path.isdir(real):
            return _error(f"Error: {path!r} is a directory")
        os.makedirs(os.path.dirname(real), exist_ok=True)
        data = content.encode("utf-8", errors="replace")
        self._write_regular(real, path, data)
        return ToolResult(f"Wrote {len(data)} bytes to {self._show(real)}.", "success")

    def _edit(self, path: str, old: str, new: str, replace_all: bool) -> ToolResult:
        real = self._resolve(path)
        try:
            text = self._read_regular(real, path).decode("utf-8")
        except UnicodeDecodeError:
            # Editing a decoded-with-replacement copy would silently corrupt the file's other bytes.
            return _error(f"Error: {path!r} is not valid UTF-8 text; edit it with bash instead")
        if old == new:
            return _error("Error: old_string and new_string are identical; nothing to change")
        count = text.count(old)
        if count == 0:
            return _error(f"Error: old_string was not found in {path!r}; read the file and copy the exact text, "
                          "including whitespace and indentation")
        if count > 1 and not replace_all:
            return _error(f"Error: old_string occurs {count} times in {path!r}; include more surrounding context "
                          "to make it unique, or set replace_all to true")
        self._write_regular(real, path, text.replace(old, new).encode("utf-8"))
        return ToolResult(f"Replaced {count} occurrence{'s' if count > 1 else ''} in {self._show(real)}.", "success")

    def _bash(self, command: str, timeout: float, call_id: str, started_id: str) -> ToolResult:
        env = dict(os.environ if self._environ is None else self._environ)
        env["AGENT_TOOL_CALL_ID"] = call_id
        env["AGENT_TOOL_STARTED_ID"] = started_id
        deadline = time.monotonic() + timeout
        try:
            proc = subprocess.Popen(
                ["bash", "-c", command], cwd=self.root, env=env, stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                # Own process group, same session: killable as a group by us, and still inside the agent's
                # session so a supervisor killing that session kills the command too.
                process_group=0,
            )
        except OSError as exc:
            return _error(f"Error: could not start bash: {exc.strerror or exc}")
        self._pgid = proc.pid
        try:
            if self._aborted:  # abort() ran between Popen and the line above: it had no group to kill yet
                self._kill_group()
            output, total, timed_out = self._collect(proc, deadline)
        finally:
            # Kill before reaping: while the leader is an unreaped zombie its pid (= the group id) cannot be
            # reused, so this SIGKILL reaches only the command's stragglers. Then reap through Popen, the one
            # reaping path (a waitid behind Popen's back would make it report exit 0).
            self._kill_group()
            proc.wait()
            proc.stdout.close()
            self._pgid = None
        text = output[:OUTPUT_CAP].decode("utf-8", errors="replace")
        if total > OUTPUT_CAP:
            text += _cap_note(total)
        if self._aborted:
            return ToolResult(text + "\n[aborted: the command's process group was killed]", "error", aborted=True)
        if timed_out:
            return _error(text + f"\n[timed out after {timeout:g} s: the command's process group was killed]")
        status = proc.returncode
        if status < 0:
            try:
                signame = signal.Signals(-status).name
            except ValueError:
                signame = str(-status)
            return _error(text + f"\n[killed by signal {signame}]")
        return ToolResult(text + f"\n[exit status {status}]", "success" if status == 0 else "error")

    def _collect(self, proc: subprocess.Popen, deadline: float) -> tuple[bytes, int, bool]:
        """Read the command's output until it exited and the pipe closed; (kept bytes, total bytes, timed out)."""
        fd = proc.stdout.fileno()
        os.set_blocking(fd, False)
        kept = bytearray()
        total = 0
        try:
            # A pidfd becomes readable when the process exits, so one select waits for output and exit at once.
            pidfd = os.pidfd_open(proc.pid)
        except (AttributeError, OSError):
            pidfd = None
        selector = selectors.DefaultSelector()
        try:
            selector.register(fd, selectors.EVENT_READ, "out")
            if pidfd is not None:
                selector.register(pidfd, selectors.EVENT_READ, "exit")
            eof = exited = False
            drain_until: float | None = None  # set once the command exited: stragglers get DRAIN_GRACE, no more
            while not (eof and exited):
                if self._aborted:
                    return bytes(kept), total, False
                now = time.monotonic()
                if drain_until is not None and now >= drain_until:
                    break  # the command finished in time; a process that escaped its group keeps the pipe
                remaining = deadline - now
                if remaining <= 0:
                    return bytes(kept), total, True
                if drain_until is not None:
                    remaining = min(remaining, drain_until - now)
                # Without a pidfd, exit is polled: an unreaped exit (WNOWAIT) keeps Popen the only reaper.
                events = selector.select(remaining if pidfd is not None else min(remaining, 0.05))
                for key, _ in events:
                    if key.data == "exit":
                        selector.unregister(pidfd)
                        exited = True
                        continue
                    try:
                        chunk = os.read(fd, 65536)
                    except BlockingIOError:
                        continue
                    if not chunk:
                        selector.unregister(fd)
                        eof = True
                        continue
                    total += len(chunk)
                    if len(kept) < OUTPUT_CAP:
                        kept += chunk[: OUTPUT_CAP - len(kept)]
                    # Past the cap we keep reading and discarding, so the command never blocks on a full pipe.
                if pidfd is None and not exited:
                    exited = os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
                if exited and not eof and drain_until is None:
                    # The command is done; whatever still holds the pipe is a background straggler of its group.
                    self._kill_group()
                    drain_until = time.monotonic() + DRAIN_GRACE
            return bytes(kept), total, False
        finally:
            selector.close()
            if pidfd is not None:
                os.close(pidfd)
