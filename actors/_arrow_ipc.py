"""Arrow values on the wire (the codec's extension types 5 and 6): a ``pyarrow.RecordBatch``
or ``Table`` as an Arrow IPC stream, read back as untrusted input.

Arrow's security model asks a reader of IPC data from an untrusted source to validate it
in full before reading a value (Arrow's format docs, "Security Considerations"); we do
(``validate(full=True)``). Extension types need more: pyarrow turns a column whose field
metadata names a *registered* extension type into that type by calling the type's Python
``__arrow_ext_deserialize__`` while it reads the schema, and the type's scalars run more
Python code when a value is read (Ray Data's ``ray.data.arrow_pickled_object`` runs
``pickle.load`` in ``to_pylist()``). So the schema's extension names are read from the IPC
message itself, before pyarrow interprets it, and any name outside
:data:`ARROW_EXTENSIONS` is refused, registered in this process or not.

The schema message is a FlatBuffers table (Arrow's ``format/Message.fbs`` and
``Schema.fbs``: ``Message.header`` → ``Schema.fields`` → ``Field.custom_metadata`` and
``Field.children``); :func:`extension_names` reads only those few fields, every offset
checked against the buffer. Pure, apart from the two pyarrow calls in
:func:`encode_arrow` and :func:`decode_arrow`.
"""

from __future__ import annotations

import struct

#: The Arrow extension types a payload may carry: Arrow's canonical extension types that
#: Arrow itself implements (in C++; no Python code runs on their values). Any other
#: extension type, registered in this process or not, is refused.
ARROW_EXTENSIONS = frozenset({"arrow.fixed_shape_tensor", "arrow.uuid", "arrow.json",
                              "arrow.bool8"})
#: the field metadata key naming a field's extension type (Arrow's columnar format,
#: "Extension Types")
EXTENSION_NAME_KEY = b"ARROW:extension:name"
#: fields (nested ones included) a schema may have: a bound on the walk, whatever the
#: offsets in a hostile message point at
MAX_FIELDS = 100_000

_U8, _U16, _U32, _I32 = (struct.Struct(f) for f in ("<B", "<H", "<I", "<i"))
#: ``MessageHeader.Schema`` in Message.fbs
_SCHEMA_HEADER = 1


class ArrowPayloadError(ValueError):
    """An Arrow payload that is malformed, invalid, or carries a refused extension type."""


class _Reader:
    """Bounds-checked reads of a FlatBuffers buffer (offsets little-endian; a table starts
    with a signed offset back to its vtable; references are forward unsigned offsets)."""

    def __init__(self, buf: bytes) -> None:
        self.buf = buf

    def _get(self, fmt: struct.Struct, pos: int) -> int:
        if not 0 <= pos <= len(self.buf) - fmt.size:
            raise ArrowPayloadError("Arrow payload's schema is malformed (an offset points "
                                    "outside the message)")
        return fmt.unpack_from(self.buf, pos)[0]

    def root(self) -> int:
        return self._get(_U32, 0)

    def _slot(self, table: int, i: int) -> int:
        """The position of field ``i`` of ``table``, or 0 when absent."""
        vtable = table - self._get(_I32, table)
        size = self._get(_U16, vtable)
        at = 4 + 2 * i
        if at + 2 > size:
            return 0
        off = self._get(_U16, vtable + at)
        return table + off if off else 0

    def ref(self, table: int, i: int) -> int | None:
        """What field ``i`` (a table, vector or string) refers to, or None."""
        slot = self._slot(table, i)
        return None if not slot else slot + self._get(_U32, slot)

    def u8(self, table: int, i: int) -> int:
        slot = self._slot(table, i)
        return self._get(_U8, slot) if slot else 0

    def string(self, pos: int) -> bytes:
        n = self._get(_U32, pos)
        if pos + 4 + n > len(self.buf):
            raise ArrowPayloadError("Arrow payload's schema is malformed (a string runs "
                                    "past the message)")
        return self.buf[pos + 4:pos + 4 + n]

    def tables(self, vector: int | None) -> list[int]:
        if vector is None:
            return []
        n = self._get(_U32, vector)
        if vector + 4 + 4 * n > len(self.buf):
            raise ArrowPayloadError("Arrow payload's schema is malformed (a vector runs "
                                    "past the message)")
        return [q + self._get(_U32, q) for q in range(vector + 4, vector + 4 + 4 * n, 4)]


