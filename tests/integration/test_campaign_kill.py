"""A campaign killed with SIGKILL leaves nothing behind, whatever it was doing (real processes, both launchers)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.integration import gone

HERE = Path(__file__).resolve().parent
SCENARIO = HERE / "campaign" / "slow-bash.toml"


def _mine(marker: str) -> list[psutil.Process]:
    """Every live process whose command line or cwd mentions ``marker`` (this test's directory)."""
    found = []
    for p in psutil.process_iter(["cmdline", "cwd", "status"]):
        try:
            text = " ".join(p.info["cmdline"] or []) + " " + (p.info["cwd"] or "")
        except psutil.Error:
            continue
        if marker in text and p.info["status"] != psutil.STATUS_ZOMBIE and p.pid != os.getpid():
            found.append(p)
    return found


def _named(p: psutil.Process, name: str) -> bool:
    """``p`` runs under ``name``; False once it has ended (it may, between the listing and this look)."""
    try:
        return p.name() == name
    except psutil.Error:
        return False


def _kill_while_sleeping(args: list[str], tmp_path: Path, never: str) -> None:
    """Run `chaos campaign ARGS` in ``tmp_path``, SIGKILL it once a `sleep` runs somewhere below it, and assert that
    after 2 s nothing it started is alive and nothing new started."""
    campaign = subprocess.Popen(
        [sys.executable, "-m", "chaos", "campaign", *args, "--out", str(tmp_path / "reports"), "--name", "k", "-j",
         "1"], cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        tree: list[psutil.Process] = []
        while time.monotonic() < deadline:
            tree = psutil.Process(campaign.pid).children(recursive=True)
            if any(_named(p, "sleep") for p in tree):
                break
            time.sleep(0.05)
        else:
            pytest.fail(never)
        campaign.send_signal(signal.SIGKILL)
        campaign.wait()
        _, alive = psutil.wait_procs(tree, timeout=2)
        alive = [p for p in alive if not gone(p.pid)]
        assert not alive, [(p.pid, p.name(), p.cmdline()) for p in alive]
        time.sleep(0.5)
        assert not _mine(str(tmp_path))  # nothing new started after the kill either
    finally:
        if campaign.poll() is None:
            campaign.kill()
        for p in _mine(str(tmp_path)):
            p.kill()


@pytest.mark.slow
@pytest.mark.parametrize("launcher", ["zygote", "exec"])
def test_sigkill_of_the_campaign_with_a_slow_tool_in_flight_leaves_nothing(tmp_path, launcher):
    """SIGKILL of `chaos campaign` while a bash tool sleeps: after 2 s no worker, zygote, agent or tool is alive,
    and no new agent was launched."""
    _kill_while_sleeping([str(SCENARIO), "--launcher", launcher], tmp_path, "the bash tool never started")


SLOW_PROGRAM = '''
"""A probe test program: one SQLite commit, then a slow child process."""
import os, sqlite3, subprocess, sys
os.makedirs(sys.argv[1], exist_ok=True)
db = sqlite3.connect(sys.argv[1] + "/x.db")
db.execute("CREATE TABLE IF NOT EXISTS t (x)")
db.execute("INSERT INTO t VALUES (1)")
db.commit()
subprocess.run(["sleep", "30"])
'''


@pytest.mark.slow
@pytest.mark.parametrize("launcher", ["zygote", "exec"])
def test_sigkill_of_a_probe_campaign_with_a_slow_child_leaves_nothing(tmp_path, launcher):
    """SIGKILL of `chaos campaign` over a probe scenario (a Python program under the probe) while the program's
    child sleeps: after 2 s no worker, zygote, runner, program or child is alive."""
    (tmp_path / "slow.py").write_text(SLOW_PROGRAM)
    scenario = tmp_path / "slow.toml"
    scenario.write_text(f'''name = "slow-probe"
description = "one commit, then a slow child"
guarantee = "none"
guarantee_source = "this test"
[target]
kind = "python"
program = ["./slow.py", "{{case}}/state"]
tables = ["t"]
properties = ["state-loads", "effects-bounded"]
launcher = "{launcher}"
''')
    _kill_while_sleeping([str(scenario)], tmp_path, "the program's child never started")
