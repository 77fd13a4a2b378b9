"""`plan`: the exact processes a run executes, for the shipped recipes and made-up machines."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from entrypoint.child import hooks
from tests.conftest import ROOT, build_plan, clean_env, flag, load_recipe, run_cli

# ms-swift's installed folder, found without importing it (its import takes torch and transformers: seconds)
SWIFT = Path(importlib.util.find_spec("swift").origin).parent


def build(*pairs, inventory="5x4090-driver535", environ=None):
    return build_plan(*pairs, inventory=inventory, environ=environ)


def test_smoke_plan_is_one_cpu_trainer(tmp_path):
    p = build("recipe=smoke", f"OUTPUT_DIR={tmp_path}", "RUN_NAME=s", inventory="1x4090-driver535")
    assert [x.role for x in p.processes] == ["trainer"]
    argv = p.processes[0].argv
    assert argv[0] == sys.executable and argv[1].endswith("swift/cli/rlhf.py")  # plan._worker_directly
    assert argv[2:4] == ["--rlhf_type", "grpo"]
    assert flag(argv, "model") == [str(p.model_path)] and p.model_path.endswith("SmolLM2-135M-Instruct")
    assert flag(argv, "model_type") == ["llama"] and flag(argv, "template") == ["chatml"]
    assert flag(argv, "use_vllm") == ["false"]
    assert flag(argv, "reward_funcs") == ["countdown", "format_partial"]
    assert flag(argv, "dataset") == [str(tmp_path / "s" / "data" / "countdown.jsonl")]
    assert flag(argv, "output_dir") == [str(tmp_path / "s" / "train")]
    assert flag(argv, "add_version") == ["false"]
    assert flag(argv, "external_plugins")[0].endswith("entrypoint/rewards/grpo_rig_rewards.py")
    assert p.processes[0].env["CUDA_VISIBLE_DEVICES"] == ""  # TRAIN_GPUS=none: the GPU stays untouched
    assert "NPROC_PER_NODE" not in p.processes[0].env


def test_countdown_1x4090_plan_colocates_vllm_on_gpu0():
    p = build("recipe=countdown-1x4090", "RUN_NAME=c", inventory="1x4090-driver535")
    assert p.layout.mode == "colocate"
    (trainer,) = p.processes
    assert trainer.env["CUDA_VISIBLE_DEVICES"] == "0" and "NPROC_PER_NODE" not in trainer.env
    argv = trainer.argv
    assert argv[1].endswith("swift/cli/rlhf.py") and trainer.env["MASTER_PORT"] == "29999"
    assert flag(argv, "model") == ["Qwen/Qwen2.5-0.5B-Instruct"]
    assert flag(argv, "use_vllm") == ["true"] and flag(argv, "vllm_mode") == ["colocate"]
    assert flag(argv, "num_generations") == ["8"] and flag(argv, "max_completion_length") == ["256"]
    # 32 completions per step, cut by the planner (tests/plan/test_shape.py) into micro-batches that fit 24 GB
    pd, ga = (
        int(flag(argv, "per_device_train_batch_size")[0]),
        int(flag(argv, "gradient_accumulation_steps")[0]),
    )
    assert pd * ga == 32 and pd > 1 and flag(argv, "generation_batch_size") == ["32"]
    assert 0.1 <= float(flag(argv, "vllm_gpu_memory_utilization")[0]) < 0.5 and flag(argv, "sleep_level") == [
        "0"
    ]
    assert flag(argv, "learning_rate") == ["5e-7"] and flag(argv, "beta") == ["0.001"]
    assert "--vllm_server_host" not in argv


def test_one_process_starts_ms_swift_s_worker_without_its_cli_and_torchrun():
    """The start-up cut (plan._worker_directly): the command ms-swift's CLI would run, minus two
    interpreters. More than one process, more than one node, or a CLI named by GRPO_RIG_SWIFT keep
    `swift rlhf`, with torchrun's NPROC_PER_NODE where there is more than one process."""
    (one,) = build("recipe=countdown-1x4090", "RUN_NAME=c", inventory="1x4090-driver535").processes
    assert one.argv[:2] == [sys.executable, str(SWIFT / "cli" / "rlhf.py")]
    assert "NPROC_PER_NODE" not in one.env
    named = build(
        "recipe=countdown-1x4090",
        "RUN_NAME=c",
        inventory="1x4090-driver535",
        environ={"GRPO_RIG_SWIFT": "/opt/other/bin/swift"},
    ).processes[0]
    assert named.argv[:2] == ["/opt/other/bin/swift", "rlhf"] and named.env["NPROC_PER_NODE"] == "1"
    two = build("recipe=smoke-gpu", "RUN_NAME=g", "TRAIN_GPUS=0,1", inventory="2x4090-driver535").processes[0]
    assert two.argv[1] == "rlhf" and two.env["NPROC_PER_NODE"] == "2"
    node = build(
        "recipe=smoke-gpu",
        "RUN_NAME=n",
        "NNODES=2",
        "NODE_RANK=0",
        "MASTER_ADDR=10.0.0.1",
        "TRAIN_GPUS=0",
        inventory="1x4090-driver535",
    ).processes[0]
    assert node.argv[1] == "rlhf" and node.env["NPROC_PER_NODE"] == "1" and node.env["NNODES"] == "2"


