# The example "Basic GPU Computation" of pydotcompute's MetalBackend document, verbatim but for the two import
# substitutions (pydotcompute -> kiln.pydotcompute, mlx.core -> kiln). Run by test_pydotcompute_examples.py.
from kiln.pydotcompute.backends.metal import MetalBackend
import numpy as np

# Create backend
backend = MetalBackend()

# Copy data to Metal GPU
a = backend.copy_to_device(np.array([1, 2, 3], dtype=np.float32))
b = backend.copy_to_device(np.array([4, 5, 6], dtype=np.float32))

# Use MLX for computation
import kiln as mx
c = mx.add(a, b)
mx.eval(c)  # Force evaluation

# Copy result back
result = backend.copy_to_host(c)
print(result)  # [5. 7. 9.]
