from __future__ import annotations

import copy
import dataclasses
import datetime as dt
import enum
import json
import math
import pickle
from collections import OrderedDict, namedtuple
from collections.abc import Callable, Iterator, Mapping
from decimal import Decimal
from types import MappingProxyType
from typing import Any, NoReturn

import pydantic
import pytest
from hypothesis import given
from hypothesis import strategies as st

from toolrail._model import lossless as _json
from toolrail._model.lossless import MISSING, FrozenDict, JsonValue, snapshot_json, thaw

PREFIX = "value is not lossless JSON: "


def rejection(value: Any) -> str:
    with pytest.raises(ValueError, match=r"^value is not lossless JSON: \$") as info:
        snapshot_json(value)
    return str(info.value)


def frozen_dict(value: JsonValue) -> FrozenDict:
    assert type(value) is FrozenDict
    return value


def frozen_tuple(value: JsonValue) -> tuple[JsonValue, ...]:
    assert type(value) is tuple
    return value


class Color(enum.StrEnum):
    RED = "red"


class Size(enum.IntEnum):
    LARGE = 3


class Ratio(float):
    pass


@dataclasses.dataclass
class Point:
    x: int


class Model(pydantic.BaseModel):
    x: int


def boom(*args: object, **kwargs: object) -> NoReturn:
    raise RuntimeError("boom")


class Explosive:
    """Every dunder a walker might touch raises."""

    __eq__ = __hash__ = __repr__ = __str__ = boom
    __bool__ = __len__ = __iter__ = __getattribute__ = boom
    items = keys = values = boom


class ExplodingMapping(Mapping[str, Any]):
    def __getitem__(self, key: str) -> Any:
        raise RuntimeError("getitem exploded")

    def __iter__(self) -> Iterator[str]:
        raise RuntimeError("iter exploded")

    def __len__(self) -> int:
        raise RuntimeError("len exploded")


class ItemsRaise(dict[str, Any]):
    def items(self) -> Any:
        raise RuntimeError("items exploded")


class ItemsRaiseValueError(dict[str, Any]):
    def items(self) -> Any:
        raise ValueError("not ours")


class KeysRaise(dict[str, Any]):
    def keys(self) -> Any:
        raise RuntimeError("keys exploded")


class ItemsNotPairs(dict[str, Any]):
    def items(self) -> Any:
        return [1, 2]


class IterRaise(list[Any]):
    def __iter__(self) -> Iterator[Any]:
        raise RuntimeError("iter exploded")


class UnprintableError(Exception):
    def __str__(self) -> str:
        raise RuntimeError("str exploded")


class UnprintableItems(dict[str, Any]):
    def items(self) -> Any:
        raise UnprintableError


class Sneaky:
    @property  # type: ignore[misc]
    def __class__(self) -> type:
        raise RuntimeError("class exploded")


class NamelessMeta(type):
    @property
    def __name__(self) -> str:  # type: ignore[override]
        raise RuntimeError("name exploded")


class Named(metaclass=NamelessMeta):
    pass


class BadKey:
    def __hash__(self) -> int:
        return 1

    __eq__ = __repr__ = __str__ = boom


class LyingStr(str):
    def __str__(self) -> str:
        raise RuntimeError("str exploded")


class LyingInt(int):
    def __int__(self) -> int:
        raise RuntimeError("int exploded")


class OddStr(str):
    """Equal only to itself, so a dict can hold it next to the plain str it spells."""

    def __eq__(self, other: object) -> bool:
        return self is other

    def __hash__(self) -> int:
        return id(self)


class CountingMapping(Mapping[str, Any]):
    def __init__(self, data: dict[str, Any]) -> None:
        self.data = data
        self.reads = 0

    def __getitem__(self, key: str) -> Any:
        return self.data[key]

    def __iter__(self) -> Iterator[str]:
        self.reads += 1
        return iter(self.data)

    def __len__(self) -> int:
        return len(self.data)


