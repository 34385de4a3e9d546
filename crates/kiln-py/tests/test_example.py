"""The README's example script runs on both devices."""

import os
import subprocess
import sys

import pytest

EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "examples", "quickstart.py")


@pytest.mark.parametrize("where", ["cpu", "gpu"])
def test_quickstart(where, request):
    if where == "gpu":
        request.getfixturevalue("gpu")  # skips (or fails under KILN_REQUIRE_GPU=1) without an adapter
    r = subprocess.run([sys.executable, EXAMPLE, where], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.rstrip().endswith("ok")
