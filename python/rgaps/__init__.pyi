# Type stubs of the rgaps package (docs/PYTHON.md).
from typing import Any, AsyncIterator, List, Optional, Tuple, Union

from ._rgaps import (
    ATTR_MAX as ATTR_MAX,
    ATTR_VERSION as ATTR_VERSION,
    DLPACK_VERSION as DLPACK_VERSION,
    MAX_NDIM as MAX_NDIM,
    PROTOCOL_VERSION as PROTOCOL_VERSION,
    Disconnected as Disconnected,
    Error as Error,
    Loan as Loan,
    Message as Message,
    Seconds,
    Timeout as Timeout,
    encode_attrs as encode_attrs,
    strerror as strerror,
)
from ._rgaps import Publisher as _Publisher
from ._rgaps import Subscriber as _Subscriber

__version__: str
STREAM_ORDERED: bool

DTypeLike = Union[str, type, Any]  # 'float32', numpy dtypes and scalar types, torch dtypes

class Publisher(_Publisher):
    def loan(self, shape: Union[int, Tuple[int, ...]], dtype: DTypeLike = ..., *,
             header: Optional[bytes] = ..., timeout: Seconds = ...) -> Loan: ...

class Subscriber(_Subscriber):
    async def atake(self, timeout: Seconds = ...) -> Message: ...
    def __aiter__(self) -> AsyncIterator[Message]: ...
    async def __anext__(self) -> Message: ...

def query(request: dict) -> dict: ...
def topics() -> List[dict]: ...
