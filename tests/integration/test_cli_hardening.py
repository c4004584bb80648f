"""Bad input to ``chaos`` is one clear line and a non-zero exit, never a traceback (issue 13).

One test per input the issue names: deeply nested TOML in a scenario, a non-UTF-8 ``--target``/``--agent`` file,
``--out`` that is a file or cannot be created, a corrupt middle journal line and wrongly typed options on
``--resume``, ``--name`` leaving ``--out``, a second campaign on a running campaign's directory (real processes), and
an exception nobody handled (exit ``EXIT_INTERNAL``, its traceback saved to the file the line names). In process
through click's test runner where no real process is needed.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from chaos import cli
from chaos.campaign import CampaignOptions
from chaos.journal import JOURNAL, LOCK, write_campaign

REPO = Path(__file__).resolve().parents[2]
GREETING = REPO / "tests" / "integration" / "campaign" / "greeting.toml"


def invoke(*args: str):
    """``chaos ARGS`` in process; (exit code, stdout+stderr, exception other than SystemExit or None)."""
    result = CliRunner().invoke(cli.main, [str(a) for a in args])
    error = result.exception if not isinstance(result.exception, SystemExit) else None
    return result.exit_code, result.output, error


def one_line_error(args, code: int = 2) -> str:
    """Run ``chaos ARGS``; assert exit ``code``, no traceback and a single output line; return that line."""
    status, output, error = invoke(*args)
    assert error is None, f"{type(error).__name__}: {error}"
    assert status == code, output
    assert "Traceback" not in output
    lines = output.strip().splitlines()
    assert len(lines) == 1, output
    return lines[0]


def resumable(tmp_path: Path, options: dict | None = None, journal: bytes = b"") -> Path:
    """A campaign directory as a crashed campaign leaves it: campaign.json (with ``options``) and a journal."""
    directory = tmp_path / "c"
    stored = CampaignOptions(scenarios=[str(GREETING)], out=str(tmp_path), name="c",
                             cache=str(tmp_path / "cache")).to_json()
    write_campaign(directory, {"options": {**stored, **(options or {})}, "name": "c", "sessions": []})
    (directory / JOURNAL).write_bytes(journal)
    return directory


class TestScenarioInput:
    def test_deeply_nested_toml_is_one_line(self, tmp_path):
        """A scenario nesting arrays 1,000 levels deep is one `file:1: toml:` line, exit 2."""
        deep = tmp_path / "deep.toml"
        deep.write_text("name = 'deep'\nx = " + "[" * 1000 + "]" * 1000 + "\n")
        status, output, error = invoke("validate", deep)
        assert error is None and status == 2
        assert f"{deep}:1: toml: arrays or tables nested more than 32 levels deep" in output
        line = one_line_error(["run", deep])
        assert line.startswith(f"{deep}:1: toml:")

    def test_deeply_nested_inline_tables_are_one_line(self, tmp_path):
        """Inline tables nested 400 levels deep (tomllib's own recursion) are one line too."""
        deep = tmp_path / "deep.toml"
        deep.write_text("x = " + "{a = " * 400 + "1" + "}" * 400 + "\n")
        line = one_line_error(["run", deep])
        assert line == f"{deep}:1: toml: arrays or tables nested more than 32 levels deep"


class TestSecondsOptions:
    @pytest.mark.parametrize("args", [
        # A small scenario each: were the check gone, the command would run it and the test fail, not run the library.
        ["campaign", GREETING, "--case-timeout", "nan"], ["campaign", GREETING, "--case-timeout", "inf"],
        ["run", GREETING, "--case-timeout", "nan"], ["mutants", GREETING, "--case-timeout", "inf"],
        ["conformance", "--impl", "true", "--timeout", "nan"],
    ])
    def test_a_time_that_is_not_a_finite_number_is_refused_up_front(self, args):
        """nan and inf seconds are usage errors before anything runs: a case limit of nan would never fire, and a
        campaign.json holding one could never be resumed."""
        status, output, error = invoke(*args)
        assert error is None and status == 2, output
        assert "is not a finite number of seconds" in output and "Traceback" not in output


class TestOutputDirectories:
    @pytest.mark.parametrize("args", [["run", GREETING, "--reports", "{file}"],
                                      ["repro", "{bundle}", "--work", "{file}"]])
    def test_an_output_directory_that_is_a_file_is_one_line(self, tmp_path, args):
        """--reports or --work naming an existing file: one usage line, exit 2 (not an internal error mid-run)."""
        afile = tmp_path / "afile"
        afile.write_text("x")
        bundle = tmp_path / "bundle"
        if "{bundle}" in args:  # a real bundle: a failing case of the stale-calls bug, written by a campaign
            made = subprocess.run([sys.executable, "-m", "chaos", "campaign",
                                   str(REPO / "scenarios" / "read-then-answer.toml"), "--agent-bugs",
                                   "stale-assistant-calls", "--out", str(tmp_path / "r"), "--name", "c"],
                                  capture_output=True, text=True, cwd=tmp_path, timeout=300)
            assert made.returncode == 1, made.stdout + made.stderr
            bundle = next((tmp_path / "r" / "c" / "failures").iterdir())
        line = one_line_error([str(a).format(file=afile, bundle=bundle) for a in args])
        assert line.endswith(f"{afile}: exists and is not a directory"), line
        assert afile.read_text() == "x"

    @pytest.mark.parametrize("scenario", [GREETING, REPO / "tests" / "integration" / "frameworks" / "workflow.toml"])
    def test_a_refused_command_line_makes_no_reports_directory(self, tmp_path, scenario):
        """A ``chaos run`` whose --kill is refused (bundled agent or probe scenario) leaves no --reports behind."""
        reports = tmp_path / "reports"
        line = one_line_error(["run", scenario, "--kill", "bogus@@", "--reports", reports])
        assert line.startswith("--kill 'bogus@@':"), line
        assert not reports.exists()


class TestInputsThatAreNotFiles:
    @pytest.mark.parametrize("args", [["killpoints", "{fifo}"], ["run", "{fifo}"], ["show", "{fifo}"],
                                      ["run", GREETING, "--target", "{fifo}"], ["validate", "{fifo}"]])
    def test_a_fifo_is_refused_at_once(self, tmp_path, args):
        """A FIFO named as a scenario, a target or a log is refused in one line, exit 2: opening it to read would
        block until a writer came (the command hung)."""
        fifo = tmp_path / "f.toml"
        os.mkfifo(fifo)
        argv = [sys.executable, "-m", "chaos", *(str(a).format(fifo=fifo) for a in args)]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=tmp_path)
        assert done.returncode == 2, done.stdout + done.stderr
        assert "not a regular file" in done.stdout + done.stderr and "Traceback" not in done.stdout + done.stderr


