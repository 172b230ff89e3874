"""``Fields``: the ordered field names of a stream (Storm's ``backtype.storm.tuple.Fields``)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator


class Fields:
    """An immutable, ordered list of field names with O(1) name → index lookup.

    Args:
        *names: field names, either as separate arguments or as one iterable.

    Raises:
        TopologyError: on duplicate or non-string names.
    """

    __slots__ = ("_names", "_index")

    def __init__(self, *names: str | Iterable[str]) -> None:
        from topology._errors import TopologyError

        if len(names) == 1 and not isinstance(names[0], str):
            names = tuple(names[0])  # type: ignore[assignment]
        for n in names:
            if not isinstance(n, str) or not n:
                raise TopologyError(f"field names must be non-empty strings, got {n!r}")
        if len(set(names)) != len(names):
            raise TopologyError(f"duplicate field name in {list(names)}")
        self._names: tuple[str, ...] = tuple(names)  # type: ignore[arg-type]
        self._index = {n: i for i, n in enumerate(self._names)}

    def field_index(self, name: str) -> int:
        """Position of ``name``; raises ``KeyError`` naming the known fields."""
        try:
            return self._index[name]
        except KeyError:
            raise KeyError(f"no field {name!r}; fields are {list(self._names)}") from None

    def contains(self, name: str) -> bool:
        return name in self._index

    def select(self, selector: Fields, values: list) -> list:
        """Values of the fields named by ``selector``, in its order."""
        return [values[self._index[n]] for n in selector._names]

    def to_list(self) -> list[str]:
        return list(self._names)

    def __contains__(self, name: object) -> bool:
        return name in self._index

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)

    def __getitem__(self, i: int) -> str:
        return self._names[i]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Fields) and other._names == self._names

    def __hash__(self) -> int:
        return hash(self._names)

    def __repr__(self) -> str:
        return f"Fields{self._names!r}"

    def __reduce__(self):
        return (Fields, self._names)
