"""A non-editable install works away from the source tree: the wheel ships the scenario library (issue 13).

The wheel is built from a copy of the source (so the working tree gets no build/ or egg-info), offline with the
installed setuptools, then installed into a fresh virtual environment (``--system-site-packages`` provides the
dependencies). From a directory outside the source tree, the installed ``chaos`` validates its bundled library and
runs a small campaign of it (`--tag basic`: the plain-answer scenario, every kill point).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SOURCES = ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md", "agent", "chaos", "scenarios")

pytestmark = pytest.mark.slow


def run(argv, cwd, env=None, timeout=600) -> subprocess.CompletedProcess:
    """Run ``argv``; fail the test with its output when it exits non-zero."""
    proc = subprocess.run([str(a) for a in argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{argv}: exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> dict:
    """The wheel built from a copy of the source and installed in a fresh venv: paths and an environment."""
    pytest.importorskip("wheel", reason="the [test] extra's wheel package builds the wheel offline")
    base = tmp_path_factory.mktemp("packaging")
    source = base / "src"
    source.mkdir()
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "build")
    for name in SOURCES:
        path = REPO / name
        if path.is_dir():
            shutil.copytree(path, source / name, ignore=ignore)
        else:
            shutil.copy2(path, source / name)
    run([sys.executable, "-m", "pip", "wheel", "-q", "--use-pep517", "--no-deps", "--no-build-isolation",
         "-w", base / "dist", source], cwd=base)
    [wheel] = (base / "dist").glob("killpoint-*.whl")
    venv = base / "venv"
    run([sys.executable, "-m", "venv", "--system-site-packages", venv], cwd=base)
    python = venv / "bin" / "python"
    run([python, "-m", "pip", "install", "-q", "--no-deps", "--no-index", wheel], cwd=base)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    outside = base / "elsewhere"
    outside.mkdir()
    return {"wheel": wheel, "venv": venv, "python": python, "env": env, "cwd": outside}


def test_the_wheel_carries_the_library(installed):
    """Every scenario file of scenarios/ is in the wheel under chaos/library/, with the report templates and corpus."""
    names = set(zipfile.ZipFile(installed["wheel"]).namelist())
    library = {f"chaos/library/{p.relative_to(REPO / 'scenarios')}" for p in (REPO / "scenarios").rglob("*")
               if p.suffix in (".toml", ".md")}
    assert library and library <= names, sorted(library - names)
    assert {"chaos/report/index.html.j2", "chaos/corpora/default.zip"} <= names


def test_installed_chaos_uses_the_installed_library(installed):
    """The installed packages, not the source tree, are imported, and the bundled library is the installed one."""
    probe = run([installed["python"], "-c", "import chaos, agent, chaos.campaign as c; "
                 "print(chaos.__file__); print(agent.__file__); print(c.bundled_scenarios())"],
                cwd=installed["cwd"], env=installed["env"])
    chaos_file, agent_file, library = probe.stdout.split()
    venv = str(installed["venv"])
    assert chaos_file.startswith(venv) and agent_file.startswith(venv), probe.stdout
    assert library.startswith(venv) and library.endswith("chaos/library"), library


def test_validate_and_a_small_campaign_outside_the_source_tree(installed):
    """`chaos validate` accepts the installed library and `chaos campaign --tag basic` runs and holds."""
    library = run([installed["python"], "-c", "import chaos.campaign as c; print(c.bundled_scenarios())"],
                  cwd=installed["cwd"], env=installed["env"]).stdout.strip()
    chaos = installed["venv"] / "bin" / "chaos"
    checked = run([chaos, "validate", library], cwd=installed["cwd"], env=installed["env"])
    assert checked.stdout.startswith("OK: ") and "scenario(s) valid" in checked.stdout
    out = installed["cwd"] / "reports"
    run([chaos, "campaign", "--tag", "basic", "--out", out, "--name", "small", "-j", "2"], cwd=installed["cwd"],
        env=installed["env"], timeout=900)
    result = json.loads((out / "small" / "result.json").read_text())
    assert result["cases"]["done"] == result["cases"]["planned"] > 0 and result["cases"]["fail"] == 0
    assert list(result["baselines"]) == ["plain-answer"]
    assert result["baselines"]["plain-answer"]["file"].startswith(str(installed["venv"]))