class TestTargetInput:
    @pytest.mark.parametrize("flag", ["--target", "--agent"])
    def test_non_utf8_target_file_is_one_line(self, tmp_path, flag):
        """A target file that is not UTF-8 is one line naming the file and the byte, exit 2."""
        bad = tmp_path / "agent.toml"
        bad.write_bytes(b'name = "x"\ncommand = ["\xff\xfe"]\n')
        line = one_line_error(["campaign", str(GREETING), flag, bad, "--out", tmp_path / "out"])
        assert line == f"{bad}: not UTF-8 text (byte 23)"

    def test_non_utf8_target_file_on_run_is_one_line(self, tmp_path):
        """`chaos run --target` with a non-UTF-8 file is the same one line."""
        bad = tmp_path / "agent.toml"
        bad.write_bytes(b"\xff")
        assert one_line_error(["run", GREETING, "--target", bad]) == f"{bad}: not UTF-8 text (byte 0)"


class TestOutAndName:
    def test_out_that_is_a_file_is_one_line(self, tmp_path):
        """`--out FILE` is one line naming the directory it cannot create, exit 2, for a run and for --list."""
        afile = tmp_path / "afile"
        afile.write_text("x")
        line = one_line_error(["campaign", GREETING, "--out", afile, "--name", "n"])
        assert line == f"--out {str(afile)!r}: cannot create the directory {afile}/n: Not a directory"
        line = one_line_error(["campaign", GREETING, "--out", afile, "--list"])
        assert line == f"--out {str(afile)!r}: cannot create the directory {afile}/.cache: Not a directory"

    def test_out_that_cannot_be_created_is_one_line(self, tmp_path):
        """`--out` under a directory that refuses new entries is one line, exit 2."""
        locked = tmp_path / "ro"
        locked.mkdir()
        locked.chmod(0o500)
        try:
            if os.access(locked, os.W_OK):  # root ignores the mode bits: use a path that no one can create
                target = Path("/proc/killpoint-cannot-create")
            else:
                target = locked / "out"
            line = one_line_error(["campaign", GREETING, "--out", target, "--name", "n"])
            assert line.startswith(f"--out {str(target)!r}: cannot create the directory {target}")
        finally:
            locked.chmod(0o700)

    @pytest.mark.parametrize("name", ["../../x", "a/b", "..", ".", "/", "../"])
    def test_name_must_stay_inside_out(self, tmp_path, name):
        """A --name with a path separator, '.' or '..' is refused with one line; nothing is created."""
        out = tmp_path / "deep" / "out"
        line = one_line_error(["campaign", GREETING, "--out", out, "--name", name])
        assert line.startswith(f"--name {name!r}: must be a plain directory name inside --out")
        assert not (tmp_path / "x").exists() and not out.exists()

    def test_a_trailing_slash_still_names_a_directory_inside_out(self):
        """`--name shard-1/` (a shell's directory completion) is the directory shard-1 inside --out: accepted."""
        from chaos.campaign import name_problem

        assert name_problem("shard-1/") is None and name_problem("") is None

    def test_mutants_name_must_stay_inside_out(self, tmp_path):
        """`chaos mutants --name ../../x` is refused the same way."""
        out = tmp_path / "deep" / "out"
        line = one_line_error(["mutants", GREETING, "--out", out, "--name", "../../x"])
        assert line.startswith("--name '../../x': must be a plain directory name inside --out")
        assert not (tmp_path / "x").exists()


