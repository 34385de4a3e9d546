"""The backend interface of pydotcompute: ``BackendType``, ``KernelExecutionResult``, ``Backend``."""

import abc
import dataclasses
import enum
from typing import Any, Optional


class BackendType(enum.Enum):
    """The kinds of pydotcompute backends."""

    CPU = "cpu"
    CUDA = "cuda"
    METAL = "metal"


@dataclasses.dataclass
class KernelExecutionResult:
    """What ``execute_kernel`` returns: ``success``; ``execution_time_ms``, the time the device spent
    on the kernel's work (GPU timestamps when ``gpu_timestamps``, else the wall clock up to a
    synchronize); ``error``, the message when it failed; ``output``, what the kernel returned."""

    success: bool
    execution_time_ms: float = 0.0
    error: Optional[str] = None
    output: Any = None
    gpu_timestamps: bool = False

    def __bool__(self):
        return self.success


class Backend(abc.ABC):
    """The interface every pydotcompute backend implements."""

    @property
    @abc.abstractmethod
    def backend_type(self) -> BackendType: ...

    @property
    @abc.abstractmethod
    def is_available(self) -> bool: ...

    @property
    @abc.abstractmethod
    def device_count(self) -> int: ...

    @property
    @abc.abstractmethod
    def device_id(self) -> int: ...

    @abc.abstractmethod
    def allocate(self, shape, dtype): ...

    @abc.abstractmethod
    def allocate_zeros(self, shape, dtype): ...

    @abc.abstractmethod
    def free(self, array) -> None: ...

    @abc.abstractmethod
    def copy_to_device(self, host_array): ...

    @abc.abstractmethod
    def copy_to_host(self, device_array): ...

    @abc.abstractmethod
    def synchronize(self) -> None: ...

    @abc.abstractmethod
    def execute_kernel(self, kernel, grid_size, block_size, *args, **kwargs) -> KernelExecutionResult: ...

    @abc.abstractmethod
    def compile_kernel(self, func, signature=None): ...

    @abc.abstractmethod
    def get_memory_info(self) -> dict: ...

    @abc.abstractmethod
    def clear_cache(self) -> None: ...
