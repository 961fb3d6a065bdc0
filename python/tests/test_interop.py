"""Interop with array libraries on host memory: torch (CPU) publishes and
consumes through DLPack, in place; bfloat16, which only DLPack can carry; and
the examples of examples/python."""
import gc
import os
import subprocess
import sys

import pytest

import rgaps

np = pytest.importorskip("numpy")
HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLES = os.path.join(HERE, "..", "..", "examples", "python")


@pytest.fixture
def torch():
    return pytest.importorskip("torch")


def test_torch_round_trip_in_place(topic, torch):
    with rgaps.Subscriber(topic) as sub, rgaps.Publisher(topic) as pub:
        dtypes = [torch.float32, torch.int64, torch.uint8, torch.float16, torch.bfloat16,
                  torch.complex64]
        if int(torch.__version__.split(".")[0]) >= 2:
            dtypes.append(torch.bool)  # DLPack's bool came with torch 2
        for dtype in dtypes:
            t = (torch.arange(24) % 2).to(dtype).reshape(2, 3, 4)
            pub.publish(t)  # torch's __dlpack__ (older torch: no max_version keyword)
            with sub.take(timeout=5) as m:
                r = torch.from_dlpack(m)
                assert r.dtype == dtype and r.shape == t.shape and torch.equal(r, t)
                assert r.data_ptr() == m.ptr  # the shared memory itself
                assert m.dtype == str(dtype).split(".")[1]
            del r, m  # (reading m.ptr kept it held until m goes)
            gc.collect()
            assert sub.held == 0


def test_torch_transposed_and_loan(topic, torch):
    with rgaps.Subscriber(topic) as sub, rgaps.Publisher(topic) as pub:
        t = torch.arange(12.0).reshape(3, 4).t()
        pub.publish(t)
        with pub.loan((5,), torch.int32) as loan:
            torch.from_dlpack(loan).copy_(torch.arange(5, dtype=torch.int32) * 3)
        with sub.take(timeout=5) as a, sub.take(timeout=5) as b:
            assert torch.equal(torch.from_dlpack(a), t) and a.strides is not None
            assert torch.from_dlpack(b).tolist() == [0, 3, 6, 9, 12]


def test_bfloat16_needs_dlpack(topic, torch):
    with rgaps.Subscriber(topic) as sub, rgaps.Publisher(topic) as pub:
        pub.publish(torch.ones(4, dtype=torch.bfloat16))
        with sub.take(timeout=5) as m:
            assert m.dtype == "bfloat16"
            with pytest.raises(TypeError, match="bfloat16 has no numpy buffer format"):
                np.asarray(m)
            assert np.frombuffer(m.raw(), np.uint16).tolist() == [0x3F80] * 4


def test_numpy_example(daemon):
    p = subprocess.run([sys.executable, os.path.join(EXAMPLES, "numpy_host.py"),
                        "--consumers", "2", "--frames", "15"],
                       capture_output=True, text=True, timeout=300, env=dict(os.environ))
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.count("15 frames checked, 0 wrong, 0 lost") == 2, p.stdout