class TestResumeInput:
    def test_corrupt_middle_journal_line_is_one_line_with_the_repair(self, tmp_path):
        """A corrupt journal line in the middle is one line: its number and how to repair it, exit 2."""
        journal = b'{"id":"greeting::tx:1@after-sync"}\n{"id": "gr\n{"id":"greeting::tx:2@after-sync"}\n'
        directory = resumable(tmp_path, journal=journal)
        line = one_line_error(["campaign", "--resume", directory])
        path = directory / JOURNAL
        assert line.startswith(f"{path}:2: journal line 2 is not JSON")
        assert f"sed -i '2d' {path}" in line and f"truncate -s 35 {path}" in line

    def test_wrongly_typed_options_are_one_line_each(self, tmp_path):
        """Each wrongly typed option in campaign.json is its own line naming the field, exit 2."""
        directory = resumable(tmp_path, {"depth": "2", "workers": True, "scenarios": "x.toml"})
        status, output, error = invoke("campaign", "--resume", directory)
        assert error is None and status == 2 and "Traceback" not in output
        where = f"{directory / 'campaign.json'}: options"
        assert sorted(output.strip().splitlines()) == sorted([
            f"{where}.depth: expected an integer, got a string \"2\"",
            f"{where}.workers: expected an integer, got true",
            f"{where}.scenarios: expected a list of strings, got a string \"x.toml\"",
        ])

    @pytest.mark.parametrize("member, value, message", [
        ("plan", [], "plan: expected a JSON object, got a list of 0"),
        ("versions", "x", "versions: expected a JSON object of strings, got a string \"x\""),
        ("discovery", {"baselines": 1}, "discovery: expected a JSON object of JSON objects of integers, got"),
        ("plan", {"cases": "7"}, "plan.cases: expected an integer or null, got a string \"7\""),
        ("baselines", {"greeting": {"problems": 5}}, "baselines.greeting.problems: expected a list or null, got"),
    ])
    def test_a_member_out_of_shape_is_one_line_for_every_reader(self, tmp_path, member, value, message):
        """A campaign.json member (or a member of its plan or a baseline) of the wrong type: `report render` and
        `--resume` say so in one line, exit 2, and `report history` passes over that run."""
        directory = resumable(tmp_path)
        params = json.loads((directory / "campaign.json").read_text())
        write_campaign(directory, {**params, member: value})
        where = f"{directory / 'campaign.json'}: "
        for args in (["report", "render", directory], ["campaign", "--resume", directory]):
            line = one_line_error(args)
            assert line.startswith(where + message), line
        (directory / "result.json").write_text("{}")  # finished, as far as history can tell: passed over all the same
        assert one_line_error(["report", "history", tmp_path]).endswith("no campaign directory with a result here")

    def test_a_campaign_json_nested_too_deep_is_one_line(self, tmp_path):
        """campaign.json with a member nested deeper than the JSON parser recurses: one line, exit 2, not exit 70."""
        directory = resumable(tmp_path)
        path = directory / "campaign.json"
        path.write_text(path.read_text().rstrip().rstrip("}") + ', "x": ' + "[" * 100_000 + "]" * 100_000 + "}")
        for args in (["report", "render", directory], ["campaign", "--resume", directory]):
            assert one_line_error(args).startswith(f"{path}: cannot read campaign parameters: maximum recursion")

    @pytest.mark.parametrize("result", ["[1]", '{"x": 1}', '{"duration": "x", "shards": 5, "interrupted": "no"}'])
    @pytest.mark.parametrize("command", ["render", "merge"])
    def test_a_result_json_out_of_shape_is_rendered_past(self, tmp_path, result, command):
        """`report render` and `report merge` rebuild the result from the journal: a result.json out of shape is not
        an internal error."""
        directory = resumable(tmp_path)
        (directory / "result.json").write_text(result)
        out = directory if command == "render" else tmp_path / "merged"
        args = ["report", "render", directory] if command == "render" else ["report", "merge", directory, "--out", out]
        status, output, error = invoke(*args)
        assert error is None and status in (0, 4), output  # 4: merged, and incomplete (the journal ran nothing)
        assert json.loads((out / "summary.json").read_text())["campaign"] == "c"

    def test_options_that_are_not_an_object_are_one_line(self, tmp_path):
        """campaign.json whose options are a list is one line, exit 2."""
        directory = tmp_path / "c"
        write_campaign(directory, {"options": [1, 2]})
        line = one_line_error(["campaign", "--resume", directory])
        assert line == f"{directory / 'campaign.json'}: options: expected a JSON object, got a list of 2"

    @pytest.mark.parametrize("options, message", [
        ({"cache": "a\0b"}, "options: --cache 'a\\x00b': contains a NUL byte"),
        ({"target": {"kind": "probe"}}, "options.target.kind: expected one of contract"),
        ({"target": {"launch": {"rnu": ["x"]}}}, "options.target.launch: expected argv templates for some of run,"),
        ({"random_actions": ["kil"]}, "options: random_actions kil: expected some of kill,"),
    ])
    def test_values_no_flag_could_give_are_one_line(self, tmp_path, options, message):
        """Values of campaign.json no command line could have produced (a NUL in a path, a target kind or launch
        key a target file may not hold, an unknown random action) are one line each, exit 2."""
        directory = resumable(tmp_path, options)
        line = one_line_error(["campaign", "--resume", directory])
        assert line.startswith(f"{directory / 'campaign.json'}: {message}"), line

    def test_a_minimal_target_file_campaign_ends_with_its_report_and_resumes(self, tmp_path):
        """A target file naming only its command (plan, bugs and describe not offered) is read back from
        campaign.json as written: the campaign writes its report, and --resume of it is accepted."""
        target = tmp_path / "t.toml"
        target.write_text('command = ["{python}", "-m", "agent"]\n')
        out = tmp_path / "r"
        args = [sys.executable, "-m", "chaos", "campaign", str(REPO / "scenarios" / "single-read.toml"), "--target",
                str(target), "--out", str(out), "--name", "c", "--pinned-only"]
        done = subprocess.run(args, capture_output=True, text=True, cwd=tmp_path, timeout=300)
        assert done.returncode == 0, done.stdout + done.stderr
        assert (out / "c" / "summary.json").is_file()
        again = subprocess.run([sys.executable, "-m", "chaos", "campaign", "--resume", str(out / "c")],
                               capture_output=True, text=True, cwd=tmp_path, timeout=300)
        assert again.returncode == 0, again.stdout + again.stderr

    def test_wrongly_typed_bookkeeping_is_one_line(self, tmp_path):
        """A wrongly typed member beside the options (elapsed, sessions) is a line too, not a traceback later."""
        directory = resumable(tmp_path)
        params = json.loads((directory / "campaign.json").read_text())
        write_campaign(directory, {**params, "elapsed": "soon"})
        line = one_line_error(["campaign", "--resume", directory])
        assert line == f"{directory / 'campaign.json'}: elapsed: expected a number, got a string \"soon\""


