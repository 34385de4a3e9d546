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


def test_gil_released_during_cpu_work():
    # While one thread runs a long kiln op, another thread keeps running Python code: with the GIL
    # held it would make no progress at all during the op.
    x = kiln.randn((384, 384), seed=1, device="cpu")
    ticks = []
    running = threading.Event()

    def counter():
        running.set()
        while len(ticks) < 100000 and not stop.is_set():
            ticks.append(1)
            time.sleep(0)

    stop = threading.Event()
    th = threading.Thread(target=counter)
    th.start()
    running.wait()
    before = len(ticks)
    y = x
    for _ in range(20):
        y = (y @ x).tanh()
    during = len(ticks) - before
    stop.set()
    th.join()
    assert y.shape == (384, 384)
    assert during > 0
