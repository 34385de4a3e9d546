# The example "Using Pre-built Kernels" of pydotcompute's MetalBackend document, verbatim but for the two import
# substitutions (pydotcompute -> kiln.pydotcompute, mlx.core -> kiln). Run by test_pydotcompute_examples.py.
from kiln.pydotcompute.backends.metal import (
    MetalBackend,
    get_vector_add_kernel,
    get_matrix_multiply_kernel,
    get_elementwise_kernel,
)
import numpy as np

backend = MetalBackend()

# Vector addition
add_kernel = get_vector_add_kernel()
a = backend.copy_to_device(np.array([1, 2, 3], dtype=np.float32))
b = backend.copy_to_device(np.array([4, 5, 6], dtype=np.float32))
result = add_kernel(a, b)

# Matrix multiplication
matmul_kernel = get_matrix_multiply_kernel()
A = backend.copy_to_device(np.random.randn(100, 100).astype(np.float32))
B = backend.copy_to_device(np.random.randn(100, 100).astype(np.float32))
C = matmul_kernel(A, B)

# Elementwise operations
sqrt_kernel = get_elementwise_kernel("sqrt")
data = backend.copy_to_device(np.array([1, 4, 9], dtype=np.float32))
roots = sqrt_kernel(data)  # [1, 2, 3]
