"""chaos.probe's pure parts and its runner's command line: fact names, vocabularies, usage errors, network refusal."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap

import pytest

from chaos.faults import parse_fault
from chaos.probe import PROBE_FACTS, fact_name, vocabulary
from chaos.probe.run import parse


def run_probe(tmp_path, program: str, *runner_args: str, env=None) -> subprocess.CompletedProcess:
    """Run a small program under ``python -m chaos.probe.run`` without a supervisor."""
    script = tmp_path / "prog.py"
    script.write_text(textwrap.dedent(program))
    return subprocess.run([sys.executable, "-m", "chaos.probe.run", *runner_args, "--", str(script), "x", "y"],
                          capture_output=True, text=True, timeout=60, cwd=tmp_path,
                          env={**os.environ, "CHAOS_CONTROL": "", **(env or {})})


@pytest.mark.parametrize("text, name", [("status.json", "status_json"), ("/a/b/wf.db", "wf_db"),
                                        ("checkpoint_writes", "checkpoint_writes"), ("0001.json", "f_0001_json"),
                                        ("state/", "state")])
def test_fact_name_fits_the_grammar(text, name):
    """A file, table or point name becomes an identifier the fault grammar accepts."""
    assert fact_name(text) == name
    assert parse_fault(f"{name}@after-sync#1", (name,)).point.fact == name


def test_vocabulary_is_the_probe_words_then_the_targets_names():
    """A vocabulary lists the probe's words, then tables, files and points, without duplicates."""
    assert vocabulary(("writes", "commit"), ("status.json",), ("effected",)) == (
        *PROBE_FACTS, "writes", "status_json", "effected")


@pytest.mark.parametrize("argv, message", [([], "no program"), (["--state"], "needs a value"),
                                           (["--bogus", "--", "p.py"], "unknown option"), (["--", "-m"], "-m needs"),
                                           (["--reader", "[1]", "--inspect", "d", "--", "p.py"], "JSON list"),
                                           (["--sqlite", "db", "--", "p.py"], "need --inspect")])
def test_runner_usage_errors(argv, message):
    """Bad runner arguments raise one message naming the problem."""
    with pytest.raises(ValueError, match=message):
        parse(argv)


def test_runner_arguments_and_environment(monkeypatch):
    """State paths come from CHAOS_PROBE_STATE and --state, the inspection options are kept, and everything after
    '--' is the program."""
    monkeypatch.setenv("CHAOS_PROBE_STATE", "/s1")
    opts = parse(["--state", "/s2", "--session", "/db", "--inspect", "/i", "--case", "/c", "--copy", "s",
                  "--sqlite", "s/db", "--reader", '["r"]', "--only", "--", "p.py", "--state"])
    assert (opts.state, opts.session, opts.program) == (["/s1", "/s2"], "/db", ["p.py", "--state"])
    assert (opts.inspect, opts.case, opts.copy, opts.sqlite, opts.reader, opts.only) == (
        "/i", "/c", ["s"], ["s/db"], ["r"], True)
    with pytest.raises(ValueError, match="--inspect needs --case"):
        parse(["--inspect", "/i", "--", "p.py"])


def test_runner_bad_input_is_one_line_and_exit_2(tmp_path):
    """A missing program file is one line on stderr (plus usage only for usage errors) and exit 2."""
    proc = subprocess.run([sys.executable, "-m", "chaos.probe.run", "--", str(tmp_path / "nope.py")],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [f"chaos.probe.run: no such program file: {tmp_path / 'nope.py'}"]


def test_program_runs_as_main_with_its_argv(tmp_path):
    """The program runs as __main__ with its own argv, path and exit status."""
    proc = run_probe(tmp_path, """
        import sys, os
        print(__name__, sys.argv[1:], sys.path[0] == os.path.dirname(os.path.abspath(__file__)))
        sys.exit(5)
    """)
    assert (proc.returncode, proc.stdout.strip()) == (5, "__main__ ['x', 'y'] True")


def test_non_loopback_connections_are_refused_and_loopback_works(tmp_path):
    """A connection to a non-loopback address fails with ENETUNREACH and one stderr line; loopback connects."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    port = listener.getsockname()[1]
    try:
        proc = run_probe(tmp_path, f"""
            import errno, socket
            try:
                socket.create_connection(("192.0.2.1", 443), timeout=5)
            except OSError as e:
                print("refused", e.errno == errno.ENETUNREACH)
            s = socket.socket(socket.AF_INET)
            print("connect_ex", s.connect_ex(("10.1.2.3", 80)) == errno.ENETUNREACH)
            socket.create_connection(("127.0.0.1", {port}), timeout=5).close()
            print("loopback ok")
        """)
    finally:
        listener.close()
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n")[:3] == ["refused True", "connect_ex True", "loopback ok"]
    assert "chaos probe: refused a network connection to 192.0.2.1:443 (not loopback)" in proc.stderr
    assert "chaos probe: refused a network connection to 10.1.2.3:80 (not loopback)" in proc.stderr


def test_without_a_supervisor_the_probe_changes_nothing(tmp_path):
    """Without CHAOS_CONTROL the wrapped calls behave as the originals and point() is a no-op."""
    proc = run_probe(tmp_path, """
        import os, sqlite3
        from chaos.probe import point
        conn = sqlite3.connect("db.sqlite")
        conn.execute("CREATE TABLE t (x)")
        with conn:
            conn.execute("INSERT INTO t VALUES (1)")
        point("here")
        os.makedirs("state")
        with open("state/f.txt", "w") as f:
            f.write("hello")
            os.fsync(f.fileno())
        os.replace("state/f.txt", "state/g.txt")
        print(conn.execute("SELECT x FROM t").fetchall(), open("state/g.txt").read())
    """, "--state", str(tmp_path / "state"))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[(1,)] hello"


def test_probe_imports_only_the_standard_library():
    """Importing the probe and its runner loads no third-party package and no other chaos module."""
    code = ("import sys, chaos.probe, chaos.probe.run, chaos.probe.inspect; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('chaos', 'agent', 'pydantic', 'psutil', 'click', 'rich', 'jinja2')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True).stdout
    assert out.strip() == "['chaos', 'chaos.probe', 'chaos.probe.inspect', 'chaos.probe.run']"
