# The example "Memory Management" of pydotcompute's MetalBackend document, verbatim but for the two import
# substitutions (pydotcompute -> kiln.pydotcompute, mlx.core -> kiln). Run by test_pydotcompute_examples.py.
backend = MetalBackend()

# Check memory usage
info = backend.get_memory_info()
print(f"Buffers: {info['buffer_count']}")
print(f"Cache: {info['cache_memory'] / 1024:.1f} KB")
print(f"Peak: {info['peak_memory'] / 1024:.1f} KB")

# Allocate arrays
arrays = [backend.allocate((1000,), np.float32) for _ in range(10)]

# Check updated count
print(f"Buffers after allocation: {backend.get_memory_info()['buffer_count']}")

# Free arrays
for arr in arrays:
    backend.free(arr)

# Clear cache
backend.clear_cache()
