"""`kiln serve` with the official `openai` client on the fixture model (localhost only, every loop
bounded in count and time): answers equal `kiln generate`, streaming equals non-streaming, many
concurrent streams each equal their single-client answer, disconnects free their sequence, a full
queue gives 429, bad input 400, a missing key 401, SIGTERM exits 0 and refuses what is still
queued with 503."""

import concurrent.futures as cf
import re
import signal
import time

import httpx
import openai
import pytest

from conftest import DEVICES, Server, generate

PROMPTS = ["The kiln fires the clay pots", "Once upon a time", "A B C D E F", "hello", "pots and kilns and clay"]
TIMEOUT = 120.0  # seconds, per request


def client(server, key="none", **kw):
    return openai.OpenAI(base_url=server.v1, api_key=key, timeout=TIMEOUT, max_retries=0, **kw)


def complete(server, prompt, max_tokens, stream=False, **kw):
    """(text, finish_reason, usage) of one /v1/completions request."""
    c = client(server)
    if not stream:
        r = c.completions.create(model="fixture", prompt=prompt, max_tokens=max_tokens, temperature=0, **kw)
        return r.choices[0].text, r.choices[0].finish_reason, r.usage
    text, finish, usage = "", None, None
    for chunk in c.completions.create(model="fixture", prompt=prompt, max_tokens=max_tokens, temperature=0,
                                      stream=True, stream_options={"include_usage": True}, **kw):
        if chunk.usage is not None:
            usage = chunk.usage
        for ch in chunk.choices:
            text += ch.text
            finish = ch.finish_reason or finish
    return text, finish, usage


def chat(server, content, max_tokens, stream=False, **kw):
    c = client(server)
    msgs = [{"role": "system", "content": "You are a kiln."}, {"role": "user", "content": content}]
    if not stream:
        r = c.chat.completions.create(model="fixture", messages=msgs, max_tokens=max_tokens, temperature=0, **kw)
        assert r.choices[0].message.role == "assistant"
        return r.choices[0].message.content, r.choices[0].finish_reason, r.usage
    text, finish, usage, roles = "", None, None, []
    for chunk in c.chat.completions.create(model="fixture", messages=msgs, max_tokens=max_tokens, temperature=0,
                                           stream=True, stream_options={"include_usage": True}, **kw):
        if chunk.usage is not None:
            usage = chunk.usage
        for ch in chunk.choices:
            if ch.delta.role:
                roles.append(ch.delta.role)
            text += ch.delta.content or ""
            finish = ch.finish_reason or finish
    assert roles == ["assistant"]
    return text, finish, usage


def metric(server, name):
    body = httpx.get(server.url + "/metrics", timeout=10).text
    m = re.search(rf"^{name} (\S+)$", body, re.M)
    assert m, f"{name} missing from /metrics:\n{body}"
    return float(m.group(1))


def wait_for(pred, secs=20.0):
    end = time.time() + secs
    while time.time() < end:
        if pred():
            return True
        time.sleep(0.05)
    return pred()


def test_models_health_metrics(server):
    assert httpx.get(server.url + "/health", timeout=10).json() == {"status": "ok"}
    models = client(server).models.list()
    assert [m.id for m in models.data] == ["llama"]
    body = httpx.get(server.url + "/metrics", timeout=10).text
    for name in ["kiln_requests_total", "kiln_prompt_tokens_total", "kiln_completion_tokens_total",
                 "kiln_queue_depth", "kiln_batch_size", "kiln_time_to_first_token_seconds_sum",
                 "kiln_tokens_per_second", "kiln_kv_blocks_total"]:
        assert name in body, name


@pytest.mark.parametrize("prompt", PROMPTS[:3])
def test_completion_equals_kiln_generate(server, prompt):
    want = generate(server.device, prompt, 12)
    text, finish, usage = complete(server, prompt, 12)
    assert text == want
    assert usage.completion_tokens <= 12 and usage.prompt_tokens > 0
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    assert finish == ("length" if usage.completion_tokens == 12 else "stop")
    s_text, s_finish, s_usage = complete(server, prompt, 12, stream=True)
    assert (s_text, s_finish) == (text, finish)
    assert s_usage.completion_tokens == usage.completion_tokens


def test_seeded_sampling_equals_kiln_generate(server):
    prompt = PROMPTS[1]
    want = generate(server.device, prompt, 10, "--temperature", "0.9", "--top-p", "0.95", "--seed", "7")
    c = client(server)
    got = [c.completions.create(model="m", prompt=prompt, max_tokens=10, temperature=0.9, top_p=0.95,
                                seed=7).choices[0].text for _ in range(2)]
    assert got == [want, want]


def test_chat_stream_equals_non_stream(server):
    text, finish, usage = chat(server, "Say something about clay.", 10)
    assert text and finish in ("length", "stop") and usage.completion_tokens <= 10
    assert chat(server, "Say something about clay.", 10, stream=True)[:2] == (text, finish)


