"""The node check's network waits (supervise/nodes.py) against loopback stand-ins for node 0 and for another
service on its port: an answer that is no node's is one problem, not a traceback, and a peer that trickles
its answer is given up at the stated bound (in process; the two-node run itself is
tests/supervise/test_multinode.py)."""

from __future__ import annotations

import http.server
import json
import socket
import threading
import time
import urllib.request
from contextlib import contextmanager

import pytest

from entrypoint.supervise import nodes
from tests.conftest import build_plan


@contextmanager
def server(handler: type[http.server.BaseHTTPRequestHandler]):
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    try:
        yield srv.server_address[1]
    finally:
        srv.shutdown()
        srv.server_close()


def rank(n: int, port: int):
    """The plan of node `n` of two whose node 0 answers the node check on loopback `port`
    (MASTER_PORT + 1)."""
    return build_plan(
        "recipe=smoke",
        "NNODES=2",
        f"NODE_RANK={n}",
        "MASTER_ADDR=127.0.0.1",
        f"MASTER_PORT={port - 1}",
        "RUN_NAME=n",
        inventory="1x4090-driver535",
    )


@pytest.mark.parametrize("body", [b"<html>a web server</html>", b"[1, 2]", json.dumps({"ok": True}).encode()])
def test_another_service_on_node_0_s_port_is_one_problem_naming_the_port(body):
    class Other(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's name)
            self.send_response(200)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    with server(Other) as port:
        started = time.monotonic()
        theirs, problems = nodes.report(rank(1, port), timeout=5, say=lambda line: None)
    assert theirs is None and time.monotonic() - started < 5
    (problem,) = problems
    assert f"what answers at http://127.0.0.1:{port}/ is not grpo-rig's node check" in problem.message
    assert "another service there takes the port" in problem.fix


def test_node_0_answers_a_report_that_is_no_node_s_with_400_and_goes_on_waiting():
    port = socket.create_server(("127.0.0.1", 0)).getsockname()[1]  # free now; node 0 binds it below
    plan = rank(0, port)
    result: list = []
    waiting = threading.Thread(
        target=lambda: result.append(nodes.serve(plan, timeout=2, say=lambda line: None))
    )
    waiting.start()
    time.sleep(0.5)
    answers = []
    for body in (b"not json", b"[]", b'{"node_rank": "x"}'):
        request = urllib.request.Request(f"http://127.0.0.1:{port}/", data=body)
        try:
            urllib.request.build_opener(urllib.request.ProxyHandler({})).open(request, timeout=5)
        except urllib.error.HTTPError as exc:
            answers.append(exc.code)
    waiting.join(10)
    assert answers == [400, 400, 400]
    _, problems = result[0]
    assert [p.message for p in problems] == ["node(s) 1 did not report within 2 s"]


def test_a_node_0_that_trickles_its_answer_is_given_up_at_the_check_s_bound():
    """urllib's timeout bounds each read: a byte every 0.2 s kept a node waiting past NODE_CHECK_TIMEOUT."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def trickle():
        conn, _ = listener.accept()
        with conn:
            conn.recv(65536)
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 4000\r\n\r\n")
            for _ in range(100):  # bounded: 20 s at most, or until the node goes away
                try:
                    conn.sendall(b" ")
                except OSError:
                    return
                time.sleep(0.2)

    thread = threading.Thread(target=trickle, daemon=True)
    thread.start()
    started = time.monotonic()
    theirs, problems = nodes.report(rank(1, port), timeout=2, say=lambda line: None)
    took = time.monotonic() - started
    listener.close()
    assert theirs is None and took < 4, took
    assert "node 0 did not answer on TCP" in problems[0].message
