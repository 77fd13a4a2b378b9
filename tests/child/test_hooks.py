"""The child hooks' declarations against the installed stack (entrypoint/child/hooks/, drift.py): every
upstream definition a hook patches is still the source it was written against, so a lock bump names every
hook to re-check; and the loader turns a hook that cannot install into one notice, never a silent loss.
Read from source: nothing here imports torch, vLLM or ms-swift."""

from __future__ import annotations

import importlib.metadata
import json
import shutil
import subprocess
import sys

import pytest

from entrypoint.child import drift, hooks, loader, runtime
from entrypoint.child.hooks import Hook, Target, top_k_first
from tests.conftest import ROOT, clean_env

SITE = ROOT / "entrypoint" / "child" / "site"


@pytest.mark.parametrize("hook", hooks.ALL, ids=hooks.NAMES)
def test_every_target_is_the_upstream_source_its_hook_was_written_against(hook):
    changed = drift.drifted(hook)
    assert not changed, "\n".join(d.message() for d in changed)


def test_a_changed_statement_in_a_target_function_is_drift(tmp_path):
    """A scratch copy of vLLM's sampler file, one statement of apply_top_k_top_p changed: the check names that
    target and its hook; the untouched function beside it in the same file is no drift."""
    target = top_k_first.HOOK.targets[0]
    assert (target.module, target.qualname) == (top_k_first.SAMPLER, "apply_top_k_top_p")
    installed = drift.source_file(target.module)
    copy = tmp_path.joinpath(*target.module.split(".")).with_suffix(".py")
    copy.parent.mkdir(parents=True)
    shutil.copy(installed, copy)
    assert drift.digest(target.module, target.qualname, root=tmp_path) == target.sha256  # a faithful copy
    text = copy.read_text()
    body = text.index("def apply_top_k_top_p(")
    statement = text.index("top_p_mask[:, -1] = False", body)
    copy.write_text(text[:statement] + "top_p_mask[:, 0] = False" + text[statement + 25 :])
    found = {(d.target.qualname, d.found) for d in drift.drifted(top_k_first.HOOK, root=tmp_path)}
    edited = drift.digest(target.module, target.qualname, root=tmp_path)
    assert (target.qualname, edited) in found and edited != target.sha256
    assert not any(q.startswith("TopKTopPSampler.") for q, _ in found)  # same file, unchanged
    message = drift.Drift(top_k_first.HOOK, target, edited).message()
    assert "hook top_k_first" in message and "vllm==0.8.5.post1" in message and "Re-check" in message
    assert top_k_first.HOOK.delete_when in message


@pytest.mark.cli
def test_the_check_reads_sources_without_importing_them():
    code = (
        "import sys; from entrypoint.child import drift, hooks\n"
        "assert all(len(drift.digest(t.module, t.qualname)) == 16 for h in hooks.ALL for t in h.targets)\n"
        "print(sorted(m for m in ('torch', 'vllm', 'swift', 'transformers') if m in sys.modules))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=clean_env()
    )
    assert proc.returncode == 0 and proc.stdout.strip() == "[]", proc.stderr


# the package each target's top-level module comes from
DISTRIBUTIONS = {
    "torch": "torch",
    "vllm": "vllm",
    "swift": "ms-swift",
    "liger_kernel": "liger-kernel",
    "bitsandbytes": "bitsandbytes",
}


@pytest.mark.parametrize("hook", hooks.ALL, ids=hooks.NAMES)
def test_every_hook_says_why_what_it_saves_when_to_delete_it_and_pins_the_installed_stack(hook):
    assert hook.why.strip() and hook.saves.strip() and hook.delete_when.strip(), hook.name
    assert hook.variable.startswith("GRPO_RIG_") and hook.targets
    pins = dict(pin.split("==") for pin in hook.upstream)
    for dist, version in pins.items():
        assert importlib.metadata.version(dist) == version, f"hook {hook.name}: {dist} is not {version}"
    needed = {DISTRIBUTIONS[t.module.split(".")[0]] for t in hook.targets}
    assert needed <= set(pins), f"hook {hook.name}: its targets come from {needed}, it pins {set(pins)}"