def test_resume_of_a_directory_it_cannot_write_is_one_line(tmp_path):
    """`--resume` of a campaign directory nothing may be written in (immutable here: root ignores modes) is one
    line and exit 2 before any case runs, not an internal error at its first write."""
    directory = resumable(tmp_path)
    (directory / LOCK).write_text("")  # as its last campaign left it: the lock can be taken, nothing made anew
    made = subprocess.run(["chattr", "+i", str(directory)], capture_output=True, text=True)
    if made.returncode != 0:  # needs CAP_LINUX_IMMUTABLE and a file system that keeps the flag
        pytest.skip(f"cannot make a directory immutable here: {made.stderr.strip()}")
    try:
        line = one_line_error(["campaign", "--resume", str(directory)])
    finally:
        subprocess.run(["chattr", "-i", str(directory)], check=True)
    assert line == f"--resume {directory}: cannot write in the campaign directory: Operation not permitted"


class TestOneCampaignPerDirectory:
    HOLDER = textwrap.dedent(
        """
        import sys, time
        from chaos.journal import CampaignLock
        with CampaignLock(sys.argv[1], ["chaos", "campaign", "--name", "c"]):
            print("held", flush=True)
            time.sleep(120)
        """
    )

    def test_resume_of_a_locked_directory_is_refused(self, tmp_path):
        """`--resume` while another process holds the directory is one line naming its pid, exit 2; the journal
        and campaign.json are untouched."""
        directory = resumable(tmp_path, journal=b'{"id":"greeting::tx:1@after-sync"}\n')
        before = {p.name: p.read_bytes() for p in directory.iterdir()}
        holder = subprocess.Popen([sys.executable, "-c", self.HOLDER, str(directory)], stdout=subprocess.PIPE,
                                  text=True)
        try:
            assert holder.stdout.readline() == "held\n"
            second = subprocess.run([sys.executable, "-m", "chaos", "campaign", "--resume", str(directory)],
                                    capture_output=True, text=True, cwd=REPO, timeout=120)
        finally:
            holder.kill()
            holder.wait()
            holder.stdout.close()
        assert second.returncode == 2, second.stdout + second.stderr
        assert second.stderr.count("\n") == 1 and "Traceback" not in second.stderr
        assert f"another campaign is running in this directory (pid {holder.pid}" in second.stderr
        assert "chaos campaign --name c" in second.stderr
        after = {p.name: p.read_bytes() for p in directory.iterdir() if p.name != LOCK}
        assert after == {k: v for k, v in before.items() if k != LOCK}

    @pytest.mark.slow
    def test_a_running_campaign_refuses_a_concurrent_resume(self, tmp_path):
        """The issue's probe: `--resume` of a campaign that is running is refused (exit 2, the holder's pid), and
        the first campaign still finishes with every case journalled once."""
        out = tmp_path / "out"
        first = subprocess.Popen([sys.executable, "-m", "chaos", "campaign", str(GREETING), "--out", str(out),
                                  "--name", "c", "-j", "1", "--no-shrink"], cwd=REPO, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.PIPE, text=True)
        lock = out / "c" / LOCK
        try:
            deadline = time.monotonic() + 60
            while not (lock.exists() and lock.read_text() and (out / "c" / "campaign.json").exists()):
                assert time.monotonic() < deadline and first.poll() is None, "the campaign never took its lock"
                time.sleep(0.01)
            # Stopped while the resume asks: a loaded machine could otherwise let the first one finish first.
            first.send_signal(signal.SIGSTOP)
            try:
                second = subprocess.run([sys.executable, "-m", "chaos", "campaign", "--resume", str(out / "c")],
                                        capture_output=True, text=True, cwd=REPO, timeout=120)
            finally:
                first.send_signal(signal.SIGCONT)
            assert second.returncode == 2, second.stdout + second.stderr
            assert f"(pid {first.pid}, started " in second.stderr and second.stderr.count("\n") == 1
            _, err = first.communicate(timeout=300)
        finally:
            if first.poll() is None:
                first.send_signal(signal.SIGKILL)
                first.communicate()
        assert first.returncode == 0, err
        ids = [json.loads(line)["id"] for line in (out / "c" / JOURNAL).read_text().splitlines()]
        assert len(ids) == len(set(ids)) > 0
        assert lock.read_text() == ""  # released at the end


