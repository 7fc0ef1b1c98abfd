"""Properties of ``snapshot_json`` over generated inputs (spec: json.md): JSON values
round-trip; everything else is a ``ValueError``."""

from __future__ import annotations

import datetime
import decimal
import enum
import json
import math
from collections.abc import Mapping
from typing import Any, cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import toolrail as tr

# ---- snapshot_json -----------------------------------------------------------------

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
)


json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=25,
)


class Color(enum.StrEnum):
    RED = "red"


class Level(enum.IntEnum):
    HIGH = 3


class Ratio(float):
    pass


# JSON in other Python clothes: tuples, subclasses of str/int/float, other Mappings.
json_like = st.recursive(
    json_scalars
    | st.just(Color.RED)
    | st.just(Level.HIGH)
    | st.floats(allow_nan=False, allow_infinity=False).map(Ratio),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.lists(inner, max_size=4).map(tuple)
        | st.dictionaries(st.text() | st.just(Color.RED), inner, max_size=4)
        | st.dictionaries(st.text(), inner, max_size=3).map(
            lambda d: cast(Mapping[str, Any], _ReadOnly(d))
        )
    ),
    max_leaves=25,
)


class _ReadOnly(Mapping[str, Any]):
    def __init__(self, data: dict[str, Any]) -> None:
        self._data = data

    def __getitem__(self, key: str) -> Any:
        return self._data[key]

    def __iter__(self) -> Any:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)


def assert_deep_frozen(value: Any) -> None:
    stack = [value]
    while stack:
        item = stack.pop()
        if type(item) is tr.FrozenDict:
            assert all(type(k) is str for k in item)
            stack.extend(item.values())
        elif type(item) is tuple:
            stack.extend(item)
        else:
            assert item is None or type(item) in (bool, int, float, str)
            assert type(item) is not float or math.isfinite(item)


@settings(max_examples=300, deadline=None)
@given(json_values)
def test_snapshot_json_round_trips_every_json_value(value: Any) -> None:
    frozen = tr.snapshot_json(value)
    assert json.loads(json.dumps(frozen)) == value
    assert tr.thaw(frozen) == value
    assert tr.snapshot_json(frozen) is frozen
    assert_deep_frozen(frozen)


@settings(max_examples=200, deadline=None)
@given(json_like)
def test_snapshot_json_accepts_json_in_other_python_clothes_as_its_plain_form(value: Any) -> None:
    frozen = tr.snapshot_json(value)
    assert_deep_frozen(frozen)
    plain = json.loads(json.dumps(value, default=dict))
    assert json.loads(json.dumps(frozen)) == plain


class Opaque:
    """An object whose every protocol raises."""

    def _boom(self, *args: object) -> Any:
        raise RuntimeError("opaque")

    __eq__ = __hash__ = __str__ = __repr__ = __iter__ = __len__ = _boom


class Unreadable(dict[str, Any]):
    def _boom(self, *args: object) -> Any:
        raise RuntimeError("unreadable")

    items = keys = values = __iter__ = __len__ = _boom


def cyclic() -> list[Any]:
    loop: list[Any] = []
    loop.append(loop)
    return loop


non_json_leaves = st.one_of(
    st.sets(st.integers(), max_size=3),
    st.frozensets(st.integers(), max_size=3),
    st.binary(max_size=4),
    st.binary(max_size=4).map(bytearray),
    st.sampled_from([math.nan, math.inf, -math.inf]),
    st.dictionaries(
        st.integers()
        | st.none()
        | st.booleans()
        | st.tuples(st.integers())
        | st.floats(allow_nan=False),
        json_scalars,
        min_size=1,
        max_size=3,
    ),
    st.sampled_from(
        [
            decimal.Decimal("1.5"),
            datetime.datetime(2020, 1, 1),
            object(),
            len,
            Ratio("nan"),
            complex(1, 2),
        ]
    ),
    st.builds(Opaque),
    st.builds(Unreadable, st.just({"a": 1})),
    st.builds(cyclic),
    st.tuples(st.sets(st.integers(), min_size=1, max_size=2)),
)


def _insert(parts: tuple[list[Any], Any, int]) -> list[Any]:
    items, bad, at = parts
    items.insert(min(at, len(items)), bad)
    return items


def _put(parts: tuple[dict[str, Any], str, Any]) -> dict[str, Any]:
    items, key, bad = parts
    items[key] = bad
    return items


non_json = st.recursive(
    non_json_leaves,
    lambda inner: st.one_of(
        st.tuples(st.lists(json_values, max_size=3), inner, st.integers(0, 3)).map(_insert),
        st.tuples(st.lists(json_values, max_size=3), inner).map(
            lambda parts: (*parts[0], parts[1])
        ),
        st.tuples(st.dictionaries(st.text(), json_values, max_size=3), st.text(), inner).map(_put),
    ),
    max_leaves=6,
)


@settings(max_examples=300, deadline=None)
@given(non_json)
def test_snapshot_json_rejects_everything_else_with_value_error_only(value: Any) -> None:
    with pytest.raises(ValueError, match=r"^value is not lossless JSON: \$"):
        tr.snapshot_json(value)
