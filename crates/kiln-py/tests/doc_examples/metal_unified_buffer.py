# The example "Integration with UnifiedBuffer" of pydotcompute's MetalBackend document, verbatim but for the two import
# substitutions (pydotcompute -> kiln.pydotcompute, mlx.core -> kiln). Run by test_pydotcompute_examples.py.
from kiln.pydotcompute.core.unified_buffer import UnifiedBuffer
import numpy as np

# Create a UnifiedBuffer
buffer = UnifiedBuffer((1000,), dtype=np.float32)
buffer.allocate()

# Write data on host
buffer.host[:] = np.random.randn(1000).astype(np.float32)
buffer.mark_host_dirty()

# Access on Metal GPU (auto-syncs from host)
metal_array = buffer.metal  # Returns MLX array

# Perform computation
import kiln as mx
result = mx.sum(metal_array)
mx.eval(result)
print(f"Sum: {float(result)}")

# Mark Metal as dirty if modified
buffer.mark_metal_dirty()
