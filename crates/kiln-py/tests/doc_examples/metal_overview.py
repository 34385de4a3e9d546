# The example "Overview" of pydotcompute's MetalBackend document, verbatim but for the two import
# substitutions (pydotcompute -> kiln.pydotcompute, mlx.core -> kiln). Run by test_pydotcompute_examples.py.
from kiln.pydotcompute.backends.metal import MetalBackend

backend = MetalBackend()
if backend.is_available:
    # GPU acceleration on Apple Silicon
    data = backend.copy_to_device(np.array([1, 2, 3], dtype=np.float32))
