"""parkgate.jcs: the canonical JSON every hash is taken of (RFC 8785), checked
against the vector docs/CLIENT_TOOLS.md gives clients in other languages."""

from __future__ import annotations

import hashlib
import json
import struct
import subprocess
import sys

import pytest

from parkgate import jcs
from parkgate.models import input_sha256

#: The test vector of docs/CLIENT_TOOLS.md ("Computing input_sha256"), as a
#: client receives it: unicode, keys out of order (an astral key sorts before
#: U+FB01 by UTF-16), integers, 1e21, 0.1, 1.0 and 1.5e-7.
VECTOR_JSON = (
    '{"zeta": {"b": 2, "a": [1, 1e21, 0.1, -7, 1.0, 1.5e-7]}, "alpha": "café ☕ 😀",'
    ' "count": 100, "ﬁ": true, "😀": null, "line": "a\\nb\\"c"}'
)
VECTOR_CANONICAL = (
    '{"alpha":"café ☕ 😀","count":100,"line":"a\\nb\\"c",'
    '"zeta":{"a":[1,1e+21,0.1,-7,1,1.5e-7],"b":2},"😀":null,"ﬁ":true}'
)
VECTOR_SHA256 = "a000ae642ccc65a9e0419b590f6ce526680e04d85104d3bb226621a3d70b374e"


def test_the_documented_vector() -> None:
    value = json.loads(VECTOR_JSON)
    data = jcs.canonical_bytes(value)
    assert data == VECTOR_CANONICAL.encode("utf-8")
    assert len(data) == 123
    assert hashlib.sha256(data).hexdigest() == VECTOR_SHA256
    assert input_sha256(value) == VECTOR_SHA256


def test_the_vector_is_in_the_docs() -> None:
    from pathlib import Path

    doc = (Path(__file__).parents[2] / "docs" / "CLIENT_TOOLS.md").read_text()
    assert VECTOR_JSON in doc and VECTOR_CANONICAL in doc and VECTOR_SHA256 in doc


# RFC 8785 Appendix B: IEEE 754 bit patterns and their canonical spelling.
RFC_NUMBERS = [
    ("0000000000000000", "0"),
    ("8000000000000000", "0"),
    ("0000000000000001", "5e-324"),
    ("8000000000000001", "-5e-324"),
    ("7fefffffffffffff", "1.7976931348623157e+308"),
    ("ffefffffffffffff", "-1.7976931348623157e+308"),
    ("4340000000000000", "9007199254740992"),
    ("c340000000000000", "-9007199254740992"),
    ("4430000000000000", "295147905179352830000"),
    ("44b52d02c7e14af5", "9.999999999999997e+22"),
    ("44b52d02c7e14af6", "1e+23"),
    ("44b52d02c7e14af7", "1.0000000000000001e+23"),
    ("444b1ae4d6e2ef4e", "999999999999999700000"),
    ("444b1ae4d6e2ef4f", "999999999999999900000"),
    ("444b1ae4d6e2ef50", "1e+21"),
    ("3eb0c6f7a0b5ed8c", "9.999999999999997e-7"),
    ("3eb0c6f7a0b5ed8d", "0.000001"),
    ("41b3de4355555553", "333333333.3333332"),
    ("41b3de4355555554", "333333333.33333325"),
    ("41b3de4355555555", "333333333.3333333"),
    ("41b3de4355555556", "333333333.3333334"),
    ("41b3de4355555557", "333333333.33333343"),
    ("becbf647612f3696", "-0.0000033333333333333333"),
    ("43143ff3c1cb0959", "1424953923781206.2"),
]


@pytest.mark.parametrize(("bits", "spelled"), RFC_NUMBERS)
def test_rfc8785_numbers(bits: str, spelled: str) -> None:
    (value,) = struct.unpack(">d", bytes.fromhex(bits))
    assert jcs.canonical_text([value]) == f"[{spelled}]"


def test_integers_are_exact_beyond_the_double_range() -> None:
    """The one extension: two different big ids never hash alike."""
    assert jcs.canonical_text(2**53 - 1) == "9007199254740991"
    assert jcs.canonical_text(2**60 + 1) == "1152921504606846977"
    assert jcs.sha256_hex({"id": 2**60}) != jcs.sha256_hex({"id": 2**60 + 1})


@pytest.mark.parametrize(
    ("value", "where", "words"),
    [
        ({"a": [1, float("nan")]}, "$.a[1]", "NaN is not a JSON number"),
        ({"x y": float("inf")}, "$['x y']", "Infinity is not a JSON number"),
        ({"n": {"m": -float("inf")}}, "$.n.m", "-Infinity is not a JSON number"),
        ({"s": "\ud800"}, "$.s", "lone surrogate"),
        ({1: 2}, "$", "key is not a string"),
        ({"o": object()}, "$.o", "not a JSON value"),
    ],
)
def test_what_has_no_canonical_form_is_refused_by_name(
    value: object, where: str, words: str
) -> None:
    with pytest.raises(jcs.NotCanonicalError) as caught:
        jcs.canonical_bytes(value)
    assert caught.value.path == where and words in caught.value.problem
    assert isinstance(jcs.problem(value), jcs.NotCanonicalError)
    with pytest.raises(ValueError, match=r"not|lone"):
        jcs.check(value)


def test_legacy_form_is_what_older_versions_hashed() -> None:
    """Kept to verify old hashes: Python's float spelling and code point order."""
    value = json.loads(VECTOR_JSON)
    assert jcs.legacy_text(value) == (
        '{"alpha":"café ☕ 😀","count":100,"line":"a\\nb\\"c",'
        '"zeta":{"a":[1,1e+21,0.1,-7,1.0,1.5e-07],"b":2},"ﬁ":true,"😀":null}'
    )
    assert jcs.legacy_sha256_hex(value) != VECTOR_SHA256
    # Without floats or astral keys both forms are the same bytes.
    plain = {"b": [1, "é\n"], "a": None}
    assert jcs.legacy_text(plain) == jcs.canonical_text(plain)


def test_importable_without_the_server() -> None:
    """The agent client and hook processes use it: no FastAPI, Temporal, SQLAlchemy."""
    code = (
        "import sys, parkgate.jcs as j; j.sha256_hex({'a': 0.1});"
        "print(sorted(m for m in ('fastapi', 'temporalio', 'sqlalchemy', 'pydantic')"
        " if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=60)
    assert out.stdout.strip() == "[]"
