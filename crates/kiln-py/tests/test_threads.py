"""Tensors shared between Python threads; the GIL is released while kiln computes."""

import threading
import time

import numpy as np

import kiln


def test_threads_share_tensors(device):
    x = kiln.randn((64, 64), seed=5, device=device)
    ref = np.asarray(x @ x).copy()
    errors = []

    def work():
        try:
            for _ in range(5):
                np.testing.assert_allclose(np.asarray(x @ x), ref, rtol=1e-5, atol=1e-5)
                assert abs((x.softmax(-1).sum(axis=-1) - 1).abs().max().item()) < 1e-5
        except Exception as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def test_gil_released_during_one_op():
    # A thread keeps stamping the time while the main thread runs one long kiln call. With the GIL
    # held through the call, no stamp could fall strictly inside it.
    stamps = []
    stop = threading.Event()

    def stamper():
        while not stop.is_set():
            stamps.append(time.perf_counter())
            time.sleep(0.0005)

    th = threading.Thread(target=stamper)
    th.start()
    try:
        for n in (256, 512, 1024, 2048):
            x = kiln.randn((n, n), seed=1, device="cpu")
            t0 = time.perf_counter()
            y = x @ x
            t1 = time.perf_counter()
            if t1 - t0 > 0.05:
                break
    finally:
        stop.set()
        th.join()
    assert y.shape == (n, n)
    inside = [s for s in stamps if t0 < s < t1]
    assert len(inside) >= 2, f"no progress of another thread during a {1e3 * (t1 - t0):.0f} ms matmul"


def test_setitem_while_other_threads_read(device):
    # Readers hold the tensor while their ops run (GIL released); `t[i] = v` waits for them.
    t = kiln.asarray(np.zeros(4096, np.float32), device=device)
    stop = threading.Event()
    errors = []

    def reader():
        try:
            while not stop.is_set():
                t.sum()
                time.sleep(0.001)
        except Exception as e:  # reported below
            errors.append(e)

    readers = [threading.Thread(target=reader) for _ in range(2)]
    for r in readers:
        r.start()
    try:
        for i in range(20):
            t[i] = float(i + 1)
    finally:
        stop.set()
        for r in readers:
            r.join()
    assert not errors
    np.testing.assert_array_equal(np.asarray(t)[:21], np.r_[np.arange(1, 21), 0])
