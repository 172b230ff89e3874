"""Key groups: how a fields grouping maps a key to a task, so keyed state can move by group.

Flink's ``KeyGroupRangeAssignment``: a key's hash picks one of ``G`` key groups
(``topology.max.task.parallelism``, 128 when unset: Flink's ``maxParallelism``), and the
``n`` tasks of a bolt each own a contiguous range of groups. A key stays in its group
whatever ``n`` is, so a rescaled bolt's keyed state moves between tasks by whole groups.

- :func:`stable_hash` / :func:`fields_hash`: a key's hash, equal in every process (Python's
  ``hash(str)`` is salted per process; every emitter task must send a key to one task).
- :func:`murmur_mix`: the hash's bits mixed (Flink's ``MathUtils.murmurHash``), so keys
  whose hashes differ only in high bits (integers 0, 128, 256...) spread over the groups.
- :func:`key_group`: ``murmur_mix(h) % G`` (``assignToKeyGroup``).
- :func:`operator_index`: the task index owning a group, ``g * n // G``
  (``computeOperatorIndexForKeyGroup``).
- :func:`key_group_range`: the groups task ``i`` owns, the inverse of
  :func:`operator_index` (``computeKeyGroupRangeForOperatorIndex``).

The router (``actors/_routing.py``) precomputes ``group → task`` once per subscription;
:func:`state_key_group` gives a bolt the group of a state key as the router computes it.
Pure: no Ray, no actors.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import msgpack

from topology._builder import ACKER_ID
from topology._dead_letters import DEAD_LETTERS_ID
from topology._errors import ConfigError

if TYPE_CHECKING:
    from topology._builder import StormTopology

#: key groups when ``topology.max.task.parallelism`` is unset (Flink's default
#: ``maxParallelism`` for small jobs)
DEFAULT_KEY_GROUPS = 128
#: the config key of the key-group count (Storm's cap on a component's parallelism)
KEY_GROUPS_KEY = "topology.max.task.parallelism"

#: :func:`stable_hash` keeps the low 48 bits of an integer, :func:`fields_hash` of a sum
_MASK48 = 0xFFFFFFFFFFFF


def stable_hash(value: object) -> int:
    """A hash equal in every process for equal values of msgpack-able types, in
    ``[0, 2**48)``: CRC-32 of a str's UTF-8, an int's (or an integral float's) low 48 bits,
    0 for None, CRC-32 of the msgpack bytes of anything else."""
    if isinstance(value, str):
        return zlib.crc32(value.encode())
    if isinstance(value, int):
        return value & _MASK48
    if value is None:
        return 0
    if isinstance(value, float) and value.is_integer():
        return int(value) & _MASK48
    return zlib.crc32(msgpack.packb(value, default=str, use_bin_type=True))


def fields_hash(values: tuple | list) -> int:
    """The hash of a key of several fields, as the router combines them: from 0, ``h = h *
    31 + stable_hash(v)`` over the values in the grouping's field order, kept to 48 bits
    (the recurrence of Java's ``List.hashCode``, which Storm's fields grouping hashes the
    selected values with). One value: ``stable_hash(v)``."""
    h = 0
    for v in values:
        h = (h * 31 + stable_hash(v)) & _MASK48
    return h


def murmur_mix(h: int) -> int:
    """``h``'s bits mixed into a non-negative 31-bit int, the same in every process.

    The bits above 32 are first folded onto the low 32 (``h ^ (h >> 32)``; hashes here
    have up to 48 bits), then mixed as MurmurHash3's x86 32-bit hash of that one 4-byte
    block with seed 0 (a block round, the length, then the finaliser), and made
    non-negative as Flink does (the absolute value as a Java int, its minimum giving 0).
    So for any ``h < 2**32`` it equals Flink's ``MathUtils.murmurHash((int) h)``, which
    ``KeyGroupRangeAssignment.assignToKeyGroup`` applies to a key's ``hashCode``.

    Without it, strided integer keys (their hash is the integer) would share a group:
    0, 128, 256... all ``% 128 == 0``.
    """
    # the block round: multiply, rotate left 15, multiply (a bit above 32 left by a shift
    # or a product never reaches the low 32 bits of a later product: one mask each)
    k = (h ^ (h >> 32)) * 0xCC9E2D51 & 0xFFFFFFFF
    k = ((k << 15) | (k >> 17)) * 0x1B873593 & 0xFFFFFFFF
    # into the zero seed: rotate left 13, times 5 plus a constant
    k = ((k << 13) | (k >> 19)) * 5 + 0xE6546B64 & 0xFFFFFFFF
    # the length (4 bytes), then the finaliser's shifts and products
    k ^= 4 ^ (k >> 16)
    k = k * 0x85EBCA6B & 0xFFFFFFFF
    k = (k ^ (k >> 13)) * 0xC2B2AE35 & 0xFFFFFFFF
    k ^= k >> 16
    # as a Java int, made non-negative
    if k < 0x80000000:
        return k
    return 0 if k == 0x80000000 else 0x100000000 - k


def key_group_count(conf: Mapping[str, Any]) -> int:
    """The number of key groups of a topology: ``topology.max.task.parallelism``, or
    :data:`DEFAULT_KEY_GROUPS` when unset (None or absent)."""
    groups = conf.get(KEY_GROUPS_KEY)
    return DEFAULT_KEY_GROUPS if groups is None else groups


def key_group(h: int, groups: int) -> int:
    """The key group of hash ``h`` (:func:`stable_hash`, :func:`fields_hash`) among
    ``groups``: ``murmur_mix(h) % groups`` (Flink's
    ``KeyGroupRangeAssignment.computeKeyGroupForKeyHash``)."""
    return murmur_mix(h) % groups


def _check(parallelism: int, groups: int) -> None:
    if groups < 1 or not 1 <= parallelism <= groups:
        raise ValueError(f"key groups: parallelism must be in [1, {groups}] for {groups} "
                         f"key groups ({KEY_GROUPS_KEY}), got {parallelism}")


def operator_index(group: int, parallelism: int, groups: int) -> int:
    """The index (0-based, in the component's task order) of the task of ``parallelism``
    tasks that owns key group ``group``: ``group * parallelism // groups`` (Flink's
    ``KeyGroupRangeAssignment.computeOperatorIndexForKeyGroup``).

    Raises:
        ValueError: ``parallelism`` not in ``[1, groups]`` or ``group`` not in
            ``[0, groups)``.
    """
    _check(parallelism, groups)
    if not 0 <= group < groups:
        raise ValueError(f"key groups: group must be in [0, {groups}), got {group}")
    return group * parallelism // groups


def key_group_range(index: int, parallelism: int, groups: int) -> range:
    """The key groups that task ``index`` of ``parallelism`` owns: a contiguous, non-empty
    range, every group ``g`` of which has ``operator_index(g, parallelism, groups) ==
    index``, and the ranges of ``0 .. parallelism - 1`` cover ``0 .. groups - 1`` in order
    (Flink's ``KeyGroupRangeAssignment.computeKeyGroupRangeForOperatorIndex``).

    Raises:
        ValueError: ``parallelism`` not in ``[1, groups]`` or ``index`` not in
            ``[0, parallelism)``.
    """
    _check(parallelism, groups)
    if not 0 <= index < parallelism:
        raise ValueError(f"key groups: task index must be in [0, {parallelism}), got {index}")
    start = (index * groups + parallelism - 1) // parallelism
    end = ((index + 1) * groups - 1) // parallelism  # inclusive
    return range(start, end + 1)


def state_key_group(key: object, arity: int, groups: int) -> int:
    """The key group of a state key of a bolt fields-grouped on ``arity`` fields, as the
    router computes it for a tuple whose grouping fields hold that key: with one field the
    key is that field's value (``key_group(stable_hash(key))``); with more it is the tuple
    (or list) of the values in the grouping's field order (``key_group(fields_hash(key))``).
    A task of index ``i`` of ``n`` gets exactly the keys whose group is in
    ``key_group_range(i, n, groups)``.

    Raises:
        ValueError: ``arity`` < 1, or a key of several fields that is not a tuple or list
            of ``arity`` values.
    """
    if arity == 1:
        return murmur_mix(stable_hash(key)) % groups
    if arity < 1:
        raise ValueError(f"key groups: a fields grouping has at least one field, got "
                         f"arity {arity}")
    if not isinstance(key, (tuple, list)) or len(key) != arity:
        raise ValueError(f"key groups: the state key of a bolt grouped on {arity} fields "
                         f"must be a tuple of {arity} values (the grouping fields' values, "
                         f"in order), got {key!r}")
    return murmur_mix(fields_hash(key)) % groups


def check_key_group_parallelism(topology: StormTopology, conf: Mapping[str, Any]) -> None:
    """Refuse a topology whose key groups some task would be left without: a user
    component (the system ones, ackers and dead letters, hold no keyed state) of more
    tasks than ``topology.max.task.parallelism`` (Storm's cap on any component's
    parallelism; here also the key-group count, as Flink refuses a parallelism above
    ``maxParallelism``), or a component config that sets the key to another count than the
    topology's (the senders and the receiver of a key must agree on its group).

    Args:
        topology: the user's topology.
        conf: the topology config (``make_config``'s; an absent key means 128).

    Raises:
        ConfigError: naming the component, its parallelism (or its own setting), the
            key-group count and the key.
    """
    groups = key_group_count(conf)
    for cid, spec in topology.components.items():
        if cid in (ACKER_ID, DEAD_LETTERS_ID):
            continue
        own = spec.conf.get(KEY_GROUPS_KEY) if spec.conf else None
        if own is not None and own != groups:
            raise ConfigError(
                f"component {cid!r}: {KEY_GROUPS_KEY} {own} differs from the topology's "
                f"{groups}: it is the number of key groups, one for the whole topology "
                f"(every sender must put a key in the same group); set it in the topology "
                f"config only")
        if spec.parallelism > groups:
            raise ConfigError(
                f"component {cid!r}: parallelism {spec.parallelism} exceeds the {groups} key "
                f"groups ({KEY_GROUPS_KEY}): each task owns at least one key group; raise "
                f"{KEY_GROUPS_KEY} to at least {spec.parallelism} or lower the parallelism")