class CountingList(list[Any]):
    reads = 0

    def __iter__(self) -> Iterator[Any]:
        CountingList.reads += 1
        return super().__iter__()


class Doubling(dict[str, Any]):
    def items(self) -> Any:
        return [(key, value * 2) for key, value in super().items()]


def test_the_module_exports_exactly_the_five_public_names() -> None:
    assert _json.__all__ == ["FrozenDict", "JsonValue", "MISSING", "snapshot_json", "thaw"]


# Accepted


@pytest.mark.parametrize("value", [None, True, False, "", "héllo", 0, -1, 2**200, 1.5, 1e308])
def test_plain_scalars_are_returned_as_they_are(value: Any) -> None:
    assert snapshot_json(value) is value


def test_negative_zero_keeps_its_sign() -> None:
    result = snapshot_json({"x": -0.0})
    assert math.copysign(1.0, frozen_dict(result)["x"]) == -1.0


def test_int_enum_becomes_a_plain_int() -> None:
    result = frozen_tuple(snapshot_json([Size.LARGE]))
    assert result == (3,)
    assert type(result[0]) is int


def test_int_subclass_is_read_by_value_not_through_its_own_int() -> None:
    result = frozen_tuple(snapshot_json([LyingInt(7)]))
    assert result == (7,)
    assert type(result[0]) is int


def test_bools_stay_bools() -> None:
    result = frozen_dict(snapshot_json({"a": True, "b": [False]}))
    assert type(result["a"]) is bool
    assert type(result["b"][0]) is bool


def test_float_subclass_becomes_a_plain_float() -> None:
    result = frozen_tuple(snapshot_json([Ratio(0.25)]))
    assert result == (0.25,)
    assert type(result[0]) is float


def test_str_enum_as_value_and_as_key_becomes_a_plain_str() -> None:
    result = frozen_dict(snapshot_json({Color.RED: Color.RED}))
    assert result == {"red": "red"}
    [(key, value)] = result.items()
    assert type(key) is str
    assert type(value) is str


def test_str_subclass_is_read_by_value_not_through_its_own_str() -> None:
    result = frozen_tuple(snapshot_json([LyingStr("real")]))
    assert result == ("real",)
    assert type(result[0]) is str


def test_dict_becomes_a_frozen_dict_with_keys_in_input_order() -> None:
    result = snapshot_json({"b": 1, "a": 2, "c": {"z": 1, "y": 2}})
    assert type(result) is FrozenDict
    assert list(result) == ["b", "a", "c"]
    assert type(result["c"]) is FrozenDict
    assert list(result["c"]) == ["z", "y"]


@pytest.mark.parametrize(
    "mapping",
    [
        MappingProxyType({"a": 1, "b": [2]}),
        OrderedDict([("a", 1), ("b", [2])]),
        CountingMapping({"a": 1, "b": [2]}),
    ],
    ids=["mappingproxy", "ordereddict", "custom-mapping"],
)
def test_any_mapping_with_str_keys_becomes_a_frozen_dict(mapping: Mapping[str, Any]) -> None:
    result = snapshot_json(mapping)
    assert type(result) is FrozenDict
    assert result == {"a": 1, "b": (2,)}


def test_lists_and_tuples_become_tuples_all_the_way_down() -> None:
    result = snapshot_json([1, (2, [3, ()]), []])
    assert result == (1, (2, (3, ())), ())
    assert type(frozen_tuple(result)[1]) is tuple


def test_a_named_tuple_becomes_a_plain_tuple() -> None:
    pair = namedtuple("pair", "left right")
    result = snapshot_json(pair(1, [2]))
    assert type(result) is tuple
    assert result == (1, (2,))


def test_a_dict_subclass_is_read_through_its_own_items() -> None:
    assert snapshot_json(Doubling(a=1, b=2)) == {"a": 2, "b": 4}


