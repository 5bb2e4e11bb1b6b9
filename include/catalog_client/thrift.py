"""Just enough of the Hive Metastore's Thrift protocol (binary, unframed: the metastore's default) to ask whether a
metastore answers and which databases it holds, without a Thrift library. Everything else talks to the catalog
through Spark."""

from __future__ import annotations

import socket
import struct

CALL, REPLY, EXCEPTION = 1, 2, 3
VERSION_1 = 0x80010000
STOP, I32, STRING, STRUCT, LIST = 0, 8, 11, 12, 15


class ThriftError(RuntimeError):
    """The metastore did not answer, or answered with an error; the message is one line."""


def get_all_databases(host: str, port: int, timeout: float = 3.0) -> list[str]:
    """The metastore's databases (its `get_all_databases` call)."""
    name = b"get_all_databases"
    request = struct.pack(">II", VERSION_1 | CALL, len(name)) + name + struct.pack(">ib", 1, STOP)
    try:
        with socket.create_connection((host, port), timeout=timeout) as connection:
            connection.sendall(request)
            reader = _Reader(connection)
            kind = reader.i32() & 0xFF
            reader.string()
            reader.i32()  # the sequence id
            if kind == EXCEPTION:
                raise ThriftError(f"the metastore at {host}:{port} refused get_all_databases: {_struct_message(reader)}")
            if kind != REPLY:
                raise ThriftError(f"the metastore at {host}:{port} answered with message type {kind}")
            return _databases_result(reader, f"{host}:{port}")
    except OSError as exc:
        raise ThriftError(f"no metastore answers at {host}:{port} ({exc.strerror or exc})") from None


def _databases_result(reader: _Reader, where: str) -> list[str]:
    databases: list[str] | None = None
    while (field_type := reader.byte()) != STOP:
        field_id = reader.i16()
        if field_id == 0 and field_type == LIST:
            element_type, size = reader.byte(), reader.i32()
            if element_type != STRING:
                raise ThriftError(f"the metastore at {where} sent databases of type {element_type}")
            databases = [reader.string() for _ in range(size)]
        elif field_type == STRUCT:  # the MetaException
            raise ThriftError(f"the metastore at {where} failed: {_struct_message(reader)}")
        else:
            raise ThriftError(f"the metastore at {where} sent an unexpected field {field_id} of type {field_type}")
    if databases is None:
        raise ThriftError(f"the metastore at {where} sent no databases")
    return databases


def _struct_message(reader: _Reader) -> str:
    """The first string field of an exception (a MetaException's or TApplicationException's message)."""
    message = ""
    while (field_type := reader.byte()) != STOP:
        reader.i16()
        if field_type == I32:
            reader.i32()
        elif field_type == STRING:
            message = message or reader.string()
        else:
            raise ThriftError(f"an exception field of type {field_type}")
    return message or "no message"


class _Reader:
    def __init__(self, connection: socket.socket):
        self.connection = connection

    def exactly(self, count: int) -> bytes:
        data = b""
        while len(data) < count:
            chunk = self.connection.recv(count - len(data))
            if not chunk:
                raise ThriftError("the metastore closed the connection mid-answer")
            data += chunk
        return data

    def byte(self) -> int:
        return struct.unpack(">b", self.exactly(1))[0]

    def i16(self) -> int:
        return struct.unpack(">h", self.exactly(2))[0]

    def i32(self) -> int:
        return struct.unpack(">i", self.exactly(4))[0]

    def string(self) -> str:
        return self.exactly(self.i32()).decode("utf-8")
