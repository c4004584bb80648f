"""Crash-prefix corpora for ``chaos conformance``: record them during a campaign, build them, load them.

What it is for. A conformance corpus is a set of session logs exactly as a restart found them after a SIGKILL (raw
bytes, torn tails included), each with what the reference implementation (``agent.session``) says about it: the
reduction, and — for every restart configuration the log was seen with — the recovery plan and the SPEC §14.4 rule
that gives it. ``chaos conformance`` replays those prefixes through another implementation's ``reduce``/``plan``
commands; ``chaos corpus build`` makes one from a campaign; the corpus built from the default campaign ships as
package data (``chaos/corpora/default.zip``) and is the default.

The format (one format; a directory, or a zip archive holding the same paths at its root):

``corpus.json``
    the index: ``{"format": "killpoint-crash-prefix-corpus", "version": 1, "source": {...},
    "outcomes": "scripted", "prefixes": {SHA: {"bytes": N, "ok": bool, "origin": ORIGIN}},
    "configurations": [KEY, ...], "checks": [{"prefix": SHA, "configuration": KEY, "rule": RULE, "plan": PLAN,
    "origin": ORIGIN}, ...], "rules": {RULE: count}}`` where ORIGIN is ``{"case", "scenario", "kill", "fault",
    "action", "role"}``: the first case that saw the prefix, the kill's number and fault, the restart's role;
``prefixes/<SHA>.jsonl``
    the raw bytes of one prefix; SHA is the lowercase hex SHA-256 of those bytes (content addressed, so identical
    bytes are stored once);
``configurations/<KEY>.json``
    ``{"current": CurrentConfiguration (SPEC §8.7, exactly its members), "snapshot": configurationSnapshot}``; the
    snapshot (the configuration behind ``configurationDigest``, §8.2) is what the closed loop needs to write a
    ``stepAttempt``; KEY is the hex SHA-256 of the canonical JSON (§8.1) of that object;
``expected/<SHA>.reduce.json``
    the reference reduction, byte for byte what ``python3 -m agent reduce`` prints: ``{"ok":true,"state":…}`` or
    ``{"ok":false,"error":…}`` (one line).

A check is one (prefix, configuration) pair; identical bytes under the same configuration are one check, whichever
case saw them first (``origin``). The closed loop of ``chaos conformance`` uses *scripted* model and tool outcomes
(``outcomes: "scripted"``, see ``chaos.conformance``), so nothing else of the case is stored.

Recording is concurrency safe across the campaign's worker processes: every file is content addressed and published
first-writer-wins (written to a private temporary name, fsync'd, then ``os.link``-ed to its final name; a name that
exists already is left alone), so two workers that saw the same bytes never interleave or overwrite each other.
Build-time bookkeeping (``observations/``: which case saw which pair) is folded into ``corpus.json`` by
``finalize_corpus`` and then removed.

Not here: running an implementation or comparing outputs (``chaos.conformance``), running cases (``chaos.campaign``).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import zipfile
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

FORMAT = "killpoint-crash-prefix-corpus"
VERSION = 1
INDEX = "corpus.json"
PREFIXES = "prefixes"
CONFIGURATIONS = "configurations"
EXPECTED = "expected"
OBSERVATIONS = "observations"
# SPEC §8.7: the closed shape of a CurrentConfiguration and of its tool items (the harness adds a `snapshot`).
CURRENT_MEMBERS = ("configurationDigest", "environmentIdentity", "tools")
TOOL_MEMBERS = ("name", "definitionDigest", "replay", "replayKey")
# The package data corpus (`chaos corpus build` of the default campaign), the default of `chaos conformance`.
DEFAULT_CORPUS = Path(__file__).resolve().parent / "corpora" / "default.zip"
CONTRACT_NAME = "session-contract"


class CorpusError(Exception):
    """A path is not a usable corpus (missing, unreadable, wrong format); one line, the CLI exits 2."""


# --------------------------------------------------------------------------------------------------------------
# Small pure helpers


def sha256_hex(data: bytes) -> str:
    """Lowercase hex SHA-256 of ``data``: the name of a prefix file."""
    return hashlib.sha256(data).hexdigest()


def reduce_output(data: bytes) -> bytes:
    """The exact stdout of ``python3 -m agent reduce`` for ``data``: one compact JSON line (reference reducer)."""
    from agent.session.errors import CorruptionError
    from agent.session.reducer import reduce_session

    try:
        value: dict[str, Any] = {"ok": True, "state": reduce_session(data)}
    except CorruptionError as exc:
        value = {"ok": False, "error": exc.to_json()}
    # The agent's `_emit`: ensure_ascii off, compact separators, then a newline.
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8") + b"\n"


def strip_current(current: Mapping[str, Any]) -> dict[str, Any]:
    """The SPEC §8.7 CurrentConfiguration part of a launch's ``current`` (the harness adds ``snapshot`` to it)."""
    out: dict[str, Any] = {k: current[k] for k in CURRENT_MEMBERS if k in current}
    out["tools"] = [{k: t[k] for k in TOOL_MEMBERS if k in t} for t in current.get("tools", [])]
    return out