def test_each_container_is_read_once() -> None:
    mapping = CountingMapping({"a": 1})
    CountingList.reads = 0
    snapshot_json({"m": mapping, "l": CountingList([1, 2])})
    assert mapping.reads == 1
    assert CountingList.reads == 1


def test_a_snapshot_does_not_follow_later_changes_to_its_input() -> None:
    source: dict[str, Any] = {"path": "/tmp/a", "lines": [1, 2]}
    result = snapshot_json(source)
    source["path"] = "/etc/passwd"
    source["lines"].append(3)
    assert result == {"path": "/tmp/a", "lines": (1, 2)}
    assert type(source) is dict


def test_a_flat_snapshot_is_a_copy_not_the_input() -> None:
    source = {"path": "/tmp/a", "offset": 3, "limit": 10}
    result = snapshot_json(source)
    assert result == source
    assert result is not source
    assert type(result) is FrozenDict


@pytest.mark.parametrize(
    "value",
    [
        {"path": "/tmp/a", "offset": 3},
        {"a": [1, {"b": (2.5, None)}], "c": {}},
        [1, "two", [3.0, {"four": True}]],
    ],
)
def test_an_earlier_snapshot_is_returned_as_itself(value: Any) -> None:
    first = snapshot_json(value)
    assert snapshot_json(first) is first


def test_the_parts_of_an_earlier_snapshot_are_reused_inside_a_new_one() -> None:
    inner = snapshot_json({"b": [1, 2]})
    result = frozen_dict(snapshot_json({"a": inner}))
    assert result["a"] is inner


def test_a_hand_built_frozen_dict_of_plain_values_is_returned_as_itself() -> None:
    hand_built = FrozenDict({"a": 1, "b": (2, FrozenDict(c="d"))})
    assert snapshot_json(hand_built) is hand_built


def test_a_hand_built_frozen_dict_holding_a_list_is_copied_into_frozen_form() -> None:
    hand_built = FrozenDict({"a": [1, 2]})
    result = snapshot_json(hand_built)
    assert result is not hand_built
    assert result == {"a": (1, 2)}


def test_a_hand_built_frozen_dict_holding_a_bad_value_is_rejected() -> None:
    assert rejection(FrozenDict({"a": object()})) == PREFIX + "$.a is an object"
    assert rejection(FrozenDict({"a": ({1},)})) == PREFIX + "$.a[0] is a set"


def test_a_hand_built_frozen_dict_with_a_non_str_key_is_rejected() -> None:
    hand_built = FrozenDict({1: "a"})  # type: ignore[dict-item]
    assert rejection(hand_built) == PREFIX + "$ has a non-str key 1"


# Rejected


def test_a_datetime_is_rejected_with_its_path() -> None:
    value = {"items": [{}, {"when": "today"}, {"when": dt.datetime(2024, 1, 1)}]}
    assert rejection(value) == "value is not lossless JSON: $.items[2].when is a datetime"


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"x": math.nan}, "$.x is a non-finite float (nan)"),
        ({"x": math.inf}, "$.x is a non-finite float (inf)"),
        ([1.0, -math.inf], "$[1] is a non-finite float (-inf)"),
        ({"x": Ratio("nan")}, "$.x is a non-finite float (nan)"),
        (math.nan, "$ is a non-finite float (nan)"),
    ],
)
def test_nan_and_infinities_are_rejected_with_their_path(value: Any, message: str) -> None:
    assert rejection(value) == PREFIX + message


def plain_function() -> None:
    pass