def test_the_worker_file_is_ms_swift_s_only(tmp_path, monkeypatch):
    """host.swift_worker: OpenStack's `swift` client (no swift/llm) or a named CLI means `swift rlhf`."""
    from entrypoint.world import host

    other = tmp_path / "swift"
    (other / "cli").mkdir(parents=True)
    (other / "__init__.py").write_text("")
    (other / "cli" / "rlhf.py").write_text("")
    assert host.swift_worker({})[1].endswith("swift/cli/rlhf.py")
    assert host.swift_worker({"GRPO_RIG_SWIFT": "/x/swift"}) == ()
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in [n for n in sys.modules if n == "swift" or n.startswith("swift.")]:
        monkeypatch.delitem(sys.modules, name)  # find_spec answers from sys.modules first
    assert host.swift_worker({}) == ()


def test_every_vllm_engine_captures_cuda_graphs_only_up_to_its_batch():
    """The start-up cut of the inspect_here hook (entrypoint/child/hooks/inspect_here.py): the hook is on
    wherever vLLM starts with CUDA graphs, and off where it does not (eager mode, HF generation, the CPU)."""
    hook = "GRPO_RIG_VLLM_GRAPHS_UP_TO_MAX_SEQS"
    (trainer,) = build("recipe=countdown-1x4090", "RUN_NAME=c", inventory="1x4090-driver535").processes
    assert trainer.env[hook] == "1" and trainer.env["PYTHONPATH"].split(":")[0].endswith(
        "entrypoint/child/site"
    )
    server = build("recipe=smoke-server", "RUN_NAME=s", inventory="2x4090-driver535")
    assert server.process("rollout").env[hook] == "1" and hook not in server.process("trainer").env
    # the model-class inspection in place: only where the engine starts inside the trainer (colocate)
    here = "GRPO_RIG_VLLM_INSPECT_HERE"
    assert trainer.env[here] == "1" and all(here not in p.env for p in server.processes)
    lean = "GRPO_RIG_VLLM_LEAN"  # ms-swift reads only finished outputs of a colocated engine
    assert trainer.env[lean] == "1" and all(lean not in p.env for p in server.processes)
    eager = build(
        "recipe=countdown-1x4090", "RUN_NAME=c", "VLLM_ENFORCE_EAGER=true", inventory="1x4090-driver535"
    )
    assert hook not in eager.processes[0].env
    # the sort-free top-k/top-p wherever a vLLM engine samples, eager or not
    topk = "GRPO_RIG_VLLM_TOP_K_FIRST"
    assert trainer.env[topk] == server.process("rollout").env[topk] == eager.processes[0].env[topk] == "1"
    assert topk not in server.process("trainer").env
    assert hook not in build("recipe=smoke", "RUN_NAME=s").processes[0].env


def test_multi_step_scheduling_runs_the_colocated_engine_on_v0_with_its_steps():
    """VLLM_SCHEDULER_STEPS > 1 (the planner's choice for countdown-1x4090, shape.engine_options): the trainer
    starts vLLM's V0 engine, the only one with multi-step scheduling in 0.8.5, with that many steps through
    the site hook; at 1 nothing changes (ms-swift's V1 engine)."""
    (v0,) = build("recipe=countdown-1x4090", "RUN_NAME=c", inventory="1x4090-driver535").processes
    assert v0.env["VLLM_USE_V1"] == "0" and v0.env["GRPO_RIG_VLLM_SCHEDULER_STEPS"] == "8"
    (v1,) = build(
        "recipe=countdown-1x4090", "RUN_NAME=c", "VLLM_SCHEDULER_STEPS=1", inventory="1x4090-driver535"
    ).processes
    assert "VLLM_USE_V1" not in v1.env and "GRPO_RIG_VLLM_SCHEDULER_STEPS" not in v1.env
    server = build("recipe=smoke-server", "RUN_NAME=s", inventory="2x4090-driver535")
    assert all("GRPO_RIG_VLLM_SCHEDULER_STEPS" not in p.env for p in server.processes)


