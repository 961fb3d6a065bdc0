"""Loans: arrays written in place in the pool, published when their with
block ends, cancelled on an exception."""
import gc

import pytest

import rgaps

np = pytest.importorskip("numpy")


@pytest.mark.parametrize("dtype", ["float32", np.float32, np.dtype("<i2"), float, "uint8", bool])
def test_loan_is_published_at_the_end_of_the_with_block(topic, dtype):
    with rgaps.Subscriber(topic) as sub, rgaps.Publisher(topic) as pub:
        with pub.loan((4, 5), dtype, header=b"loaned") as loan:
            assert loan.state == "open"
            a = np.asarray(loan)
            assert a.flags.writeable and a.shape == (4, 5)
            a[...] = np.arange(20).reshape(4, 5) % 2
            expect = a.copy()
            with pytest.raises(rgaps.Timeout):
                sub.take(0)  # nothing published yet
        assert loan.state == "committed"
        with sub.take(timeout=5) as m:
            assert m.header == b"loaned" and m.shape == (4, 5)
            assert np.dtype(m.dtype) == np.dtype(dtype)
            assert np.array_equal(np.asarray(m), expect)


def test_exception_cancels(topic):
    with rgaps.Subscriber(topic) as sub, rgaps.Publisher(topic) as pub:
        with pytest.raises(RuntimeError):
            with pub.loan(16) as loan:
                np.asarray(loan)[:] = 7
                raise RuntimeError("producer failed")
        assert loan.state == "cancelled"
        pub.publish(np.zeros(1, np.uint8))
        with sub.take(timeout=5) as m:
            assert m.seq == 0 and m.shape == (1,)  # the cancelled loan never arrived


def test_explicit_commit_cancel_and_reuse_refused(topic):
    with rgaps.Subscriber(topic) as sub, rgaps.Publisher(topic) as pub:
        loan = pub.loan((3,), "int64")
        np.asarray(loan)[:] = [1, 2, 3]
        loan.commit()
        with pytest.raises(ValueError, match="published already"):
            loan.commit()
        with pytest.raises(BufferError, match="published already"):
            np.asarray(loan)
        with pytest.raises(ValueError, match="published already"):
            with loan:
                pass
        loan2 = pub.loan(8)
        loan2.cancel()
        loan2.cancel()
        with sub.take(timeout=5) as m:
            assert list(np.asarray(m)) == [1, 2, 3]


def test_dropped_loan_goes_back_to_the_pool(daemon):
    with rgaps.Publisher("loans") as pub:  # max_loans 2
        for _ in range(10):
            pub.loan(1024)  # garbage at once: cancelled
        a, b = pub.loan(8), pub.loan(8)
        with pytest.raises(rgaps.Error, match="max_loans") as e:
            pub.loan(8)
        assert e.value.errno == 105
        del a
        gc.collect()
        c = pub.loan(8)
        c.cancel()
        b.cancel()


def test_loan_dlpack_is_writable(topic):
    from test_release import DLManagedTensorVersioned, PyCapsule_GetPointer

    with rgaps.Subscriber(topic) as sub, rgaps.Publisher(topic) as pub:
        with pub.loan((2, 2), "float64") as loan:
            assert loan.__dlpack_device__() == (1, 0)
            cap = loan.__dlpack__(max_version=(1, 0))
            m = DLManagedTensorVersioned.from_address(
                PyCapsule_GetPointer(cap, b"dltensor_versioned"))
            assert m.flags == 0 and m.dl_tensor.data == loan.ptr  # writable, in the pool
            d = np.from_dlpack(loan)  # numpy 1.x makes it read-only itself
            np.asarray(loan)[...] = [[1, 2], [3, 4]]
            assert d.tolist() == [[1.0, 2.0], [3.0, 4.0]]  # the same memory
            assert not hasattr(loan, "__cuda_array_interface__")
            del cap
        with sub.take(timeout=5) as m:
            assert np.asarray(m).tolist() == [[1.0, 2.0], [3.0, 4.0]]


def test_loan_arguments(topic):
    with rgaps.Publisher(topic) as pub:
        with pytest.raises(TypeError, match="dtype"):
            pub.loan(4, "object")
        with pytest.raises(ValueError, match="non-negative"):
            pub.loan((-1, 4))
        with pytest.raises(rgaps.Error, match="max_message_size"):
            pub.loan((1024, 1024, 8))  # 8 MiB > 4 MiB
        with pub.loan((0, 3), "float32") as loan:
            assert loan.nbytes == 0
