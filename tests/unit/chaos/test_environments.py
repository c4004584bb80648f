"""chaos.environments: where a python target's interpreter comes from, and the probe-only path for it."""

from __future__ import annotations

import os
import subprocess
import sys

from chaos import environments


def test_environment_is_ready_only_once_marked(tmp_path, monkeypatch):
    """An environment directory without the ready marker (an interrupted build) is never taken for a prepared one."""
    monkeypatch.setenv("KILLPOINT_CACHE", str(tmp_path))
    pins = ["somepkg==1.2.3"]
    assert environments.interpreter(pins) is None
    root = environments.env_dir(pins)
    (root / "bin").mkdir(parents=True)
    (root / "bin" / "python").symlink_to(sys.executable)
    assert environments.interpreter(pins) is None
    (root / environments.READY).write_text('{"freeze": ["somepkg==1.2.3"]}')
    assert environments.interpreter(pins) == str(root / "bin" / "python")
    assert environments.installed(pins) == ["somepkg==1.2.3"]


def test_environment_name_depends_on_the_pins_not_their_order():
    """Two targets with the same pins in another order share one environment; another pin gets its own."""
    assert environments.env_dir(["a==1", "b==2"]) == environments.env_dir(["b==2", "a==1"])
    assert environments.env_dir(["a==1", "b==2"]) != environments.env_dir(["a==1", "b==3"])
    assert environments.interpreter([]) == sys.executable


def test_probe_path_is_self_contained(tmp_path, monkeypatch):
    """The probe-only directory imports the runner, the inspection and the zygote without site-packages (no psutil,
    no pydantic): what a framework's own environment gets on PYTHONPATH."""
    monkeypatch.setenv("KILLPOINT_CACHE", str(tmp_path))
    path = environments.probe_path()
    assert path.startswith(str(tmp_path)) and environments.probe_path() == path
    env = {**os.environ, "PYTHONPATH": path}
    proc = subprocess.run([sys.executable, "-S", "-c", "import chaos.probe.run, chaos.probe.inspect, chaos.zygote, "
                           "sys; print(chaos.__file__); print('psutil' in sys.modules, 'pydantic' in sys.modules)"],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [os.path.join(path, "chaos", "__init__.py"), "False False"]


def test_a_failed_build_leaves_nothing_and_says_why(tmp_path, monkeypatch):
    """A build that cannot complete is one PrepareError line, and no half-built environment is left to be reused."""
    import pytest

    monkeypatch.setenv("KILLPOINT_CACHE", str(tmp_path))
    monkeypatch.setattr(environments.sys, "executable", str(tmp_path / "no-such-python"))
    pins = ["somepkg==1.2.3"]
    with pytest.raises(environments.PrepareError, match="no-such-python"):
        environments.prepare(pins, log=lambda line: None)
    assert not environments.env_dir(pins).exists() and environments.interpreter(pins) is None