def test_vllm_use_v1_that_vllm_cannot_read_is_refused_and_an_empty_one_left_to_the_planner():
    """vLLM reads VLLM_USE_V1 as bool(int(...)) at import: "true" would end the trainer after the model
    loaded, so the recipe is refused naming the values that work; an empty value (this project's "leave the
    default") reaches no child, and the planner keeps its engine choice."""
    import pytest

    from entrypoint.errors import BadInput

    with pytest.raises(BadInput) as refused:
        build("recipe=countdown-1x4090", "VLLM_USE_V1=true", inventory="1x4090-driver535")
    (problem,) = refused.value.problems
    assert problem.where.startswith("VLLM_USE_V1=true") and "VLLM_USE_V1=1" in problem.fix
    (trainer,) = build(
        "recipe=countdown-1x4090", "RUN_NAME=c", "VLLM_USE_V1=", inventory="1x4090-driver535"
    ).processes
    assert trainer.env["VLLM_USE_V1"] == "0" and trainer.env["GRPO_RIG_VLLM_SCHEDULER_STEPS"] == "8"
    (kept,) = build(
        "recipe=countdown-1x4090", "RUN_NAME=c", "VLLM_USE_V1=1", inventory="1x4090-driver535"
    ).processes
    assert kept.env["VLLM_USE_V1"] == "1" and "GRPO_RIG_VLLM_SCHEDULER_STEPS" not in kept.env


def test_multi_step_scheduling_with_vllm_use_v1_is_refused_and_on_a_rollout_server_warned():
    p = build(
        "recipe=countdown-1x4090", "VLLM_SCHEDULER_STEPS=8", "VLLM_USE_V1=1", inventory="1x4090-driver535"
    )
    (refused,) = [x for x in p.problems if x.fatal]
    assert refused.where == "VLLM_SCHEDULER_STEPS=8 with VLLM_USE_V1=1"
    assert "VLLM_SCHEDULER_STEPS=1 to keep the V1 engine" in refused.fix
    assert not [
        x
        for x in build(
            "recipe=countdown-1x4090", "VLLM_SCHEDULER_STEPS=8", inventory="1x4090-driver535"
        ).problems
        if x.fatal
    ]
    p = build("recipe=smoke-server", "RUN_NAME=s", "VLLM_SCHEDULER_STEPS=8", inventory="2x4090-driver535")
    (warned,) = [x for x in p.problems if x.where.startswith("VLLM_SCHEDULER_STEPS")]
    assert not warned.fatal and "remove VLLM_SCHEDULER_STEPS" in warned.fix


def test_tcm_4x4090_plan_on_5_cards_is_4_trainers_and_1_rollout_server():
    p = build("recipe=tcm-4x4090", "RUN_NAME=t")
    rollout, trainer = p.processes
    assert (rollout.role, trainer.role) == ("rollout", "trainer")
    assert rollout.env["CUDA_VISIBLE_DEVICES"] == "4"
    assert trainer.env["CUDA_VISIBLE_DEVICES"] == "0,1,2,3" and trainer.env["NPROC_PER_NODE"] == "4"
    for proc in (rollout, trainer):  # the weight-sync communicator spans both
        assert proc.env["NCCL_P2P_DISABLE"] == "1" and proc.env["NCCL_IB_DISABLE"] == "1"
    assert rollout.argv[1] == "rollout"
    assert flag(rollout.argv, "host") == ["127.0.0.1"] and flag(rollout.argv, "port") == ["8000"]
    assert flag(rollout.argv, "gpu_memory_utilization") == ["0.8"] and flag(
        rollout.argv, "max_model_len"
    ) == ["4096"]
    assert flag(rollout.argv, "data_parallel_size") == ["1"] and flag(
        rollout.argv, "tensor_parallel_size"
    ) == ["1"]
    assert flag(rollout.argv, "model") == ["joshuaHe/tcm_qwen2.5-1.5b-sft"]
    assert rollout.health_url == "http://127.0.0.1:8000/health/"
    argv = trainer.argv
    assert flag(argv, "vllm_mode") == ["server"]
    assert flag(argv, "vllm_server_host") == ["127.0.0.1"] and flag(argv, "vllm_server_port") == ["8000"]
    assert flag(argv, "deepspeed") == ["zero2"] and flag(argv, "num_generations") == ["6"]
    # the seed's 48 completions per step (3 x 4 processes x 4) in micro-batches that fit each card
    pd, ga = (
        int(flag(argv, "per_device_train_batch_size")[0]),
        int(flag(argv, "gradient_accumulation_steps")[0]),
    )
    assert pd * 4 * ga == 48 and flag(argv, "generation_batch_size") == ["48"]
    assert flag(argv, "reward_funcs") == ["tcm_sd_accuracy", "format"]
    assert flag(argv, "system")[0].endswith("recipes/prompts/tcm.txt")
    assert flag(argv, "dataset") == ["/data/tcm_train.jsonl"]
    assert "--vllm_device" not in argv and "--vllm_gpu_memory_utilization" not in argv


