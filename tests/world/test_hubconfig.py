"""A hub model the planner knows nowhere here has its config.json read over the network before planning
(world/hubconfig.py), against a loopback server standing in for the Hugging Face Hub."""

from __future__ import annotations

import http.server
import json
import threading
import time
from contextlib import contextmanager

from entrypoint.commands import edge
from entrypoint.errors import BadInput
from entrypoint.world import hubconfig
from tests.conftest import INVENTORIES

CONFIG = {
    "model_type": "qwen3",
    "architectures": ["Qwen3ForCausalLM"],
    "hidden_size": 2560,
    "intermediate_size": 9728,
    "num_hidden_layers": 36,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "vocab_size": 151936,
    "tie_word_embeddings": True,
}


@contextmanager
def hub(status: int = 200, body: bytes = json.dumps(CONFIG).encode()):
    """A loopback HTTP server answering every GET with `status` and `body`; yields (endpoint, paths asked)."""
    asked: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's name)
            asked.append(self.path)
            self.send_response(status)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", asked
    finally:
        server.shutdown()
        server.server_close()


def plan_for(tmp_path, environ):
    """The plan, or the refusal (BadInput) of a plan that could not be made."""
    words = [
        "recipe=countdown-1x4090",
        "MODEL=some-org/brand-new-4b",
        "MODEL_TYPE=qwen3",
        "USE_HF=true",
        "VLLM_GPU_MEMORY_UTILIZATION=0.5",
        f"INVENTORY={INVENTORIES / '1x4090-driver535.json'}",
        f"OUTPUT_DIR={tmp_path}",
        "RUN_NAME=r",
    ]
    try:
        return edge.make_plan(words, environ, for_train=False)
    except BadInput as exc:
        return exc


def test_an_unknown_hub_model_is_sized_from_its_config_json_read_before_planning(tmp_path):
    with hub() as (endpoint, asked):
        plan = plan_for(tmp_path, {"HF_ENDPOINT": endpoint, "HF_HOME": str(tmp_path / "hf")})
    assert asked == ["/some-org/brand-new-4b/resolve/main/config.json"]
    assert plan.memory and plan.memory[0].peak_gib > 0
    assert any(endpoint in note for note in plan.memory_note), plan.memory_note


def test_a_hub_that_does_not_answer_a_config_leaves_the_model_unestimated_and_says_why(tmp_path):
    with hub(status=404, body=b"not found") as (endpoint, _):
        start = time.monotonic()
        plan = plan_for(tmp_path, {"HF_ENDPOINT": endpoint, "HF_HOME": str(tmp_path / "hf")})
    assert time.monotonic() - start < hubconfig.TIMEOUT + 5
    assert not plan.memory
    assert "answered 404" in plan.budget.note and endpoint in plan.budget.note, plan.budget.note


def test_offline_or_switched_off_nothing_is_asked(tmp_path):
    with hub() as (endpoint, asked):
        plan_for(tmp_path, {"HF_ENDPOINT": endpoint, "HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "1"})
        plan_for(
            tmp_path, {"HF_ENDPOINT": endpoint, "HF_HOME": str(tmp_path / "hf"), hubconfig.SWITCH: "off"}
        )
    assert asked == []


def test_modelscope_is_asked_at_its_file_endpoint():
    assert hubconfig.url("Qwen/Qwen3-4B", False, {}) == (
        "https://www.modelscope.cn/api/v1/models/Qwen/Qwen3-4B/repo?Revision=master&FilePath=config.json"
    )
    assert (
        hubconfig.url("Qwen/Qwen3-4B", True, {})
        == "https://huggingface.co/Qwen/Qwen3-4B/resolve/main/config.json"
    )


def test_an_answer_that_is_not_json_or_not_of_a_config_s_types_leaves_the_model_unestimated(tmp_path):
    """A proxy's login page, or a config.json with a number written as text: one note, no traceback."""
    with hub(body=b"<html><body>Sign in to continue</body></html>") as (endpoint, _):
        page = plan_for(tmp_path, {"HF_ENDPOINT": endpoint, "HF_HOME": str(tmp_path / "hf")})
    read = f"{endpoint}/some-org/brand-new-4b/resolve/main/config.json"
    assert not page.memory and f"{read} is not a model's config.json" in page.budget.note, page.budget.note
    with hub(body=json.dumps({**CONFIG, "head_dim": "128"}).encode()) as (endpoint, _):
        typed = plan_for(tmp_path, {"HF_ENDPOINT": endpoint, "HF_HOME": str(tmp_path / "hf")})
    assert not typed.memory and 'has head_dim = "128"' in typed.budget.note, typed.budget.note


@contextmanager
def trickling(head: bytes, body: bytes, every: float = 0.2):
    """A loopback server that sends `head` then `body` one byte every `every` s (a bounded loop: it stops at
    the end of `body` or when the client goes away); `head` may itself be cut to trickle the status line."""
    import socket

    listener = socket.create_server(("127.0.0.1", 0))
    done = threading.Event()

    def serve():
        conn, _ = listener.accept()
        with conn:
            conn.recv(65536)  # the request
            for i, byte in enumerate(head + body):
                if done.is_set():
                    return
                try:
                    conn.sendall(bytes([byte]))
                except OSError:
                    return
                if i >= len(head) - 1:
                    time.sleep(every)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        done.set()
        listener.close()
        thread.join(10)


def test_a_hub_that_trickles_its_answer_is_given_up_at_the_stated_bound(monkeypatch):
    """urllib's timeout bounds each read: a byte every 0.2 s kept the read going for as long as the server
    liked (and then IncompleteRead, a traceback). The bound is one deadline for the whole request."""
    monkeypatch.setattr(hubconfig, "TIMEOUT", 1.0)
    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 4000\r\n\r\n"
    with trickling(head, b" " * 100) as endpoint:
        start = time.monotonic()
        config, why = hubconfig.fetch("some-org/brand-new-4b", True, {"HF_ENDPOINT": endpoint})
        took = time.monotonic() - start
    assert config is None and took < 2.0, (took, why)
    assert why.endswith(("did not answer within 1 s", "was still sending after 1 s")), why


def test_a_hub_that_trickles_its_status_line_is_given_up_at_the_stated_bound(monkeypatch):
    monkeypatch.setattr(hubconfig, "TIMEOUT", 1.0)
    with trickling(b"H", b"TTP/1.1 200 OK\r\n" * 10) as endpoint:
        start = time.monotonic()
        config, why = hubconfig.fetch("some-org/brand-new-4b", True, {"HF_ENDPOINT": endpoint})
        took = time.monotonic() - start
    assert config is None and took < 2.0 and "did not answer within 1 s" in why, (took, why)


def test_a_hub_that_answers_no_http_is_one_note(monkeypatch):
    with trickling(b"nonsense\r\n\r\n", b"", every=0) as endpoint:
        config, why = hubconfig.fetch("some-org/brand-new-4b", True, {"HF_ENDPOINT": endpoint})
    assert config is None and why.startswith(
        f"{endpoint}/some-org/brand-new-4b/resolve/main/config.json could not"
    ), why
