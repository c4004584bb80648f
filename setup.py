"""Build hook: the scenario library (``scenarios/``) ships inside the wheel as ``chaos/library/`` package data.

All metadata lives in ``pyproject.toml``; this file only extends ``build_py``. Why not ``package-data``: the library
stays at the repository root, where users read and extend it, and setuptools' package data must live inside a
package directory. ``chaos.campaign.bundled_scenarios()`` reads ``chaos/library/`` when it exists (an installed
wheel) and ``scenarios/`` of the source tree otherwise (a checkout, an editable install).
"""

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

LIBRARY = Path(__file__).resolve().parent / "scenarios"
SHIPPED = (".toml", ".md", ".py")  # the scenario files, their READMEs, and the framework targets' programs


class BuildWithLibrary(build_py):
    """``build_py`` that also copies ``scenarios/**`` into ``<build>/chaos/library/``."""

    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            return  # an editable install reads scenarios/ in place
        target = Path(self.build_lib) / "chaos" / "library"
        for source in sorted(LIBRARY.rglob("*")):
            if source.is_file() and source.suffix in SHIPPED and "__pycache__" not in source.parts:
                destination = target / source.relative_to(LIBRARY)
                destination.parent.mkdir(parents=True, exist_ok=True)
                self.copy_file(str(source), str(destination))


setup(cmdclass={"build_py": BuildWithLibrary})