@pytest.mark.cli
def test_plan_json_cli_has_processes_with_role_env_argv():
    proc = run_cli(
        "plan",
        "--json",
        "recipe=tcm-4x4090",
        "INVENTORY=examples/inventories/5x4090-driver535.json",
        "RUN_NAME=j",
        env=clean_env(),
    )
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert [p["role"] for p in data["processes"]] == ["rollout", "trainer"]
    for p in data["processes"]:
        assert set(p) == {"role", "env", "argv"} and isinstance(p["argv"], list)
    assert data["layout"]["mode"] == "server"


@pytest.mark.cli
def test_plan_works_without_gpu_and_without_the_embedded_model(tmp_path):
    proc = run_cli("plan", "recipe=smoke", f"EMBEDDED_MODEL_DIR={tmp_path}", env=clean_env())
    assert proc.returncode == 0, proc.stderr
    assert "rlhf.py --rlhf_type grpo" in proc.stdout and "not converted yet" in proc.stdout


def test_a_generator_named_in_a_later_layer_replaces_the_recipes_dataset(tmp_path):
    p = build(
        "recipe=countdown-1x4090",
        "DATASET_GENERATOR=countdown",
        f"OUTPUT_DIR={tmp_path}",
        "RUN_NAME=g",
        inventory="1x4090-driver535",
    )
    assert flag(p.processes[0].argv, "dataset") == [str(tmp_path / "g" / "data" / "countdown.jsonl")]
    (warning,) = [x for x in p.problems if x.where.startswith("DATASET (recipes/countdown-1x4090.env")]
    assert not warning.fatal and "replaced by DATASET_GENERATOR=countdown (command line)" in warning.message


def test_a_generator_and_a_dataset_in_the_same_layer_are_refused():
    p = build(
        "recipe=countdown-1x4090",
        "DATASET_GENERATOR=countdown",
        "DATASET=/data/x.jsonl",
        inventory="1x4090-driver535",
    )
    (both,) = [x for x in p.problems if x.where == "DATASET (command line)"]
    assert both.fatal and "same layer" in both.message and "DATASET_GENERATOR= (empty)" in both.fix


def test_a_dataset_named_in_a_later_layer_replaces_the_recipes_generator(tmp_path):
    """`validate recipe=smoke DATASET=data/my.jsonl` was refused: "set together with
    DATASET_GENERATOR=countdown in the same layer", though the generator is the recipe's and the file the
    command line's. A later layer wins, as for any key; a warning says the generator is unused."""
    data = tmp_path / "my.jsonl"
    row = {
        "messages": [{"role": "user", "content": "Make 6 from [1, 2, 3]."}],
        "nums": [1, 2, 3],
        "target": 6,
    }
    data.write_text((json.dumps(row) + "\n") * 16)
    p = build("recipe=smoke", f"DATASET={data}", f"OUTPUT_DIR={tmp_path}", "RUN_NAME=d")
    assert flag(p.process("trainer").argv, "dataset") == [str(data)]
    assert p.recipe.settings.DATASET_GENERATOR == "" and not any("generate" in step for step in p.steps)
    (warning,) = [x for x in p.problems if x.where.startswith("DATASET_GENERATOR (recipes/smoke.env")]
    assert not warning.fatal and f"DATASET={data} (command line) replaces" in warning.message
    assert not [x for x in p.problems if x.fatal]


@pytest.mark.cli
def test_a_local_model_directory_is_planned_from_its_config(tmp_path):
    """MODEL=/path/to/dir (a downloaded or converted model) is not a hub id: the plan reads its
    config.json and never asks a hub cache about the path (it used to end in HFValidationError)."""
    model = tmp_path / "models" / "Qwen2.5-3B-Instruct"
    model.mkdir(parents=True)
    config = ROOT / "tests" / "corpus" / "models" / "Qwen--Qwen2.5-3B-Instruct" / "config.json"
    (model / "config.json").write_bytes(config.read_bytes())
    for spec in (str(model), f"{model}/"):
        proc = run_cli(
            "plan",
            "recipe=countdown-1x4090",
            f"MODEL={spec}",
            "INVENTORY=examples/inventories/1x4090-driver535.json",
            env=clean_env(),
        )
        assert proc.returncode == 0, proc.stderr
        assert f"model dimensions from {model}/config.json" in proc.stdout
        assert f"--model {spec}" in proc.stdout


