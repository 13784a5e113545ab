"""node.durable: atomic replacement, and detection of every damage with the file named."""

import os

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from node import durable, probes
from node.errors import CorruptionError

PAYLOAD = msgspec.msgpack.encode({"term": 7, "voted_for": "peer-2", "config": [1, 2, 3]})


def test_round_trip(tmp_path):
    path = tmp_path / "f"
    durable.write_atomic(path, PAYLOAD)
    assert durable.read_verified(path) == PAYLOAD
    durable.write_atomic(path, b"")
    assert durable.read_verified(path) == b""


def test_rewrite_leaves_no_temp_files(tmp_path):
    for i in range(3):
        durable.write_atomic(tmp_path / "f", bytes([i]) * 10)
    assert os.listdir(tmp_path) == ["f"]


def test_every_single_byte_corruption_is_detected_and_names_the_file(tmp_path):
    path = tmp_path / "meta"
    durable.write_atomic(path, PAYLOAD)
    good = path.read_bytes()
    for offset in range(len(good)):
        for mask in (0x01, 0x80, 0xFF):
            damaged = bytearray(good)
            damaged[offset] ^= mask
            path.write_bytes(damaged)
            with pytest.raises(CorruptionError) as exc:
                durable.read_verified(path)
            assert str(path) in str(exc.value)


def test_every_byte_value_at_every_offset_is_detected():
    good = durable.encode_envelope(PAYLOAD)
    for offset in range(len(good)):
        for value in range(256):
            if value == good[offset]:
                continue
            damaged = bytearray(good)
            damaged[offset] = value
            with pytest.raises(CorruptionError):
                durable.decode_envelope(bytes(damaged), "mem")


def test_every_truncation_is_detected_and_names_the_file(tmp_path):
    path = tmp_path / "meta"
    durable.write_atomic(path, PAYLOAD)
    good = path.read_bytes()
    for length in range(len(good)):
        path.write_bytes(good[:length])
        with pytest.raises(CorruptionError, match="truncated") as exc:
            durable.read_verified(path)
        assert exc.value.path == str(path)


def test_appended_bytes_are_detected(tmp_path):
    path = tmp_path / "meta"
    durable.write_atomic(path, PAYLOAD)
    with open(path, "ab") as f:
        f.write(b"\0")
    with pytest.raises(CorruptionError, match="trailing"):
        durable.read_verified(path)


@given(payload=st.binary(max_size=300), data=st.data())
def test_any_damage_to_any_payload_is_detected(payload, data):
    good = durable.encode_envelope(payload)
    offset = data.draw(st.integers(0, len(good) - 1))
    mask = data.draw(st.integers(1, 255))
    damaged = bytearray(good)
    damaged[offset] ^= mask
    with pytest.raises(CorruptionError):
        durable.decode_envelope(bytes(damaged), "x")
    assert durable.decode_envelope(good, "x") == payload


def test_missing_file_is_not_corruption(tmp_path):
    with pytest.raises(FileNotFoundError):
        durable.read_verified(tmp_path / "absent")


class Meta(msgspec.Struct):
    term: int


def test_struct_round_trip_and_wrong_shape_is_corruption(tmp_path):
    path = tmp_path / "m"
    durable.save_struct(path, Meta(3))
    assert durable.load_struct(path, Meta) == Meta(3)
    durable.save_struct(path, ["not", "meta"])
    with (probes.expect("durable.corrupt.wrong_shape"),
          pytest.raises(CorruptionError, match="not a valid Meta") as exc):
        durable.load_struct(path, Meta)
    assert str(path) in str(exc.value)


def test_failed_write_keeps_the_old_file_whole(tmp_path, monkeypatch):
    path = tmp_path / "meta"
    durable.write_atomic(path, b"old")

    def broken_fsync(fd):
        raise OSError("disk gone")

    monkeypatch.setattr(durable.os, "fsync", broken_fsync)
    with (probes.expect("durable.write.failed_temp_removed"),
          pytest.raises(OSError, match="disk gone")):
        durable.write_atomic(path, b"new")
    monkeypatch.undo()
    assert durable.read_verified(path) == b"old"
    assert os.listdir(tmp_path) == ["meta"]


def test_ensure_dir_makes_nested_directories(tmp_path):
    target = tmp_path / "a" / "b" / "c"
    assert durable.ensure_dir(target) == target
    assert target.is_dir()
    durable.ensure_dir(target)  # idempotent


def test_temp_file_names_are_recognised(tmp_path, monkeypatch):
    seen = []
    real_replace = os.replace

    def spy(src, dst):
        seen.append(os.path.basename(src))
        real_replace(src, dst)

    monkeypatch.setattr(durable.os, "replace", spy)
    durable.write_atomic(tmp_path / "f", b"x")
    assert len(seen) == 1 and durable.is_temp_file(seen[0])
    assert not durable.is_temp_file("f") and not durable.is_temp_file("snapshot-3")
