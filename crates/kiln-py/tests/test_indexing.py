"""NumPy indexing against NumPy itself, on both devices."""

import numpy as np
import pytest

import kiln

KEYS = [
    1,
    -1,
    (0, 2),
    slice(None),
    slice(1, None),
    slice(None, None, 2),
    slice(None, None, -1),
    slice(4, 0, -2),
    slice(-2, None),
    slice(10, 20),
    (slice(None), 1),
    (Ellipsis, 1),
    (1, Ellipsis),
    (None, 1),
    (slice(None), None, slice(None, None, -1)),
    (Ellipsis, None),
    (slice(1, 3), slice(None), slice(None, None, 3)),
    [0, 2, 2],
    [-1, 0],
    ([0, 1], [2, 3]),
    (slice(None), [3, 1]),
    ([[0, 1], [2, 0]],),
    ([0, 2], slice(None), [1, 0]),
    ([1], [0, 2]),
    (slice(None), [0, 2], [4, 4]),
    (None, [1, 0], Ellipsis),
]


@pytest.mark.parametrize("key", KEYS, ids=[repr(k) for k in KEYS])
def test_getitem_matches_numpy(device, key):
    x = np.arange(3 * 4 * 5, dtype=np.float32).reshape(3, 4, 5)
    t = kiln.asarray(x, device=device)
    nkey = tuple(np.array(k) if isinstance(k, list) else k for k in key) if isinstance(key, tuple) else (np.array(key) if isinstance(key, list) else key)
    expected = x[nkey]
    got = t[key]
    assert got.shape == expected.shape
    np.testing.assert_array_equal(np.asarray(got), expected)


def test_boolean_masks(device, rng):
    x = rng.standard_normal((4, 6)).astype(np.float32)
    t = kiln.asarray(x, device=device)
    np.testing.assert_array_equal(np.asarray(t[t > 0]), x[x > 0])
    rows = np.array([True, False, True, True])
    np.testing.assert_array_equal(np.asarray(t[rows]), x[rows])
    np.testing.assert_array_equal(np.asarray(t[:, kiln.asarray(x[0] > 0)]), x[:, x[0] > 0])
    np.testing.assert_array_equal(np.asarray(t[x < -5]), x[x < -5])  # nothing selected


def test_index_arrays_from_tensors_and_views(device):
    x = np.arange(24, dtype=np.int32).reshape(4, 6)
    t = kiln.asarray(x, device=device)
    idx = kiln.asarray([3, 0], device=device)
    np.testing.assert_array_equal(np.asarray(t[idx]), x[[3, 0]])
    # Views of views: steps, then a transpose, then negative steps.
    v = t[::2, 1::2].T[::-1]
    np.testing.assert_array_equal(np.asarray(v), x[::2, 1::2].T[::-1])
    assert t[1:, 2:].shares_storage_with(t)
    assert t[1, 2].item() == 8 and isinstance(t[1, 2].item(), int)


def test_index_errors(device):
    t = kiln.zeros((3, 4), device=device)
    with pytest.raises(IndexError):
        t[3]
    with pytest.raises(IndexError):
        t[0, 0, 0]
    with pytest.raises(IndexError):
        t[[0, 5]]
    with pytest.raises(IndexError):
        t[..., ...]
    with pytest.raises(IndexError):
        t[np.ones(5, bool)]
    with pytest.raises(TypeError):
        t[1.5]
    with pytest.raises(IndexError):
        t[1.5] = 1  # NumPy raises IndexError for a float key in an assignment
    with pytest.raises(IndexError):
        t[0, 0, 0, 0] = 1


def test_iteration_and_len(device):
    x = np.arange(6, dtype=np.float32).reshape(3, 2)
    t = kiln.asarray(x, device=device)
    assert len(t) == 3
    assert [r.tolist() for r in t] == x.tolist()
    with pytest.raises(TypeError):
        len(kiln.asarray(1.0))
