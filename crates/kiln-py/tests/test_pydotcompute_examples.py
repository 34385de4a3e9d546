"""Every usage example of pydotcompute's MetalBackend document (tests/doc_examples/metal_*.py: the
document's code, verbatim but for the imports `pydotcompute` -> `kiln.pydotcompute` and
`mlx.core` -> `kiln`) runs on the CPU (KILN_DEVICE=cpu) and on the GPU, and prints and computes
what the document says."""

import contextlib
import io
import re
from pathlib import Path

import numpy as np
import pytest

import kiln
from conftest import _gpu

EXAMPLES = Path(__file__).parent / "doc_examples"


@pytest.fixture(params=["cpu", "gpu"])
def where(request, monkeypatch):
    """Runs a test with MetalBackend on the CPU (KILN_DEVICE=cpu) or on GPU 0."""
    if request.param == "cpu":
        monkeypatch.setenv("KILN_DEVICE", "cpu")
        return kiln.Device("cpu")
    monkeypatch.delenv("KILN_DEVICE", raising=False)
    return _gpu()


def run_example(name, **context):
    """Executes an example file; returns its globals and what it printed. `context`: names the
    document's snippet uses without importing them (`np`, `MetalBackend`), as its text assumes."""
    path = EXAMPLES / f"metal_{name}.py"
    ns = {"__name__": "__main__", **context}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(path.read_text(), str(path), "exec"), ns)
    return ns, out.getvalue()


def test_examples_are_the_documents_code():
    # Each file: a two-line header, then code whose only pydotcompute/mlx imports are the substituted ones.
    files = sorted(EXAMPLES.glob("metal_*.py"))
    assert len(files) == 7
    for f in files:
        code = f.read_text().split("\n", 2)[2]
        assert "mlx" not in code, f
        if "mx." in code:
            assert "import kiln as mx" in code, f
        assert re.findall(r"(?<!kiln\.)pydotcompute", code) == [], f


def test_overview(where):
    from kiln.pydotcompute.backends.metal import MetalBackend

    ns, out = run_example("overview", np=np)
    assert out == ""
    data = ns["data"]
    assert isinstance(data, kiln.Tensor) and data.device == where and data.dtype == kiln.float32
    np.testing.assert_array_equal(np.asarray(data), [1, 2, 3])
    assert isinstance(MetalBackend().is_available, bool)


def test_basic_gpu_computation(where):
    ns, out = run_example("basic_gpu_computation")
    assert out == "[5. 7. 9.]\n"
    assert ns["result"].dtype == np.float32 and ns["c"].device == where


def test_prebuilt_kernels(where):
    ns, out = run_example("prebuilt_kernels")
    assert out == ""
    np.testing.assert_array_equal(np.asarray(ns["result"]), [5, 7, 9])
    A, B = np.asarray(ns["A"]).astype(np.float64), np.asarray(ns["B"]).astype(np.float64)
    np.testing.assert_allclose(np.asarray(ns["C"]), A @ B, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(np.asarray(ns["roots"]), [1, 2, 3], rtol=1e-6)
    assert ns["C"].device == where and ns["roots"].device == where


def test_compiling_custom_kernels(where):
    ns, out = run_example("compiling_custom_kernels")
    x = ns["input_data"].astype(np.float64)
    assert isinstance(ns["result"], np.ndarray) and ns["result"].dtype == np.float32
    np.testing.assert_allclose(ns["result"], np.exp(-np.square(x)), rtol=1e-5, atol=1e-7)
    assert ns["output"].device == where


def test_kernel_timing(where):
    ns, out = run_example("kernel_timing")
    assert re.fullmatch(r"Execution time: [0-9]+\.[0-9]{3}ms\n", out), out
    r = ns["result"]
    assert r.success and r.error is None and r.execution_time_ms > 0
    a, b = np.asarray(ns["a"]).astype(np.float64), np.asarray(ns["b"]).astype(np.float64)
    np.testing.assert_allclose(np.asarray(r.output), np.sqrt(a * a + b * b), rtol=1e-5, atol=1e-6)


def test_memory_management(where):
    from kiln.pydotcompute.backends.metal import MetalBackend

    ns, out = run_example("memory_management", np=np, MetalBackend=MetalBackend)
    lines = out.splitlines()
    assert lines[0] == "Buffers: 0"
    assert re.fullmatch(r"Cache: [0-9]+\.[0-9] KB", lines[1]) and re.fullmatch(r"Peak: [0-9]+\.[0-9] KB", lines[2])
    assert lines[3] == "Buffers after allocation: 10" and len(lines) == 4
    info = ns["backend"].get_memory_info()
    assert info["buffer_count"] == 0 and info["allocated"] == 0


def test_unified_buffer(where):
    ns, out = run_example("unified_buffer")
    host = ns["buffer"].host
    m = re.fullmatch(r"Sum: (.*)\n", out)
    assert m, out
    assert abs(float(m.group(1)) - host.astype(np.float64).sum()) < 1e-3
    assert ns["metal_array"].device == where
