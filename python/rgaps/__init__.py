"""rgaps: publish arrays to many processes through shared memory, zero-copy.

Python binding of librgaps (Remote GPU-Aware Publish/Subscribe). A Publisher
copies an array once into a topic's shared pool (or writes it there in place
with a loan); every Subscriber on the host reads the same memory in place,
through the buffer protocol (NumPy), DLPack (torch, CuPy, JAX, NumPy) or
``__cuda_array_interface__`` (GPU topics). Each message carries its dtype,
shape and an optional user header. The local rgapsd daemon must be running
($RGAPS_SOCKET, else /run/rgaps/rgapsd.sock).

    import numpy as np, rgaps
    with rgaps.Publisher("camera") as pub:
        pub.publish(np.zeros((480, 640, 3), np.uint8), header=b"frame 0")
    with rgaps.Subscriber("camera") as sub, sub.take(timeout=1.0) as msg:
        a = np.asarray(msg)          # in place, read-only; valid while `a` lives

The rules (when memory is released, streams, the attribute block) are in
docs/PYTHON.md.
"""

import asyncio as _asyncio
import errno as _errno
import json as _json
import sys as _sys

from . import _rgaps
from ._rgaps import (  # noqa: F401  (re-exported)
    ATTR_MAX,
    ATTR_VERSION,
    DLPACK_VERSION,
    MAX_NDIM,
    PROTOCOL_VERSION,
    Disconnected,
    Error,
    Loan,
    Message,
    Timeout,
    encode_attrs,
    strerror,
)
from ._version import __version__  # noqa: F401

#: True when librgaps has the stream-ordered API: stream= arguments then queue
#: work on the stream instead of waiting on the host (docs/PYTHON.md "Streams").
STREAM_ORDERED = bool(_rgaps.STREAM_ORDERED)

__all__ = [
    "Publisher",
    "Subscriber",
    "Message",
    "Loan",
    "Error",
    "Timeout",
    "Disconnected",
    "query",
    "topics",
    "encode_attrs",
    "strerror",
    "STREAM_ORDERED",
    "ATTR_MAX",
    "MAX_NDIM",
]

_PY_TYPES = {float: "float64", int: "int64", bool: "bool", complex: "complex128"}


def _dtype_name(dtype):
    """A dtype given as a string, a NumPy dtype or scalar type, a torch dtype or a
    Python type, as the name the C core parses."""
    if isinstance(dtype, str):
        return dtype
    if dtype in _PY_TYPES:
        return _PY_TYPES[dtype]
    text = str(dtype)
    if text.startswith("torch."):
        return text
    np = _sys.modules.get("numpy")
    if np is not None:
        try:
            return np.dtype(dtype).name
        except TypeError:
            pass
    raise TypeError(f"dtype {dtype!r} is not one rgaps can describe")


class Publisher(_rgaps.Publisher):
    """Publisher(topic): publishes arrays to a topic.

    publish(obj, *, header=None, timeout=None, stream=None) copies an array
    once into the topic's pool; loan(shape, dtype) gives a writable array in
    the pool itself, published when its with block ends.
    """

    __slots__ = ()

    def loan(self, shape, dtype="uint8", *, header=None, timeout=None):
        """A writable array of `shape` and `dtype` in the topic's pool.

        Use it in a with block: leaving the block publishes it, an exception
        cancels it. Write it through numpy.asarray(loan) (host topics) or
        torch.from_dlpack(loan) / cupy.asarray(loan) (GPU topics); arrays made
        from it must not be written after the block.
        """
        return super().loan(shape, _dtype_name(dtype), header=header, timeout=timeout)


def _wake(fut):
    if not fut.done():
        fut.set_result(None)


class Subscriber(_rgaps.Subscriber):
    """Subscriber(topic): takes the messages of a topic.

    take(timeout=None) -> Message; iteration (``for msg in sub``), fileno()
    for selectors, and asyncio (``await sub.atake()``, ``async for msg in
    sub``).
    """

    __slots__ = ()

    async def atake(self, timeout=None):
        """Await the next message (asyncio); rgaps.Timeout after `timeout` s."""
        loop = _asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while True:
            try:
                return self.take(0)
            except Timeout:
                pass
            left = None if deadline is None else deadline - loop.time()
            if left is not None and left <= 0:
                raise Timeout(
                    _errno.ETIMEDOUT,
                    f"Subscriber('{self.topic}').atake: no message within {timeout} s",
                )
            fd = self.fileno()
            fut = loop.create_future()
            loop.add_reader(fd, _wake, fut)
            try:
                await _asyncio.wait_for(fut, left)
            except _asyncio.TimeoutError:
                pass
            finally:
                loop.remove_reader(fd)

    def __aiter__(self):
        return self

    async def __anext__(self):
        if self.closed:
            raise StopAsyncIteration
        return await self.atake()


def query(request):
    """Send one control request (a dict with "type", see docs/PROTOCOL.md) to
    rgapsd and return its reply as a dict; rgaps.Error if it refused."""
    err, reply = _rgaps._query(_json.dumps(request))
    data = _json.loads(reply) if reply else {}
    if err:
        why = data.get("error")
        why = why.get("message") if isinstance(why, dict) else why
        cls = Disconnected if -err in (_errno.ENOTCONN, _errno.ECONNREFUSED) else Error
        raise cls(-err, f"rgapsd refused {request.get('type')!r}: {why or strerror(err)}")
    return data


def topics():
    """The daemon's topics: a list of dicts (name, memory, publishers,
    subscribers, published, pool_size, pool_used)."""
    return query({"type": "topics"}).get("topics", [])
