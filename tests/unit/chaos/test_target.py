"""Unit tests of chaos.target: the one Target, its file format, argv templates, recording and cache identity."""

from __future__ import annotations

import json
import os
import sys
from dataclasses import replace

import pytest

from chaos.cache import BaselineCache
from chaos.target import INVARIANTS, Target, TargetError, load_target, resolve_target


def write(tmp_path, text: str, name: str = "t.toml"):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


class TestLoadTarget:
    def test_reads_command_env_launch_and_planner(self, tmp_path):
        """A target file gives the argv prefix (relative paths resolved), env, templates, planner and invariants."""
        path = write(tmp_path, 'name = "mine"\ncommand = ["python3", "./agent.py"]\nenv = { X = "1" }\n'
                               'planner_command = "python3 -m agent"\nplanner_scope = "all"\n'
                               'invariants = ["log-reduces", "converges"]\n'
                               '[launch]\nresume = ["{command}", "recover", "{session}"]\n')
        target = load_target(path)
        assert target.command == ("python3", str(tmp_path / "agent.py")) and target.env == (("X", "1"),)
        assert target.name == "mine" and target.source == str(path.resolve()) and not target.bundled
        assert target.planner_command == "python3 -m agent" and target.planner_scope == "all"
        assert target.planner_dir == str(tmp_path.resolve())  # the command runs where the file that names it is
        assert target.invariants == ("log-reduces", "converges")
        assert target.argv("resume") == ("python3", str(tmp_path / "agent.py"), "recover", "{session}")

    def test_a_foreign_target_offers_no_plan_bugs_or_describe_unless_named(self, tmp_path):
        """Without configuration_flags, plan/bugs/describe exist only when the file names them."""
        target = load_target(write(tmp_path, 'command = ["x"]\n'))
        assert not target.template("bugs") and not target.template("describe") and target.planner_argv() is None
        assert target.argv("run", flags=["--model", "m"], session_dir="S", workspace="W", prompt="P")[:2] == ("x", "run")

    def test_every_problem_is_listed(self, tmp_path):
        """A bad file names each problem: missing command, wrong protocol, unknown keys, invariants, templates."""
        path = write(tmp_path, 'protocol = 2\nsession = "x"\ninvariants = ["nope"]\nplanner_scope = "some"\n'
                               '[launch]\nresume = ["{command}", "{sesion}"]\nwhatever = ["a"]\n')
        with pytest.raises(TargetError) as info:
            load_target(path)
        text = "\n".join(info.value.messages)
        for word in ("command", "protocol", "session", "nope", "planner_scope", "{sesion}", "launch.whatever"):
            assert word in text

    @pytest.mark.parametrize("content, expected", [
        (b"command = [", "toml"),
        (b"\xff\xfe", "not UTF-8"),
        (b"a = " + b"[" * 2000 + b"]" * 2000, "t.toml"),
    ])
    def test_unreadable_files_are_one_line(self, tmp_path, content, expected):
        """A syntax error, non-UTF-8 bytes or absurd nesting is one line naming the file."""
        path = tmp_path / "t.toml"
        path.write_bytes(content)
        with pytest.raises(TargetError) as info:
            load_target(path)
        assert len(info.value.messages) == 1 and expected in info.value.messages[0]

    def test_missing_and_directory(self, tmp_path):
        """A missing file and a directory are one line each."""
        with pytest.raises(TargetError, match="no such target file"):
            load_target(tmp_path / "none.toml")
        with pytest.raises(TargetError, match="is a directory"):
            load_target(tmp_path)