@pytest.mark.parametrize(
    ("value", "what"),
    [
        ({1, 2}, "a set"),
        (frozenset(), "a frozenset"),
        (b"x", "a bytes"),
        (bytearray(b"x"), "a bytearray"),
        (Decimal("1.5"), "a Decimal"),
        (dt.date(2024, 1, 1), "a date"),
        (Point(1), "a Point"),
        (Model(x=1), "a Model"),
        (object(), "an object"),
        (1j, "a complex"),
        (plain_function, "a function"),
        (lambda: None, "a function"),
        (len, "a builtin_function_or_method"),
        (int, "a type"),
        (MISSING, "a _Missing"),
    ],
)
def test_other_objects_are_rejected_by_type_name(value: Any, what: str) -> None:
    assert rejection({"v": [value]}) == f"{PREFIX}$.v[0] is {what}"


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"a": {1: "x"}}, "$.a has a non-str key 1"),
        ({(1, 2): 0}, "$ has a non-str key (1, 2)"),
        ([{None: 0}], "$[0] has a non-str key None"),
        ({b"k": 0}, "$ has a non-str key b'k'"),
        ({"a": 1, 2.5: {3}}, "$ has a non-str key 2.5"),
    ],
)
def test_non_str_keys_are_rejected_with_their_repr(value: Any, message: str) -> None:
    assert rejection(value) == PREFIX + message


def test_a_long_key_repr_is_shortened() -> None:
    key = tuple(range(100))
    assert rejection({key: 0}) == f"{PREFIX}$ has a non-str key {repr(key)[:77]}..."


@pytest.mark.parametrize(
    ("key", "step"),
    [
        ("snake_case", ".snake_case"),
        ("café", ".café"),
        ("class", ".class"),
        ("key with space", '["key with space"]'),
        ("1st", '["1st"]'),
        ("a-b", '["a-b"]'),
        ("", '[""]'),
        ('say "hi"', '["say \\"hi\\""]'),
        ("line\nbreak", '["line\\nbreak"]'),
    ],
)
def test_identifier_keys_are_dotted_and_other_keys_are_json_quoted(key: str, step: str) -> None:
    assert rejection({"top": {key: [{1}]}}) == f"{PREFIX}$.top{step}[0] is a set"


def test_keys_that_become_the_same_plain_str_are_rejected_as_duplicates() -> None:
    value = {"a": {OddStr("x"): 1, "x": 2}}
    assert rejection(value) == PREFIX + '$.a has a duplicate key "x"'


def test_the_first_offending_value_in_order_is_named() -> None:
    assert rejection([1, {"a": {2}}, b"x"]) == PREFIX + "$[1].a is a set"


def test_a_list_that_contains_itself_is_rejected_as_a_cycle() -> None:
    loop: list[Any] = []
    loop.append(loop)
    assert rejection(loop) == PREFIX + "$[0] is a cycle back to $"


def test_a_nested_cycle_names_both_ends() -> None:
    inner: dict[str, Any] = {"b": []}
    inner["b"].append(inner)
    assert rejection({"a": inner}) == PREFIX + "$.a.b[0] is a cycle back to $.a"


def test_a_shared_subtree_is_not_mistaken_for_a_cycle() -> None:
    shared = [1, {"x": 2}]
    result = frozen_dict(snapshot_json({"a": shared, "b": [shared]}))
    assert result["a"] is result["b"][0]


# Hostile input: nothing but ValueError escapes


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"x": Explosive()}, "$.x is an Explosive"),
        ({"x": Sneaky()}, "$.x is a Sneaky"),
        ({"x": Named()}, "$.x is a Named"),
        ({BadKey(): 1}, "$ has a non-str key <BadKey object>"),
        ({"m": ItemsRaise(a=1)}, "$.m could not be read: RuntimeError: items exploded"),
        (
            {"m": ItemsRaiseValueError()},
            "$.m could not be read: ValueError: not ours",
        ),
        ({"m": ExplodingMapping()}, "$.m could not be read: RuntimeError: iter exploded"),
        ([0, IterRaise()], "$[1] could not be read: RuntimeError: iter exploded"),
        ({"m": UnprintableItems()}, "$.m could not be read: UnprintableError"),
        (
            {"m": ItemsNotPairs()},
            "$.m could not be read: TypeError: cannot unpack non-iterable int object",
        ),
    ],
)
def test_hostile_input_raises_only_value_error_with_a_path(value: Any, message: str) -> None:
    assert rejection(value) == PREFIX + message