def configuration_record(current: Mapping[str, Any]) -> dict[str, Any]:
    """``{"current": …, "snapshot": …}`` as stored under ``configurations/`` for a launch's configuration."""
    return {"current": strip_current(current), "snapshot": current.get("snapshot")}


def configuration_key(record: Mapping[str, Any]) -> str:
    """The content address of a configuration record: hex SHA-256 of its canonical JSON (SPEC §8.1)."""
    from agent.session.digests import canonical_json

    return sha256_hex(canonical_json(record))


def scenario_of(case_id: str) -> str:
    """The scenario part of a case id ``<scenario>::<fault>…``."""
    return case_id.split("::", 1)[0]


def _json_bytes(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":")).encode("utf-8") + b"\n"


def publish(path: Path, data: bytes) -> bool:
    """Write ``data`` at ``path`` unless the name exists: tmp + fsync + ``os.link``, first writer wins.

    Returns True when this call created the file. Safe across processes: the final name only ever appears with
    complete, synced bytes, and a second writer of the same content address finds it and leaves it alone.
    """
    if path.exists():
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        try:
            os.link(tmp, path)
        except FileExistsError:
            return False
        return True
    finally:
        os.unlink(tmp)


# --------------------------------------------------------------------------------------------------------------
# Recording (called by chaos.workers for every executed case when CampaignOptions.corpus is set)


def observations(evidence: Any) -> list[dict[str, Any]]:
    """One observation per kill of ``evidence`` (chaos.oracle.Evidence): the prefix bytes and the configuration of
    the launch that restarted from them (None when the harness could not compute it). Pure."""
    out = []
    for i, kill in enumerate(evidence.kills):
        if not kill.snapshot:
            continue  # the file did not exist yet: there is no prefix to check
        # The restart after kill i is the first launch that started after the killed one.
        after = [launch for launch in evidence.launches if launch.index > kill.launch]
        launch = min(after, key=lambda l: l.index) if after else None
        current = launch.current if launch is not None else None
        out.append({
            "data": kill.snapshot,
            "configuration": configuration_record(current) if current else None,
            "origin": {"case": evidence.case_id, "scenario": scenario_of(evidence.case_id), "kill": i + 1,
                       "fault": kill.fault, "action": kill.action, "role": launch.role if launch else None},
        })
    return out


def record_evidence(directory: Path, evidence: Any) -> int:
    """Record every kill prefix of one case under ``directory`` (raw corpus layout); returns how many were new."""
    directory = Path(directory)
    new = 0
    for obs in observations(evidence):
        sha = sha256_hex(obs["data"])
        publish(directory / PREFIXES / f"{sha}.jsonl", obs["data"])
        key = "none"
        if obs["configuration"] is not None:
            key = configuration_key(obs["configuration"])
            publish(directory / CONFIGURATIONS / f"{key}.json", _json_bytes(obs["configuration"]))
        record = {"prefix": sha, "configuration": None if key == "none" else key, "origin": obs["origin"]}
        # Identical bytes under the same configuration are one check: the first case to see them names it.
        new += publish(directory / OBSERVATIONS / f"{sha}-{key}.json", _json_bytes(record))
    return new


# --------------------------------------------------------------------------------------------------------------
# Finalizing a recorded directory: the reference outputs and the index


