"""The JSON text the store writes, made by one encoder built once instead of once per value.

Contract: ``encoder(default)`` returns ``encode(value)``, whose text is exactly
``json.dumps(value, default=default)`` (``default=None``: ``json.dumps(value)``, TypeError for what
is not JSON), byte for byte: the same separators, ASCII escapes, ``NaN``/``Infinity``, float and
int text, key order, and ``ValueError`` for a circular value. ``json.dumps`` builds its C encoder
anew for every call (``JSONEncoder.iterencode``), a few microseconds that the store paid for each
reported result; ``encode`` reuses one. Where the C encoder is missing, or gives other text for a
probe value, ``encode`` is ``json.JSONEncoder(default=default).encode`` itself.
"""
from __future__ import annotations

import json
import json.encoder
from typing import Any, Callable

__all__ = ["encoder"]

# Values whose text covers what the C encoder is asked to write like ``json.dumps``.
_PROBE: Any = {"a": [1, -0.0, 1e300, 5e-324, float("nan"), float("-inf"), True, None],
               "\u00e9\n": {"1": "x\"\\"}, "": []}


def encoder(default: Callable[[Any], Any] | None = None) -> Callable[[Any], str]:
    """``encode(value)``: the text of ``json.dumps(value, default=default)`` (see the module)."""
    plain = json.JSONEncoder(default=default)
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:
        return plain.encode
    markers: dict[int, Any] = {}     # the circular check of json.dumps; empty between calls
    try:
        chunks = make(markers, plain.default, json.encoder.encode_basestring_ascii, None,
                      plain.key_separator, plain.item_separator, plain.sort_keys,
                      plain.skipkeys, plain.allow_nan)
    except TypeError:                # another Python's signature
        return plain.encode

    def encode(value: Any) -> str:
        try:
            return "".join(chunks(value, 0))
        except BaseException:
            markers.clear()          # the C encoder leaves its marks behind when it fails
            raise

    try:
        same = encode(_PROBE) == json.dumps(_PROBE)
    except Exception:
        same = False
    return encode if same else plain.encode