def test_a_mapping_is_read_through_items_so_a_raising_keys_is_never_called() -> None:
    assert snapshot_json({"m": KeysRaise(a=1)}) == {"m": {"a": 1}}


def test_the_readers_own_error_is_chained_as_the_cause() -> None:
    with pytest.raises(ValueError, match="could not be read") as info:
        snapshot_json([ItemsRaise()])
    assert isinstance(info.value.__cause__, RuntimeError)


# Depth and sharing


def nested_list(depth: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(depth):
        value = [value]
    return value


def test_a_hundred_thousand_deep_list_is_snapshotted_and_thawed_without_recursion_error() -> None:
    depth = 100_000
    result = snapshot_json(nested_list(depth))
    node: Any = result
    for _ in range(depth):
        assert type(node) is tuple
        assert len(node) == 1
        node = node[0]
    assert node == ()
    assert snapshot_json(result) is result

    thawed = thaw(result)
    for _ in range(depth):
        assert type(thawed) is list
        thawed = thawed[0]
    assert thawed == []


def test_an_error_a_hundred_thousand_levels_deep_names_the_whole_path() -> None:
    depth = 100_000
    value: Any = {"a": {1}}
    for _ in range(depth - 1):
        value = {"a": value}
    assert rejection(value) == PREFIX + "$" + ".a" * depth + " is a set"


def test_a_sixty_level_dag_is_copied_once_per_container() -> None:
    level: Any = ["leaf"]
    for _ in range(60):
        level = [level, level]
    result: Any = snapshot_json(level)
    thawed: Any = thaw(result)
    for _ in range(60):
        assert result[0] is result[1]
        assert thawed[0] is thawed[1]
        result, thawed = result[0], thawed[0]
    assert result == ("leaf",)
    assert thawed == ["leaf"]


# FrozenDict


IMMUTABLE = "FrozenDict is immutable; use toolrail.thaw() for a mutable copy"


def merge_in_place(frozen: FrozenDict) -> None:
    frozen |= {"b": 2}


MUTATORS: dict[str, Callable[[FrozenDict], object]] = {
    "setitem": lambda d: d.__setitem__("b", 2),
    "delitem": lambda d: d.__delitem__("a"),
    "update": lambda d: d.update(b=2),
    "pop": lambda d: d.pop("a"),
    "popitem": lambda d: d.popitem(),
    "clear": lambda d: d.clear(),
    "setdefault": lambda d: d.setdefault("b", 2),
    "ior": merge_in_place,
}


@pytest.mark.parametrize("mutate", MUTATORS.values(), ids=MUTATORS.keys())
def test_every_frozen_dict_mutator_raises_type_error(
    mutate: Callable[[FrozenDict], object],
) -> None:
    frozen = frozen_dict(snapshot_json({"a": 1}))
    with pytest.raises(TypeError, match=r"^FrozenDict is immutable; use toolrail\.thaw\(\)"):
        mutate(frozen)
    assert frozen == {"a": 1}


def test_item_assignment_on_a_snapshot_raises_the_immutable_message() -> None:
    frozen = frozen_dict(snapshot_json({"a": 1}))
    with pytest.raises(TypeError) as info:
        frozen["a"] = 2
    assert str(info.value) == IMMUTABLE


def test_a_frozen_dict_is_a_dict_with_a_readable_repr() -> None:
    frozen = FrozenDict({"a": 1})
    assert isinstance(frozen, dict)
    assert repr(frozen) == "FrozenDict({'a': 1})"


def test_equal_frozen_dicts_hash_equal_whatever_their_key_order() -> None:
    first = snapshot_json({"a": 1, "b": [2]})
    second = snapshot_json({"b": [2], "a": 1})
    assert first == second
    assert hash(first) == hash(second)
    assert len({first, second}) == 1


def test_a_frozen_dict_holding_an_unhashable_value_is_not_hashable() -> None:
    with pytest.raises(TypeError):
        hash(FrozenDict({"a": []}))


def test_or_gives_a_new_frozen_dict() -> None:
    frozen = FrozenDict({"a": 1})
    merged = frozen | {"b": 2}
    assert type(merged) is FrozenDict
    assert merged == {"a": 1, "b": 2}
    assert frozen == {"a": 1}


@pytest.mark.parametrize("value", [{"a": [1, {"b": 2}]}, [1, [2, {"c": None}]]])
def test_copy_and_deepcopy_return_a_snapshot_as_it_is(value: Any) -> None:
    frozen = snapshot_json(value)
    assert copy.copy(frozen) is frozen
    assert copy.deepcopy(frozen) is frozen


def test_a_frozen_dict_survives_pickling() -> None:
    frozen = snapshot_json({"a": [1, {"b": "c"}]})
    restored = pickle.loads(pickle.dumps(frozen))
    assert restored == frozen
    assert type(restored) is FrozenDict
    assert type(restored["a"][1]) is FrozenDict


ROUND_TRIP_VALUES: list[Any] = [
    {"path": "/tmp/a", "offset": 3, "limit": 10},
    {"nested": {"list": [1, 2.5, "x", None, True], "empty": {}}, "é": ["ü"]},
    [[], {}, "", 0, -0.0, 2**100],
    "plain",
    None,
]


@pytest.mark.parametrize("value", ROUND_TRIP_VALUES)
def test_json_dumps_accepts_a_snapshot_and_loads_back_the_input(value: Any) -> None:
    frozen = snapshot_json(value)
    assert json.dumps(frozen) == json.dumps(value)
    assert json.loads(json.dumps(frozen)) == value


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: st.lists(children) | st.dictionaries(st.text(), children),
    max_leaves=30,
)


