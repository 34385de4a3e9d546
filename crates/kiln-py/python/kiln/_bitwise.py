"""The bitwise functions of the array API: ``bitwise_and bitwise_or bitwise_xor bitwise_invert``
and the shifts ``bitwise_left_shift bitwise_right_shift``, on integer (and, for and/or/xor/invert,
bool) tensors, with broadcasting and promotion.

On a GPU, and/or/xor/invert run as a WGSL kernel over the operands' 32-bit storage words (every
kiln dtype is stored as whole words there: 4 bytes of int8/uint8 in a word, 2 of int16/uint16,
int64/uint64 as two words), after
broadcasting the operands to one contiguous shape. The shifts, and every function on the CPU,
compute with NumPy on the host (a CPU tensor is read in place; a GPU tensor's shifts make a round
trip through host memory).
"""

import numpy as np

from . import _kiln


# Bitwise functions (integers and bool).
def _int_pair(op, x1, x2):
    dt = x1.dtype.promote(x2.dtype)
    if dt.is_float:
        raise TypeError(f"[{op}] needs integer or bool tensors, got {x1.dtype} and {x2.dtype}")
    a = np.asarray(x1.astype(dt) if x1.dtype != dt else x1)
    b = np.asarray(x2.astype(dt) if x2.dtype != dt else x2)
    return a, b, dt


# One 32-bit storage word per invocation; p[0] = words, p[1] = 0 and, 1 or, 2 xor, 3 not (of `a`),
# p[2] = 1 when `b` is a single element (p[3]: the dtype's size in bytes).
_WORDS_WGSL = """
@group(0) @binding(0) var<storage, read_write> out: array<u32>;
@group(0) @binding(1) var<storage, read> a: array<u32>;
@group(0) @binding(2) var<storage, read> b: array<u32>;
@group(1) @binding(0) var<storage, read> p: array<u32, 64>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>) {
    let i = gid.x + gid.y * nw.x * 256u;
    if (i >= p[0]) {
        return;
    }
    let x = a[i];
    var y = b[i];
    if (p[2] == 1u) {
        // `b` is one element: repeated over the word (1- and 2-byte dtypes), or the word pair (8-byte
        // ones).
        y = b[0];
        if (p[3] == 1u) {
            let s = y & 0xffu;
            y = s | (s << 8u) | (s << 16u) | (s << 24u);
        } else if (p[3] == 2u) {
            let s = y & 0xffffu;
            y = s | (s << 16u);
        } else if (p[3] == 8u) {
            y = b[i & 1u];
        }
    }
    switch p[1] {
        case 0u: { out[i] = x & y; }
        case 1u: { out[i] = x | y; }
        case 2u: { out[i] = x ^ y; }
        default: { out[i] = ~x; }
    }
}
"""
_CODES = {"bitwise_and": 0, "bitwise_or": 1, "bitwise_xor": 2, "bitwise_invert": 3}


def _gpu_words(op, a, b, b_scalar=False):
    """`op` of two GPU tensors of one dtype, word by word (see the module doc): `b` has `a`'s shape,
    or is one element when `b_scalar`."""
    dev = a.device
    shape = tuple(a.shape)
    n = a.size
    if n == 0:
        return _kiln.zeros(shape, dtype=a.dtype, device=dev)
    words = -(-n * a.dtype.itemsize // 4)
    groups = -(-words // 256)
    gx = groups if groups <= 65535 else 65535
    gy = -(-groups // gx)
    params = [words, _CODES[op], int(b_scalar), a.dtype.itemsize]
    (out,), _, _ = dev.custom_kernel(_WORDS_WGSL, "main", [a, b], [(shape, a.dtype)], (gx, gy, 1), params)
    return out


def _bitwise(op, f, x1, x2):
    dt = x1.dtype.promote(x2.dtype)
    if dt.is_float:
        raise TypeError(f"[{op}] needs integer or bool tensors, got {x1.dtype} and {x2.dtype}")
    if x1.device.is_gpu:
        shape = tuple(np.broadcast_shapes(tuple(x1.shape), tuple(x2.shape)))
        a, b = x1.astype(dt), x2.astype(dt)
        if tuple(a.shape) != shape:
            a, b = b, a  # and, or, xor commute
        if tuple(a.shape) == shape and b.size == 1:
            return _gpu_words(op, a, b.reshape(()), b_scalar=True)
        return _gpu_words(op, a.broadcast_to(shape), b.broadcast_to(shape))
    a, b, dt = _int_pair(op, x1, x2)
    with np.errstate(all="ignore"):
        return _kiln.asarray(np.asarray(f(a, b), order="C"), dtype=dt, device=x1.device)


def bitwise_and(x1, x2, /):
    """Bitwise and of integer (or bool) tensors, with broadcasting and promotion."""
    return _bitwise("bitwise_and", np.bitwise_and, x1, x2)


def bitwise_or(x1, x2, /):
    """Bitwise or of integer (or bool) tensors."""
    return _bitwise("bitwise_or", np.bitwise_or, x1, x2)


def bitwise_xor(x1, x2, /):
    """Bitwise exclusive or of integer (or bool) tensors."""
    return _bitwise("bitwise_xor", np.bitwise_xor, x1, x2)


def _shift(op, f, x1, x2):
    a, b, dt = _int_pair(op, x1, x2)
    if dt == _kiln.bool:
        raise TypeError(f"[{op}] needs integer tensors, got bool")
    if (b < 0).any():
        raise ValueError(f"[{op}] shift counts must be >= 0")
    bits = a.dtype.itemsize * 8
    big = b >= bits
    bb = np.where(big, 0, b).astype(a.dtype)
    r = f(a, bb)
    # Fill values of a's dtype (a Python -1 next to uint64 would make the result float64).
    zero = np.zeros((), a.dtype)
    if f is np.left_shift:
        r = np.where(big, zero, r)
    else:
        r = np.where(big, np.where(a < 0, np.array(-1).astype(a.dtype), zero), r)
    return _kiln.asarray(np.asarray(r, dtype=a.dtype, order="C"), dtype=dt, device=x1.device)


def bitwise_left_shift(x1, x2, /):
    """`x1 << x2` (integers; shifts of the bit width or more give 0)."""
    return _shift("bitwise_left_shift", np.left_shift, x1, x2)


def bitwise_right_shift(x1, x2, /):
    """`x1 >> x2` (arithmetic for signed integers; shifts of the bit width or more give 0 or -1)."""
    return _shift("bitwise_right_shift", np.right_shift, x1, x2)


def bitwise_invert(x, /):
    """Bitwise not of an integer tensor (logical not of a bool one)."""
    if x.dtype.is_float:
        raise TypeError(f"[bitwise_invert] needs an integer or bool tensor, got {x.dtype}")
    if x.dtype == _kiln.bool:
        return x.logical_not()
    if x.device.is_gpu:
        return _gpu_words("bitwise_invert", x, x)
    return _kiln.asarray(np.asarray(np.invert(np.asarray(x)), order="C"), dtype=x.dtype, device=x.device)