class TestTarget:
    def test_the_default_target_is_the_bundled_agent(self):
        """Target() launches the bundled agent with this interpreter and every invariant applies."""
        target = Target()
        assert target.bundled and target.command == (sys.executable, "-m", "agent")
        assert target.invariants == INVARIANTS and target.configuration_flags

    def test_templates_splice_command_and_flags(self):
        """{command} and {flags} become several words; {session} and {restart} stay for the supervisor."""
        argv = Target().argv("run_again", flags=["--model", "m"], prompt="hi")
        assert argv == (sys.executable, "-m", "agent", "run", "--session", "{session}", "--model", "m", "{restart}",
                        "hi")

    def test_environment_sets_switches_and_planner_always(self):
        """AGENT_BUGS and AGENT_PLANNER_CMD are always set, to empty for the correct agent (never inherited)."""
        assert Target().environment() == {"AGENT_BUGS": "", "AGENT_PLANNER_CMD": "", "AGENT_PLANNER_DIR": ""}
        env = Target(bugs=("a", "b")).with_planner("p -m x", "all", "/proj").environment()
        assert env == {"AGENT_BUGS": "a,b", "AGENT_PLANNER_CMD": "p -m x", "AGENT_PLANNER_SCOPE": "all",
                       "AGENT_PLANNER_DIR": "/proj", "AGENT_PLANNER_TIMEOUT": ""}  # "": never the shell's own

    def test_the_planner_timeout_is_the_records(self):
        """A recorded timeout reaches the agent; else the target file's env table's; the reproduce line names it."""
        timed = replace(Target().with_planner("p", None, "/proj"), planner_timeout=2.5)
        assert timed.environment()["AGENT_PLANNER_TIMEOUT"] == "2.5"
        assert timed.cli_args()[-2:] == ["--planner-timeout", "2.5"]
        exact = replace(timed, planner_timeout=0.1 + 0.2)  # the line reads back the very value, not a rounding
        assert float(exact.cli_args()[-1]) == exact.planner_timeout
        assert Target.from_json({**timed.to_json(), "planner_timeout": 7}) == replace(timed, planner_timeout=7.0)
        own = Target(env=(("AGENT_PLANNER_TIMEOUT", "9"),)).with_planner("p")
        assert own.environment()["AGENT_PLANNER_TIMEOUT"] == "9"
        assert timed.key(with_bugs=True) != Target().with_planner("p", None, "/proj").key(with_bugs=True)

    def test_round_trip_records_the_whole_target(self, tmp_path):
        """to_json/from_json keep every field, with this interpreter written as {python}."""
        target = load_target(write(tmp_path, 'command = ["x"]\nenv = { A = "1" }\nconfiguration_flags = true\n'))
        target = target.with_bugs(["s"]).with_planner("cmd plan", "all", "/proj")
        data = json.loads(json.dumps(target.to_json()))
        assert Target.from_json(data) == target
        assert Target().to_json()["command"][0] == "{python}" and Target.from_json(Target().to_json()) == Target()

    def test_correct_drops_switches_and_planner(self):
        """The baseline's target has no switch and no foreign planner."""
        target = Target(bugs=("x",)).with_planner("p", None, "/proj")
        assert target.correct() == Target()

    def test_cache_key_ignores_switches_but_not_launch(self, tmp_path):
        """Kill points are keyed by the correct target: switches and planner leave the key alone, templates do not."""
        base = Target()
        assert base.key() == Target(bugs=("x",)).with_planner("p").key()
        assert base.key(with_bugs=True) != Target(bugs=("x",)).key(with_bugs=True)
        # The same command run elsewhere may be another planner (a relative script): discovery keys it apart.
        assert Target().with_planner("p", None, "/a").key(with_bugs=True) != \
            Target().with_planner("p", None, "/b").key(with_bugs=True)
        other = load_target(write(tmp_path, 'command = ["x"]\n'))
        assert other.key() != base.key()

    def test_plugin_and_campaign_share_one_stem(self, tmp_path):
        """The baseline cache names an entry the same way for every front end (format suffix included)."""
        a = BaselineCache(tmp_path, Target()).stem("s", "d")
        b = BaselineCache(tmp_path, Target(bugs=("x",))).stem("s", "d")
        assert a == b and a.endswith("-v1")

    def test_cli_args_name_the_target_again(self, tmp_path):
        """cli_args gives the options that rebuild the same target on the command line."""
        target = load_target(write(tmp_path, 'command = ["x"]\n')).with_bugs(["b"]).with_planner("p q", "all")
        assert target.cli_args() == ["--target", target.source, "--agent-bugs", "b", "--planner-cmd", "p q",
                                     "--planner-timeout", "30.0", "--planner-scope", "all"]

    def test_the_agents_default_planner_timeout_is_said_again(self, tmp_path):
        """A reproduce line names the agent's default timeout when none was chosen (a shell that exports another
        must not change a re-run), unless the target file's env table names one; said or not, it is one target."""
        from agent.planner_cmd import DEFAULT_TIMEOUT
        from chaos.campaign import CampaignOptions, resume_conflicts
        from chaos.target import AGENT_PLANNER_SECONDS

        def conflicts(stored, given):  # a --resume typing --planner-timeout again
            return resume_conflicts(CampaignOptions(target=stored.to_json()), CampaignOptions(target=given.to_json()),
                                    ["planner_timeout"])

        assert AGENT_PLANNER_SECONDS == DEFAULT_TIMEOUT
        target = resolve_target(None, planner_command="p", planner_dir=str(tmp_path), environ={})
        assert target.planner_timeout is None and target.cli_args()[-2:] == ["--planner-timeout", "30.0"]
        again = resolve_target(None, planner_command="p", planner_dir=str(tmp_path), planner_timeout=30.0)
        assert again.key(with_bugs=True) == target.key(with_bugs=True)
        assert conflicts(target, again) == []
        other = resolve_target(None, planner_command="p", planner_dir=str(tmp_path), planner_timeout=5.0)
        assert other.key(with_bugs=True) != target.key(with_bugs=True)
        assert conflicts(target, other) != []
        own = load_target(write(tmp_path, 'command = ["x"]\nplanner_command = "p"\n'
                                          '[env]\nAGENT_PLANNER_TIMEOUT = "5"\n'))
        assert "--planner-timeout" not in own.cli_args()
        assert resolve_target(own.source, environ={"AGENT_PLANNER_TIMEOUT": "9"}).planner_timeout is None

    def test_cli_args_rebuild_where_the_planner_runs(self, tmp_path, monkeypatch):
        """A reproduce line pasted in another directory runs the planner where it ran: it names --planner-dir, and
        resolving its options gives the same target (and the same discovery key)."""
        home = tmp_path / "t"
        home.mkdir()
        original = resolve_target(str(write(home, 'command = ["x"]\nplanner_command = "python3 planner.py"\n')))
        args = original.cli_args()
        assert args[args.index("--planner-dir") + 1] == str(home.resolve())
        monkeypatch.chdir(tmp_path)  # elsewhere
        options = dict(zip(args[::2], args[1::2]))
        again = resolve_target(options["--target"], planner_command=options["--planner-cmd"],
                               planner_dir=options["--planner-dir"])
        assert again == original and again.key(with_bugs=True) == original.key(with_bugs=True)

    def test_another_planner_command_does_not_inherit_the_directory(self):
        """with_planner keeps the directory for the same command (a new scope) and drops it for another one."""
        target = Target().with_planner("p", None, "/proj")
        assert target.with_planner("p", "all").planner_dir == "/proj"
        assert target.with_planner("q").planner_dir is None