def test_the_registry_keeps_the_variables_the_plans_set():
    assert hooks.NAMES == (
        "emulate_vram",
        "keep_pools",
        "graphs_up_to_max_seqs",
        "inspect_here",
        "top_k_first",
        "scheduler_steps",
        "adapter_sync",
        "offload_before_wake",
        "offload_quant_states",
        "lean",
        "sync_probe",
        "reward_check",
        "inputs_check",
        "liger_eager",
        "events",
    )
    assert [h.variable for h in hooks.ALL] == [
        "GRPO_RIG_EMULATE_VRAM_GB",
        "GRPO_RIG_VLLM_KEEP_POOLS",
        "GRPO_RIG_VLLM_GRAPHS_UP_TO_MAX_SEQS",
        "GRPO_RIG_VLLM_INSPECT_HERE",
        "GRPO_RIG_VLLM_TOP_K_FIRST",
        "GRPO_RIG_VLLM_SCHEDULER_STEPS",
        "GRPO_RIG_ADAPTER_SYNC",
        "GRPO_RIG_OFFLOAD_BEFORE_WAKE",
        "GRPO_RIG_OFFLOAD_QUANT_STATES",
        "GRPO_RIG_VLLM_LEAN",
        "GRPO_RIG_SYNC_PROBE",
        "GRPO_RIG_REWARD_CHECK",
        "GRPO_RIG_INPUTS",
        "GRPO_RIG_LIGER_EAGER",
        "GRPO_RIG_EVENTS",
    ]


def _installed(environ: dict[str, str]) -> list[str]:
    """loader.install's answer in a fresh interpreter (it puts a finder on sys.meta_path)."""
    code = (
        "import json, os, sys; from entrypoint.child import loader; "
        "print(json.dumps(loader.install(os.environ)))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=clean_env(**environ)
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_each_hook_installs_when_its_variable_turns_it_on_and_only_then(tmp_path):
    on = {
        "GRPO_RIG_EMULATE_VRAM_GB": "24",
        "GRPO_RIG_VLLM_KEEP_POOLS": "1",
        "GRPO_RIG_EVENTS": str(tmp_path / "e"),
        "GRPO_RIG_VLLM_GRAPHS_UP_TO_MAX_SEQS": "1",
        "GRPO_RIG_VLLM_INSPECT_HERE": "1",
        "GRPO_RIG_VLLM_TOP_K_FIRST": "1",
        "GRPO_RIG_VLLM_SCHEDULER_STEPS": "8",
        "GRPO_RIG_VLLM_LEAN": "1",
        "GRPO_RIG_OFFLOAD_BEFORE_WAKE": "1",
        "GRPO_RIG_OFFLOAD_QUANT_STATES": "1",
        "GRPO_RIG_ADAPTER_SYNC": "8",
        "GRPO_RIG_SYNC_PROBE": str(tmp_path / "p"),
        "GRPO_RIG_REWARD_CHECK": "1",
        "GRPO_RIG_INPUTS": str(tmp_path / "i"),
        "GRPO_RIG_LIGER_EAGER": "1",
    }
    assert _installed(on) == list(hooks.NAMES)
    off = {k: "0" for k in on} | {"GRPO_RIG_VLLM_SCHEDULER_STEPS": "1", "GRPO_RIG_EMULATE_VRAM_GB": "0"}
    assert _installed(off | {"GRPO_RIG_EVENTS": "", "GRPO_RIG_SYNC_PROBE": "", "GRPO_RIG_INPUTS": ""}) == []


@pytest.fixture
def scratch_module(tmp_path, monkeypatch):
    """An importable package `grpo_rig_scratch` whose module `upstream` defines Engine without `step`."""
    pkg = tmp_path / "grpo_rig_scratch"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "upstream.py").write_text("class Engine:\n    def start(self):\n        return 'started'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(runtime, "_SAID", set())
    finders = list(sys.meta_path)
    yield "grpo_rig_scratch.upstream"
    sys.meta_path[:] = finders
    for name in [n for n in sys.modules if n.startswith("grpo_rig_scratch")]:
        del sys.modules[name]


def _hook(module: str, qualname: str, apply) -> Hook:
    def install(value, after):
        if value == "1":
            after.patch(module, apply)
            after.patch(module, apply)  # twice: the notice still comes once

    return Hook(
        name="scratch",
        variable="GRPO_RIG_SCRATCH",
        targets=(Target(module, qualname, "0" * 16),),
        upstream=("scratch==1",),
        why="w",
        saves="s",
        delete_when="d",
        install=install,
    )


def test_a_hook_whose_target_is_missing_says_so_once_and_the_child_goes_on(scratch_module, capsys):
    applied = []
    hook = _hook(scratch_module, "Engine.step", applied.append)
    assert loader.install({"GRPO_RIG_SCRATCH": "1"}, hooks=(hook,)) == ["scratch"]
    module = __import__(scratch_module, fromlist=["Engine"])
    assert module.Engine().start() == "started" and applied == []
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("grpo-rig hook")]
    assert lines == [
        "grpo-rig hook scratch not installed: grpo_rig_scratch.upstream.Engine has no step "
        "(grpo_rig_scratch.upstream:Engine.step of scratch==1); the run goes on without it "
        "(DISABLE_HOOKS=scratch turns it off)"
    ]


