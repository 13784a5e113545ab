"""Framing and envelopes. Pure functions over bytes so they can be fuzzed without sockets."""

from __future__ import annotations

import struct

import msgspec

from node.rpc.errors import ErrorCode, RpcError

WIRE_VERSION = 1
LENGTH = struct.Struct(">I")
DEFAULT_MAX_FRAME = 64 << 20  # well above a WAL batch or a snapshot chunk
# What a frame keeps free around a payload bounded elsewhere (a copy chunk, a Raft entry): the
# envelopes of the request and of the messages around it take a few hundred bytes at most.
ENVELOPE_RESERVE = 64 << 10
# The smallest frame limit a server may be given: ordinary messages (heartbeats, reports of a
# few thousand tablets) must fit with room to spare.
MIN_MAX_FRAME = 1 << 20


class Request(msgspec.Struct, array_like=True):
    """`body` is decoded as Raw (its schema depends on the method) but may be sent as the
    object itself: msgspec encodes it in place, one copy of its bytes instead of two."""

    v: int
    call_id: int
    method: str
    timeout_ms: int
    to_uuid: str  # "" only for discovery calls that do not know the peer yet
    body: msgspec.Raw


class Response(msgspec.Struct, array_like=True):
    call_id: int
    code: int
    message: str
    body: msgspec.Raw
    detail: object = None


# msgspec raises a plain UnicodeDecodeError (a ValueError) for bad UTF-8 in a str field.
_UNDECODABLE = (msgspec.DecodeError, msgspec.ValidationError, ValueError)

_enc = msgspec.msgpack.Encoder()
_req_dec = msgspec.msgpack.Decoder(Request)
_resp_dec = msgspec.msgpack.Decoder(Response)
_EMPTY = msgspec.Raw(_enc.encode(None))
_body_decoders: dict[type, msgspec.msgpack.Decoder] = {}  # one per method schema, built once


def frame(obj: object) -> bytes:
    body = _enc.encode(obj)
    return LENGTH.pack(len(body)) + body


READ_CHUNK = 256 << 10  # bytes asked of the socket at a time: many frames per read under load


def split_frames(buf: bytearray, max_frame: int) -> list[bytes]:
    """Remove the whole frames at the start of `buf` and return their bodies; a partial frame
    stays for the next read. Raises RpcError(TOO_LARGE) for a length over `max_frame`: the
    stream cannot be trusted past it. One read of the socket then serves every frame it
    brought, where reading a header and a body per frame cost two awaits each.

    The buffer is copied out once, as bytes, and each body is a slice of that: a memoryview
    per frame cost three to four times as much (about 0.8 µs a frame, measured). While the
    first frame is still partial nothing is copied, so a large frame that arrives over many
    reads is copied once, not once per read."""
    unpack = LENGTH.unpack_from
    end = len(buf)
    if end < LENGTH.size:
        return []
    (n,) = unpack(buf, 0)
    if n > max_frame:
        raise RpcError(ErrorCode.TOO_LARGE, f"frame of {n} bytes > {max_frame}")
    if end - LENGTH.size < n:
        return []
    data = bytes(buf)
    frames = []
    pos = 0
    while end - pos >= LENGTH.size:
        (n,) = unpack(data, pos)
        if n > max_frame:
            raise RpcError(ErrorCode.TOO_LARGE, f"frame of {n} bytes > {max_frame}")
        start = pos + LENGTH.size
        if end - start < n:
            break
        pos = start + n
        frames.append(data[start:pos])
    del buf[:pos]
    return frames


def decode_body(raw: msgspec.Raw, typ: type) -> object:
    """Decode a body with the method's schema; a mismatch is the caller's fault, not a crash."""
    dec = _body_decoders.get(typ)
    if dec is None:
        dec = _body_decoders[typ] = msgspec.msgpack.Decoder(typ)
    try:
        return dec.decode(raw)
    except _UNDECODABLE as e:
        raise RpcError(ErrorCode.INVALID_REQUEST, str(e)) from None


def decode_request(data: bytes) -> Request:
    try:
        req = _req_dec.decode(data)
    except _UNDECODABLE as e:
        raise RpcError(ErrorCode.MALFORMED, f"bad request envelope: {e}") from None
    if req.v != WIRE_VERSION:
        raise RpcError(ErrorCode.UNSUPPORTED_VERSION, f"wire version {req.v}, expected {WIRE_VERSION}")
    return req


def decode_response(data: bytes) -> Response:
    try:
        return _resp_dec.decode(data)
    except _UNDECODABLE as e:
        raise RpcError(ErrorCode.MALFORMED, f"bad response envelope: {e}",
                       maybe_delivered=True) from None


def error_response(call_id: int, err: RpcError) -> Response:
    return Response(call_id, int(err.code), err.message, _EMPTY, err.detail)


def ok_response(call_id: int, body: object) -> Response:
    return Response(call_id, int(ErrorCode.OK), "", body)  # type: ignore[arg-type]  # the object itself, which msgspec encodes in place of a Raw (see Request)