@pytest.mark.parametrize(
    "text, said",
    [
        ('{"hidden_size": ', "is not JSON (Expecting value"),
        ("[]", "is [] (input should be a valid dictionary)"),
        ('{"hidden_size": 896, "head_dim": "64"}', 'has head_dim = "64" (input should be a valid integer)'),
        ('{"text_config": [1]}', "has text_config = [1]"),
        ('{"architectures": "Qwen2ForCausalLM"}', 'has architectures = "Qwen2ForCausalLM"'),
        ('{"max_position_embeddings": "32768"}', 'has max_position_embeddings = "32768"'),
    ],
)
def test_a_model_config_json_not_of_transformers_types_is_one_problem_not_a_traceback(tmp_path, text, said):
    """A local model's config.json that was not JSON ended plan in JSONDecodeError; a list, or a number
    written as text, in AttributeError or TypeError deep in the planner."""
    from entrypoint import preflight

    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(text)
    (model / "model.safetensors").write_bytes(b"")
    plan = build("recipe=countdown-1x4090", f"MODEL={model}", "RUN_NAME=c", inventory="1x4090-driver535")
    problems = {p.where.split(" (")[0]: p for p in preflight.check(plan, plan.facts, for_train=False)}
    damaged = problems["MODEL"]
    assert damaged.fatal and damaged.message.startswith(f"{model}/config.json {said}"), damaged.render()
    assert damaged.fix.startswith("restore the model's config.json")
    assert f"the config.json at {model}/config.json {said}" in problems["memory"].message


def test_a_container_runs_closing_lines_are_for_the_host(tmp_path, monkeypatch):
    """After `docker compose run ... train` the closing lines said `python -m entrypoint evaluate ...
    OUTPUT_DIR=/output` and /output paths, which the host's shell has neither of."""
    from entrypoint.commands.train import summary_lines
    from entrypoint.facts import facts as facts_mod

    mount = tmp_path / "output"  # /output in the image
    monkeypatch.setattr(facts_mod, "CONTAINER_OUTPUT", mount)
    environ = {"GRPO_RIG_VERSION": "0.1.0", "GRPO_RIG_HOST_OUTPUT": "./output"}
    p = build_plan("recipe=smoke", f"OUTPUT_DIR={mount}", "RUN_NAME=r", environ=environ, in_container=True)
    (p.run_dir / "adapter").mkdir(parents=True)
    lines = summary_lines(p)
    assert "adapter: ./output/r/adapter" in lines
    assert any(
        line.startswith("did it help? docker compose run --rm train evaluate run=r  (") for line in lines
    )
    assert not any("/output" in line.replace("./output", "") or "python -m" in line for line in lines), lines
    on_host = build_plan("recipe=smoke", f"OUTPUT_DIR={mount}", "RUN_NAME=r", in_container=False)
    assert f"adapter: {mount / 'r' / 'adapter'}" in summary_lines(on_host)
    (hint,) = [line for line in summary_lines(on_host) if line.startswith("did it help?")]
    # the command's cost, and both spellings with the run's OUTPUT_DIR (new-user walk)
    assert (
        f'make eval RUN=r ARGS="OUTPUT_DIR={mount}"  (the base model and the adapter on 32 held-out' in hint
    )
    assert hint.endswith(f"-m entrypoint evaluate run=r OUTPUT_DIR={mount}")


def test_a_short_embedded_model_name_gets_the_full_one_as_its_fix():
    """New-user trial: MODEL=SmolLM2-135M-Instruct with MODEL_SOURCE=embedded was told to set
    MODEL_SOURCE=hub, which sends the run to the network; the fix names the embedded model first."""
    p = build("recipe=smoke", "MODEL_SOURCE=embedded", "MODEL=SmolLM2-135M-Instruct")
    (problem,) = [x for x in p.problems if x.where.startswith("MODEL")]
    assert problem.fix.startswith("set MODEL=HuggingFaceTB/SmolLM2-135M-Instruct, or MODEL_SOURCE=hub")
    (other,) = [
        x
        for x in build("recipe=smoke", "MODEL_SOURCE=embedded", "MODEL=org/other").problems
        if x.where.startswith("MODEL")
    ]
    assert other.fix.startswith("name an embedded model, or MODEL_SOURCE=hub")


def test_disabled_hooks_leave_every_child_s_environment():
    """DISABLE_HOOKS=top_k_first: the trainer's (and the export's) environment loses that hook's variable
    and keeps the others; with every hook the plan sets disabled, no child gets the site folder either."""
    pairs = ("recipe=countdown-1x4090", "RUN_NAME=c", "EXPORT_MERGED=true")
    shipped = build(*pairs, inventory="1x4090-driver535")
    (trainer, export) = build(*pairs, "DISABLE_HOOKS=top_k_first", inventory="1x4090-driver535").processes
    topk = "GRPO_RIG_VLLM_TOP_K_FIRST"
    assert shipped.process("trainer").env[topk] == "1" and shipped.process("export").env[topk] == "1"
    assert topk not in trainer.env and topk not in export.env
    assert {k: v for k, v in shipped.process("trainer").env.items() if k != topk} == trainer.env
    planned = [h.name for h in hooks.ALL if h.variable in shipped.process("trainer").env]
    bare = build(*pairs, f"DISABLE_HOOKS={','.join(planned)}", inventory="1x4090-driver535").processes[0]
    assert not any(k.startswith("GRPO_RIG_") for k in bare.env) and "PYTHONPATH" not in bare.env
    server = build(
        "recipe=smoke-server",
        "RUN_NAME=s",
        "DISABLE_HOOKS=graphs_up_to_max_seqs",
        inventory="2x4090-driver535",
    ).process("rollout")
    assert "GRPO_RIG_VLLM_GRAPHS_UP_TO_MAX_SEQS" not in server.env and server.env[topk] == "1"


