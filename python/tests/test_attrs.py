"""The attribute block: its byte layout (docs/PYTHON.md), headers, messages
without a description (C publishers, other encodings), and blocks that lie,
which a subscriber must refuse without reading outside the message."""
import struct

import pytest

import rgaps

np = pytest.importorskip("numpy")


def block(code, bits, shape, strides=None, header=b"", version=1, flags=None, lanes=1,
          pad=0):
    """A block built from the documented layout, independently of the C encoder."""
    f = (1 if strides is not None else 0) if flags is None else flags
    out = b"rg" + struct.pack("<BBBBHBBH", version, f, code, bits, lanes, len(shape), pad,
                              len(header))
    out += struct.pack(f"<{len(shape)}q", *shape)
    if strides is not None:
        out += struct.pack(f"<{len(strides)}q", *strides)
    return out + header


def test_layout_matches_the_documentation():
    assert rgaps.encode_attrs("float32", (2, 3)) == block(2, 32, (2, 3))
    assert rgaps.encode_attrs("uint8", (), None, b"hi") == block(1, 8, (), header=b"hi")
    assert rgaps.encode_attrs("int16", (4, 5), (1, 4)) == block(0, 16, (4, 5), (1, 4))
    assert rgaps.encode_attrs("bfloat16", (8,)) == block(4, 16, (8,))
    assert rgaps.encode_attrs("complex128", (1,)) == block(5, 128, (1,))
    assert rgaps.encode_attrs("bool", (3,)) == block(6, 8, (3,))


def test_publish_writes_the_documented_block(topic):
    a = np.zeros((3, 4), np.float64)
    with rgaps.Subscriber(topic) as sub, rgaps.Publisher(topic) as pub:
        pub.publish(a, header=b"\x00meta\xff")
        pub.publish(np.asfortranarray(a))
        with sub.take(timeout=5) as m:
            assert m.attrs == block(2, 64, (3, 4), header=b"\x00meta\xff")
            assert m.header == b"\x00meta\xff"
        with sub.take(timeout=5) as m:
            assert m.attrs == block(2, 64, (3, 4), (1, 3))
            assert m.header == b"" and m.strides == (8, 24)


def test_header_limits(topic):
    with rgaps.Subscriber(topic) as sub, rgaps.Publisher(topic) as pub:
        # 12 bytes of fixed fields + 8 per dimension: the rest is the header's.
        pub.publish(np.zeros(4, np.uint8), header=b"h" * (256 - 12 - 8))
        with sub.take(timeout=5) as m:
            assert m.header == b"h" * 236
        with pytest.raises(ValueError, match="attribute block"):
            pub.publish(np.zeros(4, np.uint8), header=b"h" * 237)
        with pytest.raises(ValueError, match="attribute block"):
            pub.publish(np.zeros((1,) * 15, np.uint8), header=b"h" * 125)
        pub.publish(np.zeros((1,) * 15, np.uint8), header=b"h" * 124)
        with sub.take(timeout=5) as m:
            assert m.shape == (1,) * 15 and len(m.header) == 124
        with pytest.raises(ValueError, match="at most 15"):
            pub.publish(np.zeros((1,) * 16, np.uint8))


def test_messages_without_a_description_are_bytes(topic):
    with rgaps.Subscriber(topic) as sub, rgaps.Publisher(topic) as pub:
        pub.push(b"abcdef")  # as a C publisher that sends no attribute block
        pub.push(b"ghij", attrs=b"someone else's encoding")
        with sub.take(timeout=5) as m:
            assert not m.described and m.attrs == b"" and m.header is None
            assert m.undescribed_reason is None
            assert m.dtype == "uint8" and m.shape == (6,) and bytes(np.asarray(m)) == b"abcdef"
        with sub.take(timeout=5) as m:
            assert not m.described and m.attrs == b"someone else's encoding"
            assert "not an rgaps array description" in m.undescribed_reason
            assert bytes(np.asarray(m)) == b"ghij"


LIES = {
    "larger than the message": block(2, 32, (1000,)),
    "strides past the end": block(1, 8, (2, 2), (1000, 1)),
    "overflowing shape": block(1, 8, (2**62, 2**62)),
    "negative dimension": block(1, 8, (-4,)),
    "negative stride": block(1, 8, (2,), (-1,)),
    "unknown dtype": block(9, 8, (4,)),
    "vector lanes": block(2, 32, (1,), lanes=4),
    "too many dimensions": block(1, 8, (1,) * 16),
    "length mismatch": block(1, 8, (4,)) + b"trailing",
    "short": b"rg\x01\x00",
    "unknown flags": block(1, 8, (4,), flags=0x80),
    "reserved byte": block(1, 8, (4,), pad=1),
    "header longer than block": block(1, 8, (4,))[:10] + struct.pack("<H", 200),
    "future version": block(1, 8, (4,), version=2),
}


@pytest.mark.parametrize("lie", list(LIES))
def test_lying_blocks_are_refused_and_shown_as_bytes(topic, lie):
    with rgaps.Subscriber(topic) as sub, rgaps.Publisher(topic) as pub:
        pub.push(b"\x01\x02\x03\x04", attrs=LIES[lie])
        with sub.take(timeout=5) as m:
            assert not m.described, lie
            assert m.undescribed_reason
            assert m.shape == (4,) and m.dtype == "uint8" and m.header is None
            assert bytes(np.asarray(m)) == b"\x01\x02\x03\x04"
            caps = m.__dlpack__()
            del caps


def test_attribute_block_limit(topic):
    with rgaps.Publisher(topic) as pub:
        pub.push(b"x", attrs=b"a" * 256)
        with pytest.raises(ValueError, match="at most 256"):
            pub.push(b"x", attrs=b"a" * 257)
