"""Plain data across the sandbox boundary, and the candidate's side of the test protocol.

Standard library only: the guard loads this file by path before any candidate code runs
(:mod:`rlloom_rewards.code.guard`), and so does the trusted tester (:mod:`rlloom_rewards.code.tester`).

**Values** cross as JSON: ``None``, ``bool``, ``int``, ``float`` (``nan`` and infinities included) and
``str`` as themselves; ``list``, ``tuple``, ``set``, ``frozenset``, ``dict``, ``bytes`` and ``complex``
as ``{"t": <type>, "v": <items>}``. Types are checked exactly (``type(v) is int``), so a subclass with
its own ``__eq__`` — the classic way to make ``candidate(x) == expected`` true — cannot cross; neither
can any other object (:class:`WireError`).

**Messages** are length-prefixed (4 bytes, big-endian) UTF-8 JSON on a pipe, at most
:data:`MAX_MESSAGE_BYTES`.

**Protocol** (:func:`serve`, run by the guard once the candidate's module has run): the candidate
sends ``{"callables": [names]}`` (its top-level functions and classes), then answers each request
``{"call": name, "args": [...], "kwargs": {...}}`` with ``{"return": value}`` or ``{"raise": type name,
"message": text}``, until the requests pipe closes.
"""

from __future__ import annotations

import json
import os
import struct
import types

MAX_MESSAGE_BYTES = 16 * 2**20
_LENGTH = struct.Struct(">I")
_SCALARS = (type(None), bool, int, float, str)
_SEQUENCES = {list: "list", tuple: "tuple", set: "set", frozenset: "frozenset"}
_BY_TAG = {tag: kind for kind, tag in _SEQUENCES.items()}


class WireError(TypeError):
    """A value that cannot cross the boundary, or a malformed message."""


def encode(value):
    """``value`` as JSON-able data (see the module doc); :class:`WireError` for anything else."""
    kind = type(value)
    if kind in _SCALARS:
        return value
    if kind in _SEQUENCES:
        return {"t": _SEQUENCES[kind], "v": [encode(item) for item in value]}
    if kind is dict:
        return {"t": "dict", "v": [[encode(key), encode(item)] for key, item in value.items()]}
    if kind is bytes:
        return {"t": "bytes", "v": value.hex()}
    if kind is complex:
        return {"t": "complex", "v": [value.real, value.imag]}
    raise WireError(f"a {kind.__name__} cannot cross the sandbox boundary (only plain data can)")


def decode(data):
    """The value :func:`encode` gave ``data`` for; :class:`WireError` when ``data`` is no such encoding."""
    if type(data) in _SCALARS:
        return data
    if type(data) is not dict or set(data) != {"t", "v"}:
        raise WireError(f"not an encoded value: {str(data)[:80]}")
    tag, items = data["t"], data["v"]
    try:
        if tag in _BY_TAG:
            return _BY_TAG[tag](decode(item) for item in items)
        if tag == "dict":
            return {decode(key): decode(item) for key, item in items}
        if tag == "bytes":
            return bytes.fromhex(items)
        if tag == "complex":
            return complex(*items)
    except (TypeError, ValueError) as error:
        raise WireError(f"malformed {tag}: {error}") from None
    raise WireError(f"unknown type tag {tag!r}")


def send(fd: int, message: dict) -> None:
    """Write ``message`` to the pipe ``fd`` (see the module doc)."""
    body = json.dumps(message).encode("utf-8")
    if len(body) > MAX_MESSAGE_BYTES:
        raise WireError(f"a message of {len(body)} bytes is over the {MAX_MESSAGE_BYTES}-byte limit")
    view = memoryview(_LENGTH.pack(len(body)) + body)
    while view:
        view = view[os.write(fd, view):]


def _read_exactly(fd: int, size: int) -> bytes | None:
    chunks, left = [], size
    while left:
        chunk = os.read(fd, min(left, 2**20))
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def receive(fd: int) -> dict | None:
    """The next message on the pipe ``fd``; ``None`` when the writer closed it (mid-message too)."""
    header = _read_exactly(fd, _LENGTH.size)
    if header is None:
        return None
    (size,) = _LENGTH.unpack(header)
    if size > MAX_MESSAGE_BYTES:
        raise WireError(f"a message of {size} bytes is over the {MAX_MESSAGE_BYTES}-byte limit")
    body = _read_exactly(fd, size)
    if body is None:
        return None
    try:
        message = json.loads(body.decode("utf-8"))
    except ValueError as error:
        raise WireError(f"malformed message: {error}") from None
    if type(message) is not dict:
        raise WireError("a message must be a JSON object")
    return message


def callables(namespace: dict) -> list[str]:
    """The names of ``namespace``'s top-level functions and classes (not dunders, not modules)."""
    return sorted(
        name for name, value in namespace.items()
        if not name.startswith("__") and callable(value) and not isinstance(value, types.ModuleType)
    )


def answer(namespace: dict, request: dict) -> dict:
    """The reply to one call request (see the module doc)."""
    try:
        function = namespace[request["call"]]
        args = [decode(item) for item in request["args"]]
        kwargs = {key: decode(item) for key, item in request["kwargs"].items()}
        return {"return": encode(function(*args, **kwargs))}
    except Exception as error:  # noqa: BLE001 - the candidate's failure is the reply
        return {"raise": type(error).__name__, "message": str(error)[:2000]}


def serve(namespace: dict, requests_fd: int, replies_fd: int) -> None:
    """The candidate's side of the protocol: announce :func:`callables`, then answer until EOF."""
    send(replies_fd, {"callables": callables(namespace)})
    while (request := receive(requests_fd)) is not None:
        reply = answer(namespace, request)
        try:
            send(replies_fd, reply)
        except WireError as error:  # a return value too large to send
            send(replies_fd, {"raise": "WireError", "message": str(error)})
