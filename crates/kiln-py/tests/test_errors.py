"""kiln's errors reach Python as the right exception types with the op named, never as panics."""

import numpy as np
import pytest

import kiln


def test_error_mapping(device):
    a = kiln.ones((2, 3), device=device)
    b = kiln.ones((4, 5), device=device)
    with pytest.raises(ValueError, match=r"\[matmul\].*\(2, 3\).*\(4, 5\)"):
        a @ b
    with pytest.raises(ValueError, match="broadcast"):
        a + b
    with pytest.raises(ValueError, match="reshape"):
        a.reshape(4, 2)
    with pytest.raises(ValueError, match="axis"):
        a.sum(axis=5)
    with pytest.raises(TypeError, match="softmax"):
        kiln.ones(3, dtype="int32", device=device).softmax()
    with pytest.raises(TypeError, match="bool"):
        kiln.ones(3, device=device) & kiln.ones(3, device=device)
    with pytest.raises(kiln.OutOfRangeError, match="index_select") as e:
        a.index_select([0, 7], 1)
    assert isinstance(e.value, IndexError) and isinstance(e.value, ValueError)
    with pytest.raises(ValueError, match="arange"):
        kiln.arange(0, 1, 0, device=device)
    with pytest.raises(TypeError):
        kiln.zeros(3, dtype="complex64")
    with pytest.raises(ValueError, match="negative dimension"):
        kiln.zeros((2, -1))
    with pytest.raises(ValueError, match="device"):
        kiln.Device("tpu")


def test_device_mismatch(gpu):
    with pytest.raises(ValueError, match="different devices"):
        kiln.ones(3, device="cpu").matmul(kiln.ones(3, device=gpu))
    with pytest.raises(ValueError, match="different devices"):
        kiln.concat([kiln.ones(3, device="cpu"), kiln.ones(3, device=gpu)])


def test_gpu_f64_and_out_of_memory(gpu):
    with pytest.raises(TypeError, match="f64"):
        kiln.zeros(3, dtype="float64", device=gpu)
    gpu.set_memory_limit(1 << 20)
    try:
        with pytest.raises(MemoryError, match="out of memory"):
            kiln.zeros((1 << 22,), device=gpu)
    finally:
        gpu.set_memory_limit(None)
    assert kiln.zeros(4, device=gpu).sum().item() == 0.0


def test_no_panic_escapes_on_odd_input(device):
    # Large, empty and degenerate inputs give exceptions or results, never a PanicException.
    for f in [
        lambda: kiln.zeros((0,), device=device).argmax(),
        lambda: kiln.zeros((2**40, 2**40), device=device),
        lambda: kiln.ones((3,), device=device)[np.array([], dtype=np.int64)],
        lambda: kiln.eye(0, device=device).sum(),
        lambda: kiln.ones((2, 0), device=device) @ kiln.ones((0, 3), device=device),
        lambda: kiln.ones((1, 1, 1, 3), device=device).rope(),
        lambda: kiln.ones((1, 1, 2, 4), device=device).sdpa(kiln.ones((1, 1, 0, 4), device=device), kiln.ones((1, 1, 0, 4), device=device)),
    ]:
        try:
            f()
        except (ValueError, TypeError, IndexError, MemoryError, RuntimeError) as e:
            assert "internal error" not in str(e), e
