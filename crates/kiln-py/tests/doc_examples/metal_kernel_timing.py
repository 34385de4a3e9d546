# The example "Kernel Execution with Timing" of pydotcompute's MetalBackend document, verbatim but for the two import
# substitutions (pydotcompute -> kiln.pydotcompute, mlx.core -> kiln). Run by test_pydotcompute_examples.py.
from kiln.pydotcompute.backends.metal import MetalBackend
import kiln as mx
import numpy as np

backend = MetalBackend()

def compute_kernel(a, b):
    return mx.sqrt(mx.add(mx.square(a), mx.square(b)))

a = backend.copy_to_device(np.random.randn(10000).astype(np.float32))
b = backend.copy_to_device(np.random.randn(10000).astype(np.float32))

result = backend.execute_kernel(compute_kernel, (1,), (1,), a, b)

if result.success:
    print(f"Execution time: {result.execution_time_ms:.3f}ms")
else:
    print(f"Error: {result.error}")