def test_stop_string_cuts_the_answer(server):
    full, _, _ = complete(server, PROMPTS[0], 12)
    assert len(full) >= 4
    stop = full[len(full) // 2: len(full) // 2 + 2]
    want = full[: full.index(stop)]
    for stream in (False, True):
        text, finish, _ = complete(server, PROMPTS[0], 12, stream=stream, stop=[stop])
        assert (text, finish) == (want, "stop"), stream


def test_concurrent_streams_equal_single_client_answers(server):
    n = 32 if server.device == "cpu" else 16
    jobs = [(PROMPTS[i % len(PROMPTS)], 6 + (i % 7), i % 2 == 0) for i in range(n)]
    alone = {}
    for p, m, is_chat in set(jobs):
        alone[(p, m, is_chat)] = (chat if is_chat else complete)(server, p, m)[:2]

    def run(job):
        p, m, is_chat = job
        return (chat if is_chat else complete)(server, p, m, stream=True)[:2]

    steps_before = metric(server, "kiln_steps_total")
    with cf.ThreadPoolExecutor(max_workers=n) as pool:
        results = list(pool.map(run, jobs, timeout=300))
    for job, got in zip(jobs, results):
        assert got == alone[job], job
    # They ran batched (fewer steps than tokens), and everything was given back.
    tokens = sum(m for _, m, _ in jobs)
    assert metric(server, "kiln_steps_total") - steps_before < tokens
    assert wait_for(lambda: metric(server, "kiln_kv_blocks_used") == 0)
    assert metric(server, "kiln_batch_size") == 0 and metric(server, "kiln_queue_depth") == 0


def test_disconnect_mid_stream_frees_the_sequence(server):
    # Nothing else runs on this server now (the tests of a module run one at a time), so the
    # counters move by this request alone.
    assert wait_for(lambda: metric(server, "kiln_batch_size") == 0)
    cancelled = metric(server, "kiln_cancelled_total")
    tokens = metric(server, "kiln_completion_tokens_total")
    body = {"model": "m", "prompt": PROMPTS[0], "max_tokens": 240, "temperature": 0, "stream": True}
    with httpx.Client(timeout=TIMEOUT) as h:
        with h.stream("POST", server.v1 + "/completions", json=body) as r:
            assert r.status_code == 200
            lines = 0
            for line in r.iter_lines():
                lines += line.startswith("data:")
                if lines >= 3:
                    break
    assert wait_for(lambda: metric(server, "kiln_kv_blocks_used") == 0)
    # Freed by the cancellation, not by running to the end: the counter rose by exactly one and the
    # sequence stopped short of its 240 tokens (a server that ignored the disconnect would generate
    # them all, then free the blocks just the same).
    assert metric(server, "kiln_cancelled_total") - cancelled == 1
    generated = metric(server, "kiln_completion_tokens_total") - tokens
    assert 1 <= generated < 240, generated
    # The server goes on serving.
    assert complete(server, PROMPTS[1], 3)[0] == generate(server.device, PROMPTS[1], 3)


@pytest.mark.parametrize("body,param", [
    ('{"model": "m", "prompt": "x", "max_tokens": 0}', "max_tokens"),
    ('{"model": "m", "prompt": "x", "max_tokens": -3}', "max_tokens"),
    ('{"model": "m", "prompt": "x", "n": 2}', "n"),
    ('{"model": "m", "prompt": "x", "temperature": "hot"}', None),
    ('{"model": "m", "prompt": "x", "top_p": 1.5}', "top_p"),
    ('{"model": "m", "prompt": "x", "logprobs": 3}', "logprobs"),
    ('{"model": "m", "prompt": "x", "stop": ["a", "b", "c", "d", "e"]}', "stop"),
    ('{"model": "m"}', None),
    ('{"model": "m", "prompt": ', None),
    ('[1, 2]', None),
])
def test_bad_completion_requests_get_400(server, body, param):
    r = httpx.post(server.v1 + "/completions", content=body, headers={"content-type": "application/json"},
                   timeout=10)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["type"] == "invalid_request_error" and err["message"]
    assert err["param"] == param


def test_bad_requests_through_the_client(server):
    c = client(server)
    with pytest.raises(openai.BadRequestError):
        c.chat.completions.create(model="m", messages=[], max_tokens=3)
    with pytest.raises(openai.BadRequestError) as e:
        c.completions.create(model="m", prompt="clay " * 400, max_tokens=3)
    assert "context" in str(e.value)
    with pytest.raises(openai.BadRequestError):
        c.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}], n=3)
    r = httpx.get(server.url + "/v1/nothing", timeout=10)
    assert r.status_code == 404 and r.json()["error"]["message"]
    # Still serving.
    assert complete(server, PROMPTS[3], 2)[0] == generate(server.device, PROMPTS[3], 2)


