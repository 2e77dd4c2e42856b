"""The store's JSON encoders give exactly ``json.dumps``'s text, byte for byte."""
from __future__ import annotations

import json
import math
import random
import struct

import pytest

from hypersack.runtime.storage import json_text
from hypersack.runtime.storage.json_text import encoder


def _floats(rng: random.Random, n: int) -> list[float]:
    """Edge values, then floats of every magnitude (random bit patterns: subnormals included)."""
    edges = [0.0, -0.0, 1.0, -1.0, 0.1, 1e300, -1e300, 1e-300, 5e-324, -5e-324, 1.7976931348623157e308,
             2.2250738585072014e-308, 1e16, 1e15, 123456789012345678.0, 0.5, 1 / 3, math.pi,
             float("nan"), float("inf"), float("-inf")]
    drawn = [struct.unpack("<d", rng.getrandbits(64).to_bytes(8, "little"))[0] for _ in range(n)]
    return edges + drawn + [rng.uniform(-1e6, 1e6) for _ in range(n)]


def _ints(rng: random.Random, n: int) -> list[int]:
    return [0, 1, -1, 2**63, -(2**63) - 1, 10**40] + [rng.randint(-(10**12), 10**12) for _ in range(n)]


class Odd:
    def __str__(self) -> str:
        return "odd \u00e9"


@pytest.mark.parametrize("default", [str, None])
def test_metrics_of_every_kind_encode_as_json_dumps_does(default):
    encode, rng = encoder(default), random.Random(5)
    values: list = [*_floats(rng, 3000), *_ints(rng, 500), True, False, None, "s\u00e9\n\"\\",
                    [1, 2.5], {"nested": [0.1, {"deep": -0.0}]}, (1, 2)]
    keys = ["score", "loss/val", "\u00e9t\u00e9", "a\"b", "", "x" * 50, "\x00"]
    for i, value in enumerate(values):
        metrics = {keys[i % len(keys)]: value, "step": i, "other": values[(i * 7) % len(values)]}
        assert encode(metrics) == json.dumps(metrics, default=default)
        assert encode(value) == json.dumps(value, default=default)
    mixed_keys = {1: 0.5, 2.5: 1, False: "f", None: 0}     # keys JSON writes as text
    assert encode(mixed_keys) == json.dumps(mixed_keys, default=default)
    assert encode({}) == "{}" and encode("text") == json.dumps("text")


def test_what_is_not_json_is_its_text_with_str_and_an_error_without():
    metrics = {"score": Odd(), "set": {1}}
    assert encoder(str)(metrics) == json.dumps(metrics, default=str)
    with pytest.raises(TypeError, match="not JSON serializable"):
        encoder()(metrics)


def test_a_circular_value_is_refused_and_the_encoder_stays_usable():
    encode = encoder(str)
    loop: list = []
    loop.append(loop)
    with pytest.raises(ValueError, match="Circular"):
        encode({"a": loop})
    # The list is no cycle any more: an encoder that kept the marks of the failed call refuses it.
    loop[0] = 1.5
    value = {"a": loop, "b": loop}
    assert encode(value) == json.dumps(value) == '{"a": [1.5], "b": [1.5]}'
    with pytest.raises(TypeError):
        encoder()({"a": loop, "o": [object()]})
    assert encode(value) == json.dumps(value)


def test_without_the_c_encoder_it_is_json_dumps_itself(monkeypatch):
    monkeypatch.setattr(json_text.json.encoder, "c_make_encoder", None)
    encode = encoder(str)
    assert encode({"x": float("nan"), "o": Odd()}) == json.dumps({"x": float("nan"), "o": Odd()},
                                                                  default=str)