def extension_names(message: bytes) -> list[tuple[str, str]]:
    """``(field path, extension name)`` for every field, nested ones included, whose
    metadata names an extension type, read from a schema message's FlatBuffers bytes
    (``pyarrow.ipc.Message.metadata``) without pyarrow interpreting it. A message whose
    bytes do not hold the key ``ARROW:extension:name`` at all has none, and is not walked.

    Raises:
        ArrowPayloadError: not a schema message, an offset outside the buffer, or more
            than :data:`MAX_FIELDS` fields.
    """
    if EXTENSION_NAME_KEY not in message:  # (no field can name one: the walk is skipped)
        return []
    r = _Reader(message)
    msg = r.root()
    if r.u8(msg, 1) != _SCHEMA_HEADER:  # Message.header_type
        raise ArrowPayloadError("Arrow payload does not start with a schema")
    schema = r.ref(msg, 2)  # Message.header
    if schema is None:
        raise ArrowPayloadError("Arrow payload's schema message has no schema")
    found = []
    todo = [("", f) for f in r.tables(r.ref(schema, 1))]  # Schema.fields
    seen = 0
    while todo:
        parent, field = todo.pop()
        seen += 1
        if seen > MAX_FIELDS:
            raise ArrowPayloadError(f"Arrow payload's schema has more than {MAX_FIELDS} "
                                    f"fields")
        name_at = r.ref(field, 0)  # Field.name
        name = r.string(name_at).decode(errors="replace") if name_at is not None else ""
        path = f"{parent}.{name}" if parent else name
        for kv in r.tables(r.ref(field, 6)):  # Field.custom_metadata: [KeyValue]
            key_at = r.ref(kv, 0)
            if key_at is not None and r.string(key_at) == EXTENSION_NAME_KEY:
                value_at = r.ref(kv, 1)
                value = r.string(value_at) if value_at is not None else b""
                found.append((path, value.decode(errors="replace")))
        todo.extend((path, c) for c in r.tables(r.ref(field, 5)))  # Field.children
    return found


def encode_arrow(obj) -> bytes:
    """A ``pyarrow.RecordBatch`` or ``Table`` as one Arrow IPC stream."""
    import pyarrow as pa

    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, obj.schema) as writer:
        writer.write(obj)
    return sink.getvalue().to_pybytes()


def decode_arrow(data: bytes, table: bool):
    """The ``RecordBatch`` (or, with ``table``, the ``Table``) of an IPC stream from a
    peer: its extension names checked before pyarrow reads the schema, then validated in
    full before it is returned.

    Raises:
        ArrowPayloadError: malformed or invalid data, or a column of an extension type
            outside :data:`ARROW_EXTENSIONS` (naming the column and the type).
    """
    import pyarrow as pa

    buf = pa.py_buffer(data)
    try:
        first = pa.ipc.read_message(pa.BufferReader(buf))
        for path, name in extension_names(first.metadata.to_pybytes()):
            if name not in ARROW_EXTENSIONS:
                raise ArrowPayloadError(
                    f"Arrow payload's column {path!r} has extension type {name!r}, which "
                    f"the wire refuses (allowed: {sorted(ARROW_EXTENSIONS)})")
        reader = pa.ipc.open_stream(buf)
        value = reader.read_all() if table else reader.read_next_batch()
        value.validate(full=True)
    except (pa.ArrowException, OSError, StopIteration) as e:
        raise ArrowPayloadError(f"undecodable Arrow payload ({type(e).__name__}: "
                                f"{e})") from None
    return value