@given(json_values)
def test_any_json_value_survives_snapshot_dumps_loads_and_thaw(value: Any) -> None:
    frozen = snapshot_json(value)
    assert json.loads(json.dumps(frozen)) == value
    assert thaw(frozen) == value
    assert snapshot_json(frozen) is frozen


# MISSING


def test_missing_is_a_falsy_singleton_that_copies_and_pickles_as_itself() -> None:
    assert repr(MISSING) == "tr.MISSING"
    assert not MISSING
    assert copy.copy(MISSING) is MISSING
    assert copy.deepcopy(MISSING) is MISSING
    assert pickle.loads(pickle.dumps(MISSING)) is MISSING


# thaw


def test_thaw_returns_plain_mutable_dicts_and_lists() -> None:
    frozen = snapshot_json({"a": [1, {"b": (2,)}], "c": "d"})
    thawed = thaw(frozen)
    assert type(thawed) is dict
    assert type(thawed["a"]) is list
    assert type(thawed["a"][1]) is dict
    assert type(thawed["a"][1]["b"]) is list
    assert thawed == {"a": [1, {"b": [2]}], "c": "d"}
    thawed["a"].append(3)
    thawed["a"][1]["b"].append(4)
    assert frozen == {"a": (1, {"b": (2,)}), "c": "d"}


@pytest.mark.parametrize("value", [None, True, 3, 2.5, "text"])
def test_thaw_returns_scalars_as_they_are(value: JsonValue) -> None:
    assert thaw(value) is value


def test_thaw_gives_a_fresh_copy_each_time() -> None:
    frozen = snapshot_json({"a": [1]})
    first, second = thaw(frozen), thaw(frozen)
    assert first == second
    assert first is not second
    assert first["a"] is not second["a"]


def test_thaw_keeps_key_order() -> None:
    assert list(thaw(snapshot_json({"z": 1, "a": 2, "m": 3}))) == ["z", "a", "m"]