def test_a_phase_timer_on_a_missing_method_is_a_notice_not_a_silent_gap(scratch_module, capsys, tmp_path):
    """runtime.timed (the events hook's wrapper) refuses a class without the method it times."""

    def time_start_and_step(module):
        events = runtime.Events(str(tmp_path / "e.jsonl"))
        runtime.timed(module.Engine, "start", lambda self, args, s: {"phase": "x"}, events)
        runtime.timed(module.Engine, "step", lambda self, args, s: {"phase": "y"}, events)

    loader.install({"GRPO_RIG_SCRATCH": "1"}, hooks=(_hook(scratch_module, "Engine", time_start_and_step),))
    __import__(scratch_module)
    (line,) = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("grpo-rig hook")]
    assert line.startswith(
        "grpo-rig hook scratch not installed: grpo_rig_scratch.upstream.Engine has no step;"
    )


def test_the_site_file_makes_entrypoint_importable_by_appending_the_checkout(tmp_path):
    """Where `entrypoint` is not importable (no editable install: here `python -S`, no site-packages), the
    loader appends the checkout's root at the end of sys.path, never first (it holds tests/ and bench/)."""
    code = (
        f"import sys; sys.path.insert(0, {str(SITE)!r}); import sitecustomize, entrypoint\n"
        "print(sys.path.index(sitecustomize.ROOT) == len(sys.path) - 1, entrypoint.__file__)\n"
        "print(type(sys.meta_path[0]).__name__)"
    )
    proc = subprocess.run(
        [sys.executable, "-S", "-c", code],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=clean_env(GRPO_RIG_VLLM_TOP_K_FIRST="1"),
    )
    assert proc.returncode == 0, proc.stderr
    last, where, finder = proc.stdout.split()
    assert last == "True" and where == str(ROOT / "entrypoint" / "__init__.py") and finder == "AfterImport"


def test_importing_the_site_file_imports_no_library_whatever_is_on():
    on = {h.variable: "1" for h in hooks.ALL} | {
        "GRPO_RIG_EVENTS": "/dev/null",
        "GRPO_RIG_SYNC_PROBE": "/dev/null",
        "GRPO_RIG_VLLM_SCHEDULER_STEPS": "8",
    }
    code = (
        "import sys; print(sorted(m for m in ('torch', 'vllm', 'swift', 'transformers') if m in sys.modules))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=clean_env(PYTHONPATH=str(SITE), **on),
    )
    assert proc.returncode == 0 and proc.stdout.strip() == "[]", proc.stderr
    assert "not installed" not in proc.stderr
