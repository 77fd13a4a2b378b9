"""The real `swift rollout` server on one GPU (the part of server mode one GPU allows): `python -m entrypoint
rollout` starts it with the plan's flags (the planner's --max_num_seqs), waits on /health/, and it serves
the endpoints the trainer uses; SIGTERM stops its whole tree. The trainer's side (NCCL weight sync)
needs a second GPU: NCCL refuses two ranks on one device (tests/gpu/test_server.py)."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request

import psutil
import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.gpu


def _call(url: str, body: dict | None = None, timeout: float = 120) -> object:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback, never a proxy
    with opener.open(request, timeout=timeout) as response:
        return json.loads(response.read())


def test_rollout_serves_the_trainers_endpoints_and_stops_on_sigterm(gpu_model, gpu_env, tmp_path):
    argv = [
        sys.executable,
        "-m",
        "entrypoint",
        "rollout",
        "recipe=smoke-server",
        "ROLLOUT_GPUS=0",
        "TRAIN_GPUS=",
        f"MODEL={gpu_model}",
        "MODEL_SOURCE=hub",
        "MODEL_TYPE=qwen2_5",
        "TEMPLATE=qwen2_5",
        "OFFLINE=true",
        "EMULATE_VRAM_GB=24",
        f"OUTPUT_DIR={tmp_path}",
        "RUN_NAME=serve",
        "STOP_GRACE_SECONDS=30",
    ]
    proc = subprocess.Popen(
        argv, cwd=ROOT, env=gpu_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    lines: list[str] = []
    threading.Thread(target=lambda: lines.extend(iter(proc.stdout.readline, "")), daemon=True).start()
    deadline = time.monotonic() + 900
    while not any("rollout server healthy" in line for line in lines):
        assert proc.poll() is None and time.monotonic() < deadline, "".join(lines)[-4000:]
        time.sleep(2)
    out = "".join(lines)
    (tmp_path / "console.log").write_text(out)
    assert "--max_num_seqs" in out and "Traceback" not in out
    (port,) = re.findall(r"ROLLOUT_PORT=(\d+)", out)
    base = f"http://127.0.0.1:{port}"
    assert _call(f"{base}/health/") == {"status": "ok"}
    assert _call(f"{base}/get_world_size/") == {"world_size": 1}
    request = {"messages": [{"role": "user", "content": "Using 3, 5 and 7, make 22."}]}
    answers = _call(
        f"{base}/infer/",
        {
            "infer_requests": [request, request],
            "request_config": {"max_tokens": 16, "temperature": 1.0, "n": 1},
        },
    )
    assert isinstance(answers, list) and len(answers) == 2, answers
    for answer in answers:
        assert isinstance(answer["choices"][0]["message"]["content"], str)
        assert 0 < answer["usage"]["completion_tokens"] <= 16
    children = [c.pid for c in psutil.Process(proc.pid).children(recursive=True)]
    assert children
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=90) == 143
    alive = [
        p for p in children if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE
    ]
    assert alive == []
    log = (tmp_path / "serve" / "nodes" / "rollout" / "logs" / "rollout.log").read_text()
    # the access-log lines tests/gpu/test_server.py counts weight updates by
    assert '"POST /infer/ HTTP/1.1" 200' in log, log[-3000:]