class TestResolveTarget:
    def test_bad_planner_command_is_a_usage_error(self):
        """An unterminated quote in --planner-cmd is one line."""
        with pytest.raises(TargetError, match="planner command"):
            resolve_target(planner_command="python3 'oops")

    def test_a_planner_command_runs_where_it_was_given(self, tmp_path, monkeypatch):
        """--planner-cmd runs in the directory the front end ran in; a new scope alone keeps the file's directory."""
        monkeypatch.chdir(tmp_path)
        assert resolve_target(planner_command="node planner.js").planner_dir == os.getcwd()
        assert resolve_target().planner_dir is None
        sub = tmp_path / "t"
        sub.mkdir()
        path = write(sub, 'command = ["x"]\nplanner_command = "p"\n')
        assert resolve_target(str(path), planner_scope="all").planner_dir == str(sub.resolve())
        assert resolve_target(str(path), planner_command="q").planner_dir == os.getcwd()
        # --planner-dir: relative to here, made absolute; it must be a directory and needs a command to move.
        assert resolve_target(str(path), planner_dir="t").planner_dir == str(sub.resolve())
        with pytest.raises(TargetError, match=r"'nowhere': does not exist \(--planner-dir DIR: where"):
            resolve_target(planner_command="p", planner_dir="nowhere")  # a pasted line's directory, elsewhere
        with pytest.raises(TargetError, match="is not a directory"):
            resolve_target(planner_command="p", planner_dir=str(path))
        with pytest.raises(TargetError, match="without a planner command"):
            resolve_target(planner_dir=".")
        with pytest.raises(TargetError, match="planner scope: given without a planner command"):
            resolve_target(planner_scope="all")

    def test_a_planner_timeout_applies_to_the_command_there_is(self, tmp_path):
        """--planner-timeout is recorded with a planner command (given or the file's), refused without one or when
        not positive."""
        assert resolve_target(planner_command="p", planner_timeout=3).planner_timeout == 3.0
        path = write(tmp_path, 'command = ["x"]\nplanner_command = "p"\n')
        assert resolve_target(str(path), planner_timeout=4).planner_timeout == 4.0
        with pytest.raises(TargetError, match="planner timeout: given without a planner command"):
            resolve_target(planner_timeout=3)
        with pytest.raises(TargetError, match="positive number of seconds"):
            resolve_target(planner_command="p", planner_timeout=-1)

    def test_the_environments_planner_timeout_is_recorded_after_the_flag_and_the_file(self, tmp_path):
        """AGENT_PLANNER_TIMEOUT of the environment is recorded with a planner command, unless a flag or the target
        file's env table says otherwise; without a planner it is ignored, as the agent ignores it; one the agent
        would refuse is a line."""
        env = {"AGENT_PLANNER_TIMEOUT": "7"}
        assert resolve_target(planner_command="p", environ=env).planner_timeout == 7.0
        assert resolve_target(planner_command="p", planner_timeout=2, environ=env).planner_timeout == 2.0
        own = write(tmp_path, 'command = ["x"]\nplanner_command = "p"\nenv = { AGENT_PLANNER_TIMEOUT = "120" }\n')
        target = resolve_target(str(own), environ=env)
        assert target.planner_timeout is None and target.environment()["AGENT_PLANNER_TIMEOUT"] == "120"
        assert resolve_target(environ={"AGENT_PLANNER_TIMEOUT": "soon"}).planner_timeout is None
        with pytest.raises(TargetError, match="AGENT_PLANNER_TIMEOUT='soon' \\(in this environment\\)"):
            resolve_target(planner_command="p", environ={"AGENT_PLANNER_TIMEOUT": "soon"})
        assert resolve_target(planner_command="p").planner_timeout is None  # no environ: a resume's record rules

    def test_a_foreign_target_without_switches_refuses_any(self, tmp_path):
        """Asking a target that lists no switch for one is refused, naming the switch."""
        path = write(tmp_path, 'command = ["x"]\n')
        with pytest.raises(TargetError, match="unknown bug switch nosuch"):
            resolve_target(str(path), bugs="nosuch")


