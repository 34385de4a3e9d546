"""Starting `kiln serve` on the fixture model for the tests: a free localhost port (the server picks
it: --port 0, and prints it), stderr collected by a thread, SIGTERM and a bounded wait at the end."""

import os
import queue
import re
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
FIXTURE = ROOT / "crates/kiln-llm/tests/fixtures/llama"
TARGET = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
KILN = Path(os.environ.get("KILN_BIN", TARGET / "debug" / "kiln"))
DEVICES = [d for d in os.environ.get("KILN_TEST_DEVICES", "cpu").split(",") if d]
START_TIMEOUT = 180  # seconds to load the model and bind (lavapipe compiles kernels slowly)


class Server:
    def __init__(self, device, *extra):
        self.device = device
        cmd = [str(KILN), "serve", "--model", str(FIXTURE), "--device", device, "--port", "0",
               "--max-context", "256", *extra]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.lines = queue.Queue()
        self.log = []
        threading.Thread(target=self._read, daemon=True).start()
        deadline = time.time() + START_TIMEOUT
        self.url = None
        while self.url is None:
            left = deadline - time.time()
            if left <= 0 or self.proc.poll() is not None:
                self.proc.kill()
                raise RuntimeError(f"kiln serve did not start: {''.join(self.log)}")
            try:
                line = self.lines.get(timeout=min(left, 1.0))
            except queue.Empty:
                continue
            m = re.search(r"listening on (http://127\.0\.0\.1:\d+)", line)
            if m:
                self.url = m.group(1)

    def _read(self):
        for line in self.proc.stderr:
            self.log.append(line)
            self.lines.put(line)

    @property
    def v1(self):
        return self.url + "/v1"

    def stop(self, timeout=30):
        """SIGTERM, then the exit status (killed after `timeout` seconds)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
            raise


def generate(device, prompt, max_tokens, *extra):
    """`kiln generate`'s answer text (stdout is the prompt, the answer, a newline), sampled as the
    server samples a request: the fields the request names (in `extra`), else greedy with no top-k
    and no repeat penalty (`kiln generate`'s own defaults are chat sampling, docs/LLM.md)."""
    neutral = {"--temperature": "0", "--top-k": "0", "--repeat-penalty": "1"}
    greedy = [x for flag, v in neutral.items() if flag not in extra for x in (flag, v)]
    out = subprocess.run(
        [str(KILN), "generate", "--model", str(FIXTURE), "--device", device, "--max-context", "256",
         "--prompt", prompt, "--max-tokens", str(max_tokens), *greedy, *extra],
        capture_output=True, text=True, timeout=300, check=True,
    ).stdout
    assert out.startswith(prompt) and out.endswith("\n"), out
    return out[len(prompt):-1]


@pytest.fixture(scope="module", params=DEVICES)
def server(request):
    s = Server(request.param, "--max-batch", "64", "--max-queue", "128")
    yield s
    assert s.stop() == 0, "".join(s.log)
