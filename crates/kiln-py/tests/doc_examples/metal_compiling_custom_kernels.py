# The example "Compiling Custom Kernels" of pydotcompute's MetalBackend document, verbatim but for the two import
# substitutions (pydotcompute -> kiln.pydotcompute, mlx.core -> kiln). Run by test_pydotcompute_examples.py.
import kiln as mx
from kiln.pydotcompute.backends.metal import MetalBackend
import numpy as np

backend = MetalBackend()

# Define a custom kernel using MLX operations
def gaussian_kernel(x: mx.array) -> mx.array:
    return mx.exp(mx.negative(mx.square(x)))

# Compile the kernel
compiled = backend.compile_kernel(gaussian_kernel)

# Use with NumPy arrays (auto-converted)
input_data = np.linspace(-3, 3, 100).astype(np.float32)
output = compiled(input_data)
result = backend.copy_to_host(output)
