"""The reducer against every entry of the shared fixture manifest: raw bytes in, deep-equal state or exact error out."""

from __future__ import annotations

import json

import pytest

from agent.session.errors import CorruptionError
from agent.session.reducer import reduce_session
from tests.conftest import reducer_manifest

ENTRIES = reducer_manifest()


def same(a: object, b: object) -> bool:
    """Deep equality that also requires equal JSON types (1, 1.0 and true differ; member order is ignored)."""
    if type(a) is not type(b):
        return False
    if type(a) is dict:
        return a.keys() == b.keys() and all(same(a[key], b[key]) for key in a)
    if type(a) is list:
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b


def test_same_distinguishes_json_types():
    """The comparison helper treats 1, 1.0 and true as different values."""
    assert not same({"a": 1}, {"a": 1.0}) and not same([1], [True]) and same({"a": [1, None]}, {"a": [1, None]})


def test_manifest_is_present(corpus):
    """The reducer manifest exists and lists the 46 cases the corpus README announces."""
    manifest = json.loads((corpus / "fixtures" / "manifest.json").read_text())
    assert len(manifest["fixtures"]) == len(ENTRIES) == 46


@pytest.mark.parametrize("entry", ENTRIES, ids=[entry["name"] for entry in ENTRIES])
def test_fixture(corpus, entry):
    """The fixture's raw bytes reduce to exactly the expected state, or fail with exactly the expected error."""
    data = (corpus / "fixtures" / entry["file"]).read_bytes()
    expected = json.loads((corpus / "fixtures" / entry["expected"]).read_text())
    if expected["ok"]:
        state = reduce_session(data)
        # Round-trip through JSON: the comparison is on the exported JSON form (ints stay ints, null != absent).
        assert same(json.loads(json.dumps(state)), expected["state"])
        assert state == expected["state"]
        assert "boundary" not in json.dumps(state)
    else:
        with pytest.raises(CorruptionError) as info:
            reduce_session(data)
        assert info.value.to_json() == expected["error"]
        assert info.value.seq == expected["error"].get("seq")