def reference_check(data: bytes, current: Mapping[str, Any]) -> tuple[dict | None, str | None]:
    """The reference plan and rule for a prefix under a CurrentConfiguration, or (None, None) if it does not reduce."""
    from agent.session.errors import CorruptionError
    from agent.session.planner import plan_recovery, plan_rule
    from agent.session.reducer import reduce_session

    try:
        reduction = reduce_session(data)
    except CorruptionError:
        return None, None
    return plan_recovery(reduction, current), plan_rule(reduction, current)


def finalize_corpus(directory: Path, source: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Turn a recorded directory into a corpus: expected reductions, the reference plan per check, ``corpus.json``.

    Idempotent (a finalized corpus is re-indexed from its own index when ``observations/`` is gone). Returns the index.
    """
    directory = Path(directory)
    records: list[dict[str, Any]] = []
    obs_dir = directory / OBSERVATIONS
    if obs_dir.is_dir():
        for path in sorted(obs_dir.glob("*.json")):
            records.append(json.loads(path.read_text(encoding="utf-8")))
    elif (directory / INDEX).is_file():
        old = json.loads((directory / INDEX).read_text(encoding="utf-8"))
        records = [{"prefix": c["prefix"], "configuration": c["configuration"], "origin": c["origin"]}
                   for c in old.get("checks", [])]
        planned = {c["prefix"] for c in old.get("checks", [])}
        records += [{"prefix": sha, "configuration": None, "origin": info.get("origin") or {}}
                    for sha, info in old.get("prefixes", {}).items() if sha not in planned]
        source = source or old.get("source")
    # Deterministic order: by case, then kill number, then the content addresses.
    records.sort(key=lambda r: (r["origin"].get("case", ""), r["origin"].get("kill", 0), r["prefix"],
                                r["configuration"] or ""))
    prefixes: dict[str, dict[str, Any]] = {}
    configurations: dict[str, dict[str, Any]] = {}
    checks: list[dict[str, Any]] = []
    rules: Counter = Counter()
    for rec in records:
        sha = rec["prefix"]
        data = (directory / PREFIXES / f"{sha}.jsonl").read_bytes()
        if sha not in prefixes:
            out = reduce_output(data)
            _replace(directory / EXPECTED / f"{sha}.reduce.json", out)  # refreshed on every finalize
            prefixes[sha] = {"bytes": len(data), "ok": json.loads(out)["ok"], "origin": rec["origin"]}
        key = rec["configuration"]
        if key is None:
            continue
        if key not in configurations:
            configurations[key] = json.loads((directory / CONFIGURATIONS / f"{key}.json").read_text("utf-8"))
        plan, rule = reference_check(data, configurations[key]["current"])
        if plan is None:
            continue  # a prefix that does not reduce has no plan; its reduce check still stands
        rules[rule] += 1
        checks.append({"prefix": sha, "configuration": key, "rule": rule, "plan": plan, "origin": rec["origin"]})
    index = {
        "format": FORMAT,
        "version": VERSION,
        "source": dict(source or {}),
        "outcomes": "scripted",
        "prefixes": prefixes,
        "configurations": sorted(configurations),
        "checks": checks,
        "rules": dict(sorted(rules.items(), key=lambda kv: _rule_order(kv[0]))),
    }
    _replace(directory / INDEX, json.dumps(index, ensure_ascii=False, indent=1).encode("utf-8") + b"\n")
    if obs_dir.is_dir():
        shutil.rmtree(obs_dir)
    return index


def _replace(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def _rule_order(rule: str) -> tuple:
    from chaos.campaign import PLANNER_RULES

    return (PLANNER_RULES.index(rule), "") if rule in PLANNER_RULES else (len(PLANNER_RULES), rule)


def pack_corpus(directory: Path, archive: Path) -> Path:
    """Zip a finalized corpus directory (paths at the archive's root, sorted, fixed timestamps: reproducible bytes)."""
    directory, archive = Path(directory), Path(archive)
    if not (directory / INDEX).is_file():
        raise CorpusError(f"{directory}: no {INDEX}; finalize the corpus first")
    archive.parent.mkdir(parents=True, exist_ok=True)
    tmp = archive.with_name(f".{archive.name}.tmp")
    names = sorted(p.relative_to(directory).as_posix() for p in directory.rglob("*")
                   if p.is_file() and not p.name.startswith("."))
    with zipfile.ZipFile(tmp, "w") as zf:
        for name in names:
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            zf.writestr(info, (directory / name).read_bytes(), compresslevel=9)
    os.replace(tmp, archive)
    return archive


# --------------------------------------------------------------------------------------------------------------
# Building: a campaign that records, then finalize (and pack)


def build_corpus(scenarios: Sequence[str], out: str | Path, workers: int = 0, *, reporter: Any = None,
                 options: Mapping[str, Any] | None = None) -> tuple[dict[str, Any], Any]:
    """Run a campaign over ``scenarios`` (empty: the default campaign) that records every kill prefix, then finalize.

    ``out`` is a new or empty directory, or a path ending in ``.zip`` (the directory is built in a temporary place
    and packed). The campaign runs in a temporary directory with ``keep="none"`` and no shrinking; its cases are not
    the product, the prefixes are. ``options`` overrides further ``CampaignOptions`` fields. Returns the corpus
    index and the ``CampaignResult``.
    """
    from chaos.campaign import CampaignOptions, run_campaign

    out = Path(out)
    packed = out.suffix == ".zip"
    if not packed and out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise CorpusError(f"{out}: exists and is not an empty directory")
    with tempfile.TemporaryDirectory(prefix="chaos-corpus-") as tmp:
        target = Path(tmp) / "corpus" if packed else out
        target.mkdir(parents=True, exist_ok=True)
        opts = CampaignOptions(scenarios=list(scenarios), workers=workers, out=str(Path(tmp) / "campaign"),
                               name="corpus-build", keep="none", shrink=False, corpus=str(target.resolve()))
        for name, value in (options or {}).items():
            setattr(opts, name, value)
        result = run_campaign(opts, reporter=reporter, command=["chaos", "corpus", "build", *scenarios])
        source = {"campaign": {"scenarios": list(scenarios) or ["(default library)"], "mode": opts.mode,
                               "depth": opts.depth, "faults": list(opts.faults),
                               "cases": result.cases, "rules": result.coverage.get("rules", {})},
                  "versions": result.versions, "commit": _git_commit()}
        (target / PREFIXES).mkdir(parents=True, exist_ok=True)
        index = finalize_corpus(target, source)
        if packed:
            pack_corpus(target, out)
    return index, result


def _git_commit() -> str | None:
    """The source tree's git commit (provenance of a built corpus), None outside a git checkout."""
    import subprocess

    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(__file__).resolve().parent, capture_output=True,
                             text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    return out.stdout.strip() or None


# --------------------------------------------------------------------------------------------------------------
# Loading: a built corpus (directory or zip) or the session-contract corpus


@dataclass(frozen=True)
class Prefix:
    """One log to reduce: its bytes and the expected reduction (``{"ok":true,"state"}`` / ``{"ok":false,"error"}``)."""

    key: str  # the content address (built corpora) or ``fixtures/<name>`` (the contract corpus)
    data: bytes
    expected: dict[str, Any]
    origin: str  # a human name: the case and kill that produced it, or the fixture name


@dataclass(frozen=True)
class PlanCheck:
    """One (prefix, configuration) pair with the reference plan and the §14.4 rule that gives it."""

    prefix: str  # Prefix.key
    configuration: str  # the configuration's key (or the planner fixture's name)
    current: dict[str, Any]  # SPEC §8.7, exactly its members: what the implementation's `plan` reads
    snapshot: dict[str, Any] | None  # the configurationSnapshot behind current's digest (None: unknown)
    plan: dict[str, Any]
    rule: str
    origin: str  # a human name
    scenario: str = ""  # grouping for sampling (the scenario, or the fixture family)


@dataclass
class Corpus:
    """A loaded corpus: its prefixes (reduce checks) and plan checks, whatever format it came from."""

    name: str
    path: str
    kind: str  # "built" or "contract"
    prefixes: dict[str, Prefix] = field(default_factory=dict)
    checks: list[PlanCheck] = field(default_factory=list)
    source: dict[str, Any] = field(default_factory=dict)

    def rules(self) -> set[str]:
        """The §14.4 rules the corpus's plan checks reach."""
        return {c.rule for c in self.checks}

    def select(self, rules: Sequence[str] = (), sample: int | None = None,
               keep: Callable[[PlanCheck], bool] | None = None) -> Corpus:
        """A sub-corpus: only checks whose rule is one of ``rules`` or a sub-rule of one ("P7.1" keeps P7.1.*),
        at most ``sample`` checks per (rule, scenario) in corpus order; the prefixes those checks need (all prefixes
        when no filter is given)."""
        checks = [c for c in self.checks if not rules or any(_rule_matches(c.rule, r) for r in rules)]
        if keep is not None:
            checks = [c for c in checks if keep(c)]
        if sample is not None:
            seen: Counter = Counter()
            kept = []
            for c in checks:
                if seen[(c.rule, c.scenario)] < sample:
                    seen[(c.rule, c.scenario)] += 1
                    kept.append(c)
            checks = kept
        if not rules and sample is None and keep is None:
            prefixes = dict(self.prefixes)
        else:
            wanted = {c.prefix for c in checks}
            prefixes = {k: p for k, p in self.prefixes.items() if k in wanted}
        return Corpus(self.name, self.path, self.kind, prefixes, checks, dict(self.source))


def _rule_matches(rule: str, selector: str) -> bool:
    return rule == selector or rule.startswith(selector + ".")


class _Files:
    """Read-only access to a corpus's files, in a directory or a zip archive."""

    def __init__(self, path: Path):
        self.path = path
        self.zip: zipfile.ZipFile | None = None
        if path.is_file():
            try:
                self.zip = zipfile.ZipFile(path)
            except (zipfile.BadZipFile, OSError) as exc:
                raise CorpusError(f"{path}: not a corpus (not a directory or a zip archive: {exc})") from None
            self.names = set(self.zip.namelist())

    def exists(self, name: str) -> bool:
        return name in self.names if self.zip is not None else (self.path / name).is_file()

    def read(self, name: str) -> bytes:
        try:
            if self.zip is not None:
                return self.zip.read(name)
            return (self.path / name).read_bytes()
        except (KeyError, OSError) as exc:
            raise CorpusError(f"{self.path}: cannot read {name}: {exc}") from None

    def json(self, name: str) -> Any:
        try:
            return json.loads(self.read(name).decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError) as exc:  # RecursionError: [[[… nested deep
            raise CorpusError(f"{self.path}: {name} is not JSON: {exc}") from None

    def close(self) -> None:
        if self.zip is not None:
            self.zip.close()


def load_corpus(path: str | Path) -> Corpus:
    """Load a built corpus (directory or zip) or the session-contract corpus (its root, ``fixtures/`` or
    ``planner-fixtures/``); raises ``CorpusError`` with one line when ``path`` is none of them."""
    path = Path(path)
    if not path.exists():
        raise CorpusError(f"{path}: no such corpus (a directory or a .zip)")
    files = _Files(path)
    try:
        if files.exists(INDEX):
            return _load_built(path, files)
        if path.is_dir():
            return _load_contract(path)
        raise CorpusError(f"{path}: not a corpus (no {INDEX} in the archive)")
    finally:
        files.close()


def _load_built(path: Path, files: _Files) -> Corpus:
    index = files.json(INDEX)
    if not isinstance(index, dict) or index.get("format") != FORMAT:
        raise CorpusError(f"{path}: {INDEX} is not a {FORMAT} index")
    if index.get("version") != VERSION:
        raise CorpusError(f"{path}: corpus format version {index.get('version')!r}; this killpoint reads {VERSION}")
    corpus = Corpus(name=path.stem if path.is_file() else path.name, path=str(path), kind="built",
                    source=index.get("source") or {})
    for sha, info in index["prefixes"].items():
        data = files.read(f"{PREFIXES}/{sha}.jsonl")
        expected = files.json(f"{EXPECTED}/{sha}.reduce.json")
        corpus.prefixes[sha] = Prefix(sha, data, expected, _origin_text(info.get("origin") or {}))
    configs = {key: files.json(f"{CONFIGURATIONS}/{key}.json") for key in index["configurations"]}
    for c in index["checks"]:
        conf = configs[c["configuration"]]
        origin = c.get("origin") or {}
        corpus.checks.append(PlanCheck(
            prefix=c["prefix"], configuration=c["configuration"], current=conf["current"],
            snapshot=conf.get("snapshot"), plan=c["plan"], rule=c["rule"],
            origin=_origin_text(origin),
            scenario=origin.get("scenario", "")))
    return corpus


def _origin_text(origin: Mapping[str, Any]) -> str:
    return f"{origin.get('case', '?')} (kill {origin.get('kill', '?')})"


def _manifest(path: Path) -> list[dict[str, Any]]:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
        return list(value["fixtures"])
    except (OSError, ValueError, KeyError, TypeError, RecursionError) as exc:
        raise CorpusError(f"{path}: not a fixture manifest: {exc}") from None


def _load_contract(path: Path) -> Corpus:
    """The session-contract corpus: reducer fixtures (reduce checks) and planner fixtures (plan checks)."""
    if (path / "fixtures" / "manifest.json").is_file() or (path / "planner-fixtures" / "manifest.json").is_file():
        root, parts = path, ("fixtures", "planner-fixtures")
    elif path.name in ("fixtures", "planner-fixtures") and (path / "manifest.json").is_file():
        root, parts = path.parent, (path.name,)
    else:
        raise CorpusError(f"{path}: not a corpus (no {INDEX}, and not the session-contract fixtures)")
    corpus = Corpus(name=CONTRACT_NAME + ("" if len(parts) == 2 else f"/{parts[0]}"), path=str(path),
                    kind="contract")
    fixtures = root / "fixtures"

    def add_prefix(name: str, file: str, expected: str | None) -> str:
        key = f"fixtures/{name}"
        if key not in corpus.prefixes:
            data = _read_bytes(fixtures / file)
            exp = json.loads(_read_bytes(fixtures / expected)) if expected else json.loads(reduce_output(data))
            corpus.prefixes[key] = Prefix(key, data, exp, key)
        return key

    reducer_entries = _manifest(fixtures / "manifest.json") if (fixtures / "manifest.json").is_file() else []
    by_file = {e["file"]: e for e in reducer_entries}
    if "fixtures" in parts:
        for e in reducer_entries:
            add_prefix(e["name"], e["file"], e["expected"])
    if "planner-fixtures" in parts:
        pdir = root / "planner-fixtures"
        for e in _manifest(pdir / "manifest.json"):
            try:
                case = json.loads(_read_bytes(pdir / e["input"]))
                expected = json.loads(_read_bytes(pdir / e["expected"]))
                session_file = case["sessionFile"]
                current = case["current"]
            except (ValueError, KeyError, TypeError) as exc:
                raise CorpusError(f"{pdir / e.get('input', '?')}: not a planner fixture: {exc}") from None
            entry = by_file.get(session_file)
            name = entry["name"] if entry else Path(session_file).stem
            key = add_prefix(name, session_file, entry["expected"] if entry else None)
            data = corpus.prefixes[key].data
            _, rule = reference_check(data, current)
            corpus.checks.append(PlanCheck(
                prefix=key, configuration=f"planner-fixtures/{e['name']}", current=strip_current(current),
                snapshot=None, plan=expected, rule=rule or "unplannable", origin=f"planner-fixtures/{e['name']}",
                scenario=e["name"]))
    return corpus


def _read_bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise CorpusError(f"{path}: cannot read: {exc.strerror or exc}") from None


def default_corpus() -> Path:
    """The shipped corpus (package data); ``CorpusError`` when this installation lacks it."""
    if not DEFAULT_CORPUS.is_file():
        raise CorpusError(f"the default corpus {DEFAULT_CORPUS} is missing: pass --corpus DIR "
                          "(or build one with `chaos corpus build --out DIR`)")
    return DEFAULT_CORPUS


def summarize(corpora: Iterable[Corpus]) -> list[str]:
    """One human line per corpus: prefixes, checks and rules reached (``N/27``)."""
    from chaos.campaign import PLANNER_RULES

    lines = []
    for c in corpora:
        reached = [r for r in PLANNER_RULES if r in c.rules()]
        lines.append(f"{c.name}: {len(c.prefixes)} prefixes, {len(c.checks)} plan checks, "
                     f"{len(reached)}/{len(PLANNER_RULES)} planner rules")
    return lines
