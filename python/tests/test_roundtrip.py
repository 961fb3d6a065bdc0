"""Round trips through a host-memory topic: every dtype rgaps describes, many
shapes and layouts, the sources publish() accepts, and the header."""
import pytest

import rgaps

np = pytest.importorskip("numpy")

DTYPES = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
          "float16", "float32", "float64", "complex64", "complex128", "bool"]
SHAPES = [(), (0,), (1,), (7,), (3, 4), (2, 3, 4), (2, 1, 3, 1, 2), (5, 0, 3), (64, 1024)]


def sample(shape, dtype, seed=1):
    rng = np.random.default_rng(seed)
    if dtype == "bool":
        return rng.integers(0, 2, size=shape).astype(bool)
    if dtype.startswith("complex"):
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)
    if dtype.startswith(("int", "uint")):
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max, size=shape, dtype=dtype, endpoint=True)
    return rng.standard_normal(shape).astype(dtype)


def roundtrip(topic, obj, **kw):
    with rgaps.Subscriber(topic) as sub, rgaps.Publisher(topic) as pub:
        pub.publish(obj, **kw)
        msg = sub.take(timeout=5)
        return msg, np.asarray(msg)


@pytest.mark.parametrize("dtype", DTYPES)
def test_every_dtype(topic, dtype):
    a = sample((3, 5), dtype)
    msg, b = roundtrip(topic, a)
    assert msg.dtype == dtype and msg.shape == (3, 5) and msg.described
    assert b.dtype == a.dtype and b.shape == a.shape
    assert np.array_equal(a, b)
    assert not b.flags.writeable


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_shapes(topic, shape):
    a = sample(shape, "float32")
    msg, b = roundtrip(topic, a)
    assert msg.shape == shape and b.shape == shape
    assert np.array_equal(a, b)
    assert msg.nbytes == max(a.nbytes, 1)  # an empty array travels with one pad byte


def test_many_dtypes_and_shapes_in_one_stream(topic):
    cases = [(s, d) for d in DTYPES for s in SHAPES[:6]]
    with rgaps.Subscriber(topic) as sub, rgaps.Publisher(topic) as pub:
        for i, (shape, dtype) in enumerate(cases):
            a = sample(shape, dtype, seed=i)
            pub.publish(a, header=f"{i}".encode())
            with sub.take(timeout=5) as msg:
                b = np.asarray(msg)
                assert msg.seq == i and msg.header == f"{i}".encode()
                assert b.dtype == a.dtype and b.shape == a.shape
                assert np.array_equal(a, b), (shape, dtype)
                del b


@pytest.mark.parametrize("layout", ["F", "T", "T3"])
def test_dense_non_c_layouts_keep_their_strides(topic, layout):
    base = sample((4, 5, 6), "int32")
    a = {"F": np.asfortranarray(base), "T": base.transpose(2, 0, 1),
         "T3": base.transpose(1, 2, 0)}[layout]
    msg, b = roundtrip(topic, a)
    assert msg.strides is not None  # travelled as it is, no copy to C order
    assert msg.nbytes == a.nbytes
    assert np.array_equal(a, b) and b.strides == a.strides


def test_non_contiguous_is_refused(topic):
    a = np.arange(100, dtype=np.int64)[::2]
    with rgaps.Publisher(topic) as pub, pytest.raises(ValueError, match="not contiguous"):
        pub.publish(a)
    with rgaps.Publisher(topic) as pub, pytest.raises(ValueError, match="contiguous"):
        pub.publish(np.arange(24).reshape(4, 6)[:, ::-1])


@pytest.mark.parametrize("src", ["bytes", "bytearray", "memoryview", "array"])
def test_bytes_like_sources(topic, src):
    import array

    data = bytes(range(256)) * 3
    obj = {"bytes": data, "bytearray": bytearray(data), "memoryview": memoryview(data),
           "array": array.array("B", data)}[src]
    msg, b = roundtrip(topic, obj)
    assert msg.dtype == "uint8" and msg.shape == (768,)
    assert bytes(b) == data and bytes(msg.raw()) == data


def test_large_message(topic):
    a = np.arange(4 * 1024 * 1024 // 8, dtype=np.float64)
    msg, b = roundtrip(topic, a)
    assert msg.nbytes == 4 * 1024 * 1024 and np.array_equal(a, b)


class DLPackOnly:
    """An array that speaks only DLPack (as a torch CPU tensor does)."""

    def __init__(self, a, legacy=False):
        self.a, self.legacy, self.calls = a, legacy, []

    def __dlpack_device__(self):
        return self.a.__dlpack_device__()

    def __dlpack__(self, **kw):
        self.calls.append(kw)
        if self.legacy and "max_version" in kw:
            raise TypeError("__dlpack__() got an unexpected keyword argument 'max_version'")
        return self.a.__dlpack__()


@pytest.mark.parametrize("legacy", [False, True])
def test_dlpack_source(topic, legacy):
    a = sample((6, 7), "float64")
    src = DLPackOnly(a, legacy)
    msg, b = roundtrip(topic, src)
    assert np.array_equal(a, b) and msg.dtype == "float64" and msg.shape == (6, 7)
    assert src.calls[0].get("max_version") == (1, 0)


def test_dlpack_source_transposed(topic):
    a = sample((6, 7), "int16").T
    msg, b = roundtrip(topic, DLPackOnly(a))
    assert np.array_equal(a, b)


def test_gpu_sources_are_refused_by_host_topics(topic):
    class OnGPU:
        __cuda_array_interface__ = {"shape": (4,), "typestr": "<f4", "data": (0x1000, False),
                                    "version": 3}

    class DLPackGPU:
        def __dlpack_device__(self):
            return (2, 0)

        def __dlpack__(self, **kw):
            raise AssertionError("not reached: refused before export")

    with rgaps.Publisher(topic) as pub:
        with pytest.raises(ValueError, match="host memory"):
            pub.publish(OnGPU())
    with rgaps.Publisher(topic) as pub:
        with pytest.raises((ValueError, AssertionError)):
            pub.publish(DLPackGPU())


def test_unsupported_objects(topic):
    with rgaps.Publisher(topic) as pub:
        with pytest.raises(TypeError, match="buffer protocol"):
            pub.publish([1, 2, 3])
        with pytest.raises(TypeError, match="not a dtype"):
            pub.publish(np.array(["a", "b"]))
        with pytest.raises(TypeError, match="not a dtype"):
            pub.publish(np.zeros(3, dtype=[("x", "i4"), ("y", "f4")]))
        with pytest.raises(TypeError, match="bytes-like"):
            pub.publish(b"x", header="text")