class TestInternalError:
    def test_an_unhandled_exception_is_one_line_and_a_saved_traceback(self, monkeypatch, tmp_path):
        """A defect (here: load_scenarios raising) exits EXIT_INTERNAL with one line naming the saved traceback."""
        import chaos.scenario

        def defect(paths, *args, **kwargs):
            raise KeyError("a defect of the harness")

        monkeypatch.setattr(chaos.scenario, "load_scenarios", defect)
        monkeypatch.setenv("TMPDIR", str(tmp_path))
        import tempfile

        monkeypatch.setattr(tempfile, "tempdir", None)  # re-read TMPDIR
        line = one_line_error(["validate", GREETING], code=cli.EXIT_INTERNAL)
        match = re.fullmatch(r"chaos: internal error \(a defect of chaos, please report it\): KeyError: "
                             r"'a defect of the harness'; traceback saved to (\S+)", line)
        assert match, line
        saved = Path(match.group(1))
        assert saved.parent == tmp_path
        text = saved.read_text()
        assert text.startswith(f"command: chaos validate {GREETING}\n")
        assert "Traceback (most recent call last)" in text and "in defect" in text

    def test_internal_error_code_is_used_by_no_other_exit(self):
        """EXIT_INTERNAL differs from every exit status chaos documents for its commands."""
        documented = {0, 1, 2, 3, 4, 130, 143}
        assert cli.EXIT_INTERNAL not in documented
        readme = (REPO / "README.md").read_text()
        assert f"{cli.EXIT_INTERNAL} internal error" in readme

    def test_a_nul_in_an_argument_is_a_usage_error(self):
        """An argument holding a NUL (possible in process, never from a shell) is one line, exit 2."""
        assert one_line_error(["validate", "a\0b"]) == "chaos: an argument contains a NUL byte"

    def test_usage_errors_and_interrupts_keep_their_codes(self):
        """Click's own usage errors stay exit 2 and SystemExit passes through unchanged."""
        status, output, error = invoke("campaign", "--depth", "7")
        assert (status, error) == (2, None) and "Invalid value for '--depth'" in output
        status, _, error = invoke("validate")
        assert (status, error) == (2, None)
