"""The baseline cache: crash-free baselines (kill points) and depth-2 recoveries, computed once, shared by all.

A campaign, its shards and the pytest plugin's xdist workers all need the kill points of a scenario, which come
from running its crash-free baseline twice (seconds per scenario). They share one directory (``<out>/.cache``
by default) and one naming rule, ``BaselineCache.stem``: scenario name, scenario file digest, the target's key
(``chaos.target.Target.key``: its launch templates, env and, for the bundled agent, the digest of its source —
never its bug switches: kill points come from the *correct* implementation) and ``CACHE_FORMAT``. Depth-2
recoveries depend on the implementation under test, switches included, so their stem keys the target with bugs.

Entries are published first-writer-wins (``chaos.files.publish``), so processes that computed the same entry at
the same time all read one. A failing baseline is never cached: a fixed scenario or agent must not inherit it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from chaos.files import publish, read_json, write_atomic
from chaos.target import Target

CACHE_FORMAT = 1  # bump when what a cache file holds (or how it is computed) changes


class BaselineCache:
    """The cache directory for one target; stems are computed once (the target's source may change meanwhile)."""

    def __init__(self, directory: str | Path, target: Target):
        self.dir = Path(directory)
        self.key = target.key()
        self.key_with_bugs = target.key(with_bugs=True)

    def stem(self, scenario: str, digest: str) -> str:
        """The name of a scenario's baseline entry (without ``.json``)."""
        return f"{scenario}-{digest}-{self.key}-v{CACHE_FORMAT}"

    def recoveries_stem(self, scenario: str, digest: str) -> str:
        """The name of a scenario's depth-2 recoveries entry under the implementation with its switches."""
        return f"{scenario}-{digest}-{self.key_with_bugs}-v{CACHE_FORMAT}.recoveries"

    def path(self, stem: str) -> Path:
        return self.dir / f"{stem}.json"

    def load(self, stem: str) -> Any | None:
        """The entry, or None when absent or unreadable (it is then computed again)."""
        return read_json(self.path(stem))

    def publish(self, stem: str, value: Any) -> Any:
        """Store ``value`` unless another process already did; return what the cache holds. An entry that is there
        but unreadable (a truncated file from a crashed machine) is replaced by ``value``."""
        publish(self.path(stem), json.dumps(value, sort_keys=True))
        held = self.load(stem)
        if held is None:
            write_atomic(self.path(stem), json.dumps(value, sort_keys=True))
            return value
        return held