class TestAskingTheTarget:
    def test_the_scenario_tool_list_is_what_the_bundled_target_describes(self):
        """Scenario validation's tool names equal the bundled target's described tools (no import of the agent)."""
        from chaos.scenario import KNOWN_TOOLS
        from chaos.target import describe

        assert describe(Target()).tool_names == KNOWN_TOOLS

    def test_known_bugs_are_asked_from_the_target(self):
        """The bundled target lists its switches with their layer through `bugs --json`."""
        from chaos.target import known_bugs

        bugs = known_bugs(Target())
        assert bugs["stale-assistant-calls"]["layer"] == "planner"
        assert bugs["effect-before-intent"]["layer"] == "executor" and len(bugs) == 10

    def test_a_target_that_prints_no_json_is_one_line(self, tmp_path):
        """A bugs command that prints garbage gives a TargetError naming the command."""
        path = write(tmp_path, f'command = ["{sys.executable}", "-c", "print(1+)"]\n'
                               '[launch]\nbugs = ["{command}"]\n')
        with pytest.raises(TargetError, match="exited 1"):
            resolve_target(str(path), bugs="x")


class TestLauncher:
    def test_the_bundled_target_runs_in_a_zygote_and_a_foreign_one_by_exec(self, tmp_path):
        """The default target names a zygote module; a target file's command defaults to exec."""
        assert Target().zygote_module() == "agent"
        assert load_target(write(tmp_path, 'command = ["x"]\n')).zygote_module() is None

    def test_a_python_module_target_may_ask_for_a_zygote(self, tmp_path):
        """launcher = "zygote" with a {python} -m command is accepted; preload defaults to the module."""
        target = load_target(write(tmp_path, 'command = ["{python}", "-m", "mine"]\nlauncher = "zygote"\n'))
        assert target.zygote_module() == "mine" and target.preload == ("mine",)

    def test_a_zygote_for_another_command_is_refused(self, tmp_path):
        """launcher = "zygote" for a command that is not this interpreter's -m is a one-line error."""
        with pytest.raises(TargetError, match="zygote needs command"):
            load_target(write(tmp_path, 'command = ["node", "agent.js"]\nlauncher = "zygote"\n'))

    def test_the_command_line_launcher_overrides_the_target(self):
        """resolve_target(launcher="exec") makes the bundled agent exec'd."""
        assert resolve_target(launcher="exec").zygote_module() is None
        with pytest.raises(TargetError, match="expected zygote or exec"):
            resolve_target(launcher="fork")


class TestTemplates:
    def test_a_value_that_reads_like_a_placeholder_is_not_substituted_again(self):
        """A prompt containing "{workspace}" reaches the agent as written."""
        argv = Target().argv("run", flags=[], session_dir="S", workspace="W", prompt="echo {workspace} {session_dir}")
        assert argv[-1] == "echo {workspace} {session_dir}" and "W" in argv and "S" in argv


def test_a_corrupt_cache_entry_is_replaced(tmp_path):
    """publish over an unreadable entry stores the new value and returns it (never None)."""
    cache = BaselineCache(tmp_path, Target())
    cache.path("s").write_text("{trunc")
    assert cache.publish("s", {"ok": True}) == {"ok": True} and cache.load("s") == {"ok": True}