def test_plan_and_validate_say_which_hooks_disable_hooks_took_out_and_why(tmp_path, capsys):
    """The hooks DISABLE_HOOKS left out were visible only as GRPO_RIG_* variables missing from the env."""
    import argparse

    from entrypoint.commands import validate

    words = ["recipe=countdown-1x4090", "RUN_NAME=c", f"OUTPUT_DIR={tmp_path}", "DISABLE_HOOKS=lean,events"]
    plan = build(*words, inventory="1x4090-driver535")
    lines = plan.render().splitlines()
    head = "hooks off by DISABLE_HOOKS (command line): lean, events"
    assert head in lines, plan.render()
    at = lines.index(head)
    assert lines[at + 1 : at + 3] == [
        f"  lean: {hooks.lean.HOOK.gist}",
        f"  events: {hooks.events.HOOK.gist}",
    ]
    # what each is about: its `why` up to the end of the first clause, a bracket's own ';' kept inside
    assert all(h.why.startswith(h.gist) and 20 < len(h.gist) < len(h.why) + 1 for h in hooks.ALL)
    assert hooks.lean.HOOK.gist.endswith("unless it asks for FINAL_ONLY")
    assert [h["name"] for h in plan.to_json()["hooks_off"]] == ["lean", "events"]
    assert plan.to_json()["hooks_off"][1]["why"] == hooks.events.HOOK.why
    assert (
        build("recipe=countdown-1x4090", "RUN_NAME=c", inventory="1x4090-driver535")
        .to_json()
        .get("hooks_off")
        is None
    )
    inventory = str(ROOT / "examples" / "inventories" / "1x4090-driver535.json")
    assert validate.main(argparse.Namespace(words=words), {"INVENTORY": inventory}) == 0
    assert head in capsys.readouterr().out.splitlines()


def test_a_colocated_trainer_with_sleep_and_model_offload_leaves_the_gpu_before_vllm_wakes():
    """ms-swift 3.6.4 wakes vLLM's weights before it offloads the trainer (two weight copies at once): the
    plan turns the reordering hook on exactly where that happens, colocated with SLEEP_LEVEL >= 1 and
    OFFLOAD_MODEL, and a user can turn it off by name."""
    variable = "GRPO_RIG_OFFLOAD_BEFORE_WAKE"
    pairs = ("recipe=countdown-1x4090", "RUN_NAME=c", "MEMORY_CHECK=warn")
    both = build(*pairs, "SLEEP_LEVEL=1", "OFFLOAD_MODEL=true", inventory="1x4090-driver535")
    assert both.process("trainer").env[variable] == "1"
    for other in (("SLEEP_LEVEL=0", "OFFLOAD_MODEL=true"), ("SLEEP_LEVEL=1", "OFFLOAD_MODEL=false")):
        assert variable not in build(*pairs, *other, inventory="1x4090-driver535").process("trainer").env
    off = build(
        *pairs,
        "SLEEP_LEVEL=1",
        "OFFLOAD_MODEL=true",
        "DISABLE_HOOKS=offload_before_wake",
        inventory="1x4090-driver535",
    )
    assert variable not in off.process("trainer").env