@pytest.mark.parametrize("device", DEVICES)
def test_queue_overflow_gives_429(device):
    s = Server(device, "--max-batch", "1", "--max-queue", "1")
    try:
        def run(i):
            try:
                c = openai.OpenAI(base_url=s.v1, api_key="x", timeout=TIMEOUT, max_retries=0)
                r = c.completions.create(model="m", prompt=PROMPTS[i % 5], max_tokens=200, temperature=0)
                return r.choices[0].finish_reason
            except openai.RateLimitError:
                return 429
            except openai.InternalServerError as e:
                return e.status_code

        with cf.ThreadPoolExecutor(max_workers=16) as pool:
            results = list(pool.map(run, range(16), timeout=300))
        assert 429 in results, results
        assert all(r in (429, 503, "length", "stop") for r in results), results
        assert any(r in ("length", "stop") for r in results), results
        assert "kiln_requests_total{endpoint=\"/v1/completions\",status=\"429\"}" in \
            httpx.get(s.url + "/metrics", timeout=10).text
    finally:
        assert s.stop() == 0, "".join(s.log)


@pytest.mark.parametrize("device", DEVICES[:1])
def test_api_key(device):
    s = Server(device, "--api-key", "sekrit")
    try:
        for key in ["wrong", "sekri", "sekrit2"]:
            with pytest.raises(openai.AuthenticationError):
                openai.OpenAI(base_url=s.v1, api_key=key, max_retries=0, timeout=TIMEOUT).models.list()
        r = httpx.post(s.v1 + "/completions", json={"prompt": "x", "max_tokens": 2}, timeout=10)
        assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
        ok = openai.OpenAI(base_url=s.v1, api_key="sekrit", max_retries=0, timeout=TIMEOUT)
        assert ok.completions.create(model="m", prompt="x", max_tokens=2, temperature=0).choices[0].text is not None
        assert httpx.get(s.url + "/health", timeout=10).status_code == 200
    finally:
        assert s.stop() == 0, "".join(s.log)


@pytest.mark.parametrize("device", DEVICES[:1])
def test_sigterm_finishes_streams_and_exits_0(device):
    s = Server(device)
    c = openai.OpenAI(base_url=s.v1, api_key="x", max_retries=0, timeout=TIMEOUT)
    stream = c.completions.create(model="m", prompt=PROMPTS[0], max_tokens=200, temperature=0, stream=True)
    first = next(iter(stream))
    assert first is not None
    code = s.stop()
    assert code == 0, "".join(s.log)
    # The stream ended (finished, or cut at the grace period) rather than hanging.
    rest = list(stream)
    assert len(rest) <= 200
    with pytest.raises(httpx.ConnectError):
        httpx.get(s.url + "/health", timeout=5)


@pytest.mark.parametrize("device", DEVICES[:1])
def test_sigterm_refuses_queued_requests_with_503(device):
    """Requests still queued when SIGTERM comes get 503 with the JSON error body (the README's
    promise; it was a 500), while the running answer goes on: one sequence a batch and 16 requests at
    once, so most wait in the queue (the fixture answers in tens of milliseconds, so the test waits
    until /metrics shows a queue, then signals)."""
    s = Server(device, "--max-batch", "1", "--max-queue", "32", "--shutdown-grace", "30")
    try:
        def post(i):
            return httpx.post(s.v1 + "/completions", timeout=TIMEOUT,
                              json={"model": "m", "prompt": PROMPTS[i % 5], "max_tokens": 200, "temperature": 0})

        with cf.ThreadPoolExecutor(max_workers=16) as pool:
            futures = [pool.submit(post, i) for i in range(16)]
            # Signal once every request is in the server: queued, running (one) or answered. One that
            # is still unread on its connection when the server stops would be closed unanswered, as
            # graceful shutdown closes a connection with no request in progress.
            deadline = time.time() + 30
            while True:
                metrics = httpx.get(s.url + "/metrics", timeout=10).text
                queued = int(re.search(r"^kiln_queue_depth (\d+)", metrics, re.M).group(1))
                done = sum(f.done() for f in futures)
                if queued and queued + 1 + done >= len(futures):
                    break
                assert time.time() < deadline and done < len(futures), "the requests never queued together"
                time.sleep(0.002)
            s.proc.send_signal(signal.SIGTERM)
            results = [f.result(timeout=60) for f in futures]
        codes = sorted(r.status_code for r in results)
        assert set(codes) <= {200, 503} and 503 in codes, codes
        for r in results:
            if r.status_code == 503:
                assert r.json()["error"]["message"], r.text
            else:
                assert r.json()["choices"][0]["finish_reason"] in ("stop", "length"), r.text
    finally:
        assert s.stop() == 0, "".join(s.log)
