"""Two nodes on one machine: network namespaces joined by a veth pair stand in for two hosts.

A real two-node CPU GRPO run of the smoke recipe (NNODES=2, one process per node, gloo) completes and
only node 0 exports the adapter; a wrong NCCL_SOCKET_IFNAME or an unreachable MASTER_ADDR is refused
before heavy work. The namespaces are created and removed here; traffic stays inside them.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

import pytest

from tests.conftest import ROOT, clean_env

pytestmark = pytest.mark.netns

if os.geteuid() != 0 or not shutil.which("ip"):
    pytest.skip("needs root and iproute2 (ip netns)", allow_module_level=True)

TAG = f"{os.getpid() % 100000}"
NS = (f"grn{TAG}a", f"grn{TAG}b")
IFACE = (f"gv{TAG}a", f"gv{TAG}b")
ADDR = ("10.231.7.1", "10.231.7.2")


def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


@pytest.fixture(scope="module")
def hosts():
    for ns in NS:
        ip("netns", "add", ns)
    try:
        ip("link", "add", IFACE[0], "type", "veth", "peer", "name", IFACE[1])
        for ns, iface, addr in zip(NS, IFACE, ADDR, strict=True):
            ip("link", "set", iface, "netns", ns)
            ip("-n", ns, "addr", "add", f"{addr}/24", "dev", iface)
            ip("-n", ns, "link", "set", iface, "up")
            ip("-n", ns, "link", "set", "lo", "up")
        yield
    finally:
        for ns in NS:
            subprocess.run(["ip", "netns", "delete", ns], capture_output=True)


def node(rank: int, out, *pairs: str) -> subprocess.Popen:
    argv = [
        "ip",
        "netns",
        "exec",
        NS[rank],
        sys.executable,
        "-m",
        "entrypoint",
        "train",
        "recipe=smoke",
        "RUN_NAME=mn",
        "NNODES=2",
        f"NODE_RANK={rank}",
        f"MASTER_ADDR={ADDR[0]}",
        "MASTER_PORT=29650",
        f"NCCL_SOCKET_IFNAME={IFACE[rank]}",
        f"OUTPUT_DIR={out}",
        "MAX_STEPS=1",
        "SAVE_STEPS=1",
        "PER_DEVICE_TRAIN_BATCH_SIZE=4",
        "MAX_COMPLETION_LENGTH=16",
        "NODE_CHECK_TIMEOUT=120",
        *pairs,
    ]
    # two trainings share CI's 2 cores: one thread each, or torch's spinning threads oversubscribe them
    env = clean_env(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    return subprocess.Popen(
        argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )  # noqa: S603


@pytest.mark.slow
def test_two_node_cpu_run_completes_and_only_node_0_exports(hosts, tmp_path):
    procs = [node(0, tmp_path / "node0"), node(1, tmp_path / "node1")]
    outputs = [p.communicate(timeout=1500)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs[0][-3000:] + "\n----\n" + outputs[1][-3000:]
    assert "node check passed: 2 nodes" in outputs[0] and "node check passed" in outputs[1]
    run0, run1 = tmp_path / "node0" / "mn", tmp_path / "node1" / "mn"
    manifest = json.loads((run0 / "manifest.json").read_text())
    assert manifest["status"] == "completed" and manifest["steps"]["completed"] == 1
    assert [n["node_rank"] for n in manifest["nodes"]] == [0, 1]
    assert (run0 / "adapter" / "adapter_model.safetensors").exists()
    trainer = next(p for p in manifest["processes"] if p["role"] == "trainer")
    assert trainer["env"]["NNODES"] == "2" and trainer["env"]["GLOO_SOCKET_IFNAME"] == IFACE[0]
    # node 1: its own record and logs, no export
    assert not (run1 / "adapter").exists() and not (run1 / "manifest.json").exists()
    assert json.loads((run1 / "nodes" / "node1" / "manifest.json").read_text())["status"] == "completed"
    assert (run1 / "nodes" / "node1" / "logs" / "trainer.log").exists()


def test_wrong_socket_interface_is_refused(hosts, tmp_path):
    proc = node(1, tmp_path, "NCCL_SOCKET_IFNAME=eth7")
    out = proc.communicate(timeout=60)[0]
    assert proc.returncode == 2, out
    assert "eth7 matches no network interface on this node" in out and IFACE[1] in out


def test_unreachable_master_is_refused_within_the_timeout(hosts, tmp_path):
    start = time.monotonic()
    proc = node(1, tmp_path, "MASTER_ADDR=10.231.7.99", "NODE_CHECK_TIMEOUT=4")
    out = proc.communicate(timeout=60)[0]
    assert proc.returncode == 2, out
    assert "node 0 did not answer on TCP 29651 within 4 s" in out
    assert time.monotonic() - start < 30
    assert not (tmp_path / "mn" / "train").exists()  # nothing heavy started


def test_node_with_a_different_recipe_is_refused(hosts, tmp_path):
    procs = [
        node(0, tmp_path / "a", "NODE_CHECK_TIMEOUT=20"),
        node(1, tmp_path / "b", "LORA_RANK=16", "NODE_CHECK_TIMEOUT=20"),
    ]
    outputs = [p.communicate(timeout=120)[0] for p in procs]
    assert [p.returncode for p in procs] == [2, 2], outputs
    assert "LORA_RANK='16' != node 0's '8'" in outputs[1]
    assert "LORA_RANK" in outputs[0]