def test_vllm_is_given_only_the_adapter_on_the_one_weight_copy_path():
    """Colocated with SLEEP_LEVEL=1 and OFFLOAD_MODEL, ms-swift's merge would run on the CPU each step: vLLM
    serves the trained adapter on the base weights it loaded once instead, at the run's LoRA rank, on its V1
    engine (V0's multi-step runner refuses LoRA). Not where the base weights are not kept (SLEEP_LEVEL=2),
    without an adapter (full fine-tuning), on multi-step scheduling, or when the user turns it off."""
    variable = "GRPO_RIG_ADAPTER_SYNC"
    pairs = ("recipe=countdown-7b-1x4090", "RUN_NAME=c", "MEMORY_CHECK=warn")
    trainer = build(*pairs, inventory="1x4090-driver535").process("trainer")
    assert trainer.env[variable] == "8" and "VLLM_USE_V1" not in trainer.env
    assert (
        build(*pairs, "LORA_RANK=32", inventory="1x4090-driver535").process("trainer").env[variable] == "32"
    )
    for other in (
        "SLEEP_LEVEL=2",
        "TRAIN_TYPE=full",
        "VLLM_SCHEDULER_STEPS=8",
        "VLLM_USE_V1=0",
        "DEEPSPEED=zero3",
        "LORA_RANK=1024",
        "DISABLE_HOOKS=adapter_sync",
        "OFFLOAD_MODEL=false",
    ):
        env = build(*pairs, other, inventory="1x4090-driver535").process("trainer").env
        assert variable not in env, other
    assert (
        variable
        not in build("recipe=countdown-1x4090", "RUN_NAME=c", inventory="1x4090-driver535")
        .process("trainer")
        .env
    )


def test_colocated_qlora_always_gives_vllm_the_adapter_and_never_the_v0_engine():
    """QLoRA's merged 4-bit weights are not weights vLLM can load (preflight/values.py check_quantization):
    vLLM is given the adapter whether or not the run offloads, and the planner never turns multi-step
    scheduling on (vLLM's V0 runner refuses LoRA), however small the model."""
    pairs = ("recipe=countdown-1x4090", "RUN_NAME=c", "QUANT_METHOD=bnb", "QUANT_BITS=4")
    plan = build(*pairs, inventory="1x4090-driver535")
    trainer = plan.process("trainer")
    assert (
        not plan.recipe.trainer_args.offload_model
        and trainer.env["GRPO_RIG_ADAPTER_SYNC"].split(":")[0] == "8"
    )
    assert "VLLM_USE_V1" not in trainer.env and plan.recipe.settings.VLLM_SCHEDULER_STEPS != 8
    assert (
        "GRPO_RIG_ADAPTER_SYNC"
        not in build(*pairs, "USE_VLLM=false", inventory="1x4090-driver535").process("trainer").env
    )


def test_a_colocated_vllm_is_sized_for_the_rollout_not_the_models_whole_context():
    """With VLLM_MAX_MODEL_LEN unset ms-swift passes none and vLLM sizes its KV cache for the model's whole
    context (40,960 tokens for Qwen3): the plan sets it to what a GRPO rollout asks (MAX_LENGTH + completion,
    else the estimated prompt with a quarter more) and says why; an assumed prompt (an unknown hub dataset
    without MAX_LENGTH) leaves it to vLLM."""
    pairs = ("recipe=countdown-1x4090", "RUN_NAME=c", "MODEL=Qwen/Qwen3-4B", "VLLM_MAX_MODEL_LEN=")
    plan = build(*pairs, inventory="1x4090-driver535")
    assert plan.recipe.raw("VLLM_MAX_MODEL_LEN") == "2304"
    assert "MAX_LENGTH + MAX_COMPLETION_LENGTH: what a GRPO rollout asks of vLLM" in plan.recipe.source(
        "VLLM_MAX_MODEL_LEN"
    )
    assert flag(plan.process("trainer").argv, "vllm_max_model_len") == ["2304"]
    estimated = build(*pairs, "MAX_LENGTH=", inventory="1x4090-driver535")
    assert estimated.recipe.raw("VLLM_MAX_MODEL_LEN") == "512"  # 160 tokens + 25 %, to 256, + 256
    assert "set MAX_LENGTH to bound the prompts" in estimated.recipe.source("VLLM_MAX_MODEL_LEN")
    assumed = build(*pairs, "MAX_LENGTH=", "DATASET=someone/other-dataset#2000", inventory="1x4090-driver535")
    assert not assumed.recipe.is_set("VLLM_MAX_MODEL_LEN")
    assert assumed.budget.colocate.max_model_len == 40960


def test_without_the_scheduler_steps_hook_the_colocated_engine_runs_vllm_s_v1():
    """The multi-step engine exists only through the hook; V0 stepping once per schedule would be slower
    than V1, so the plan gives V1 (entrypoint/child/hooks/scheduler_steps.py)."""
    pairs = ("recipe=countdown-1x4090", "RUN_NAME=c", "VLLM_SCHEDULER_STEPS=8")
    (multi,) = build(*pairs, inventory="1x4090-driver535").processes
    (plain,) = build(*pairs, "DISABLE_HOOKS=scheduler_steps", inventory="1x4090-driver535").processes
    assert multi.env["VLLM_USE_V1"] == "0" and multi.env["GRPO_RIG_VLLM_SCHEDULER_STEPS"] == "8"
    assert "VLLM_USE_V1" not in plain.env and "GRPO_RIG_VLLM_SCHEDULER_STEPS" not in plain.env


