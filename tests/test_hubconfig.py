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

CONFIG = {"model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"], "hidden_size": 2560,
          "intermediate_size": 9728, "num_hidden_layers": 36, "num_attention_heads": 32, "num_key_value_heads": 8,
          "head_dim": 128, "vocab_size": 151936, "tie_word_embeddings": True}  # fmt: skip


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
    words = ["recipe=countdown-1x4090", "MODEL=some-org/brand-new-4b", "MODEL_TYPE=qwen3", "USE_HF=true",
             "VLLM_GPU_MEMORY_UTILIZATION=0.5",
             f"INVENTORY={INVENTORIES / '1x4090-driver535.json'}", f"OUTPUT_DIR={tmp_path}", "RUN_NAME=r"]  # fmt: skip
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
