"""The package arrows, checked on the source: chaos → agent.session only, agent never → chaos, no private imports."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def imports(path: Path) -> list[tuple[str, list[str], int]]:
    """(module, imported names, line) of every import statement in ``path``, at any depth."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(alias.name, [], node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.append((node.module, [alias.name for alias in node.names], node.lineno))
    return out


def sources(package: str) -> list[Path]:
    return sorted((REPO / package).rglob("*.py"))


@pytest.mark.parametrize("path", sources("chaos"), ids=lambda p: str(p.relative_to(REPO)))
def test_chaos_imports_only_the_contract_of_agent(path):
    """A chaos module imports agent.session (the reference contract) and nothing else of agent."""
    bad = [(m, line) for m, names, line in imports(path)
           if (m == "agent" or m.startswith("agent.")) and not m.startswith("agent.session")
           or (m == "agent" and any(n != "session" for n in names))]
    assert not bad, f"{path.relative_to(REPO)} imports {bad}"


@pytest.mark.parametrize("path", sources("agent"), ids=lambda p: str(p.relative_to(REPO)))
def test_agent_never_imports_chaos(path):
    """No agent module imports the harness."""
    assert not [m for m, _, _ in imports(path) if m == "chaos" or m.startswith("chaos.")]


@pytest.mark.parametrize("path", sources("agent") + sources("chaos"), ids=lambda p: str(p.relative_to(REPO)))
def test_no_module_imports_another_modules_private_names(path):
    """`from x import _name` never crosses modules of the project."""
    bad = [(m, n, line) for m, names, line in imports(path) if m.split(".")[0] in ("agent", "chaos")
           for n in names if n.startswith("_") and not n.startswith("__")]
    assert not bad, f"{path.relative_to(REPO)} imports private names {bad}"


def test_cli_and_loop_do_not_import_each_other_both_ways():
    """agent.loop does not import agent.cli (cli → loop is the only direction)."""
    assert not [m for m, names, _ in imports(REPO / "agent" / "loop.py")
                if m == "agent.cli" or (m == "agent" and "cli" in names)]


@pytest.mark.parametrize("path", sources("agent") + sources("chaos"), ids=lambda p: str(p.relative_to(REPO)))
def test_no_module_reaches_for_a_private_attribute_of_another(path):
    """`module._name` is never used on a project module this file imported (e.g. `oracle._sha`)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    modules = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in ("agent", "chaos"):
            modules |= {alias.asname or alias.name for alias in node.names}
        elif isinstance(node, ast.Import):
            modules |= {alias.asname or alias.name for alias in node.names if alias.name.split(".")[0] in
                        ("agent", "chaos") and alias.asname}
    bad = [(node.value.id, node.attr, node.lineno) for node in ast.walk(tree)
           if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in modules
           and node.attr.startswith("_") and not node.attr.startswith("__")]
    assert not bad, f"{path.relative_to(REPO)} uses private attributes {bad}"