def _resumed(*pairs: str, before: dict[str, str] | None):
    """The plan of a restart of run `c` (the smoke recipe), whose last attempt recorded the smoke recipe's
    values with `before` over them as its resolved recipe (None: a manifest without one) and left
    checkpoint-2."""
    from entrypoint.facts.facts import Previous

    smoke = {k: v.value for k, v in load_recipe("recipe=smoke", "RUN_NAME=c").values.items()}
    recorded = (
        None
        if before is None
        else {k: {"value": v, "source": "recipe"} for k, v in {**smoke, **before}.items()}
    )
    data = {"identity": {}} | ({} if recorded is None else {"resolved_recipe": recorded})
    previous = Previous(manifest=data, newest_checkpoint="checkpoint-2")
    return build_plan("recipe=smoke", "RUN_NAME=c", *pairs, inventory="1x4090-driver535", previous=previous)


def test_a_resume_with_a_changed_learning_rate_is_refused_as_the_checkpoint_keeps_the_old_one():
    """transformers' Trainer restores the optimizer and the schedule from the checkpoint: a resume at another
    LEARNING_RATE trained at the old one while the manifest said the new (scheduler.pt base_lrs)."""
    plan = _resumed("LEARNING_RATE=5e-4", before={"LEARNING_RATE": "1e-4"})
    (problem,) = [p for p in plan.problems if "learning-rate schedule keep the old values" in p.message]
    assert (
        problem.fatal
        and "LEARNING_RATE: 1e-4 -> 5e-4" in problem.message
        and "RESUME_ONLY_MODEL=true" in problem.fix
    )
    weights_only = _resumed("LEARNING_RATE=5e-4", "RESUME_ONLY_MODEL=true", before={"LEARNING_RATE": "1e-4"})
    assert not any("keep the old values" in p.message for p in weights_only.problems)
    same = _resumed("LEARNING_RATE=1e-4", before={"LEARNING_RATE": "1e-4"})
    assert not any("resumes from" in p.message for p in same.problems)


def test_a_resume_with_changed_sampling_values_goes_on_saying_so():
    plan = _resumed(
        "NUM_GENERATIONS=4", "BETA=0.1", before={"NUM_GENERATIONS": "2", "BETA": "0.04", "SEED": "1"}
    )
    (warning,) = [p for p in plan.problems if "with changed values" in p.message]
    assert not warning.fatal
    assert "NUM_GENERATIONS: 2 -> 4" in warning.message and "BETA: 0.04 -> 0.1" in warning.message


def test_a_manifest_without_a_resolved_recipe_is_not_compared():
    plan = _resumed("LEARNING_RATE=5e-4", before=None)
    assert not any("resumes from" in p.message for p in plan.problems)


# DeepSeek-R1's system prompt: 399 characters, longer than a file name may be (255 bytes on ext4, xfs, tmpfs)
R1_SYSTEM = (
    "A conversation between User and Assistant. The user asks a question, and the Assistant solves it. The "
    "assistant first thinks about the reasoning process in the mind and then provides the user with the "
    "answer. The reasoning process and answer are enclosed within <think> </think> and <answer> </answer> "
    "tags, respectively, i.e., <think> reasoning process here </think> <answer> answer here </answer>."
)


def test_a_system_prompt_longer_than_a_file_name_validates_and_plans_as_text(tmp_path, capsys):
    """A SYSTEM value is a prompt or a prompt file; asking whether a 399-character prompt is a file ended
    validate and plan in `OSError: File name too long`."""
    import argparse

    from entrypoint.commands import plan as plan_command
    from entrypoint.commands import validate

    environ = {"INVENTORY": str(ROOT / "examples" / "inventories" / "1x4090-driver535.json")}
    words = ["recipe=countdown-1x4090", f"SYSTEM={R1_SYSTEM}", f"OUTPUT_DIR={tmp_path}", "RUN_NAME=r1"]
    assert validate.main(argparse.Namespace(words=words), environ) == 0
    assert "recipe countdown-1x4090: valid" in capsys.readouterr().out
    assert plan_command.main(argparse.Namespace(words=words, json=True), environ) == 0
    trainer = next(p for p in json.loads(capsys.readouterr().out)["processes"] if p["role"] == "trainer")
    assert flag(trainer["argv"], "system") == [R1_SYSTEM]


@pytest.mark.parametrize("value", ["x" * 400, "prompt\0with a NUL", "é" * 200])
def test_a_value_that_cannot_be_a_path_is_no_file_and_asking_never_raises(value):
    from entrypoint.recipe import load as recipe_mod
    from entrypoint.world import host

    assert not recipe_mod.is_file(value) and not recipe_mod.is_dir(value) and not recipe_mod.exists(value)
    info = host.path_info(Path(value))
    assert not info.exists and not info.is_file and not info.is_dir and not info.readable
