"""Framing and envelopes. Pure functions over bytes so they can be fuzzed without sockets."""

from __future__ import annotations

import struct

import msgspec

from node.rpc.errors import ErrorCode, RpcError

WIRE_VERSION = 1
LENGTH = struct.Struct(">I")
DEFAULT_MAX_FRAME = 64 << 20  # well above a WAL batch or a snapshot chunk


class Request(msgspec.Struct, array_like=True):
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


def frame(obj: object) -> bytes:
    body = _enc.encode(obj)
    return LENGTH.pack(len(body)) + body


def encode_body(obj: object) -> msgspec.Raw:
    return msgspec.Raw(_enc.encode(obj))


def decode_body(raw: msgspec.Raw, typ: type) -> object:
    """Decode a body with the method's schema; a mismatch is the caller's fault, not a crash."""
    try:
        return msgspec.msgpack.decode(raw, type=typ)
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
    return Response(call_id, int(ErrorCode.OK), "", encode_body(body))
