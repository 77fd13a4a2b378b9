"""GitHub workflows (.github/workflows) and the GPU smoke recipes they run: linted, pinned, least privilege.

Fast and offline: actionlint, zizmor --offline and check-jsonschema on the files, then the workflows read
as data (ruamel.yaml, YAML 1.2: `on:` stays a string), the release job's version check run for real,
and `plan` / `validate` for recipes/smoke-gpu.env and recipes/smoke-server.env on example inventories.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from tests.conftest import INVENTORIES, ROOT, clean_env, run_cli

WORKFLOWS = ROOT / ".github" / "workflows"
NAMES = ("ci.yml", "gpu-smoke.yml", "release.yml")
SHA_RE = re.compile(r"^[0-9a-f]{40}$")
# `uses: owner/repo[/path]@<40 hex> # vX.Y.Z` on one line: the comment says which release the SHA is.
USES_LINE_RE = re.compile(r"^\s*(?:-\s+)?uses:\s+(?P<action>[\w.-]+/[\w./-]+)@(?P<ref>\S+)(?P<comment>.*)$")
GPU_LABELS = {"gpu-1", "gpu-2plus"}
# Job-level permissions that may be granted write access, per workflow and job.
WRITE_ALLOWED = {("release.yml", "publish"): {"packages", "id-token", "attestations"}}


def load(name: str) -> dict:
    return YAML(typ="safe").load((WORKFLOWS / name).read_text())


def steps(job: dict) -> list[dict]:
    return job.get("steps") or []


def uses(step: dict) -> str:
    return str(step.get("uses", "")).split("@")[0]


def tool(name: str) -> Path:
    """A lint tool from the project's venv (`make venv` installs it); skip when it is not there."""
    for candidate in (ROOT / ".venv" / "bin" / name, Path(sys.executable).parent / name):
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    pytest.skip(f"{name} is not in .venv/bin (run `make venv`)")


def run_tool(*argv: str | Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(a) for a in argv], cwd=ROOT, capture_output=True, text=True, timeout=300)


def runs_on_labels(job: dict) -> list[set[str]]:
    """The runner label sets a job asks for, one per matrix entry (`${{ matrix.X }}` substituted)."""
    runs_on = job["runs-on"]
    labels = [runs_on] if isinstance(runs_on, str) else list(runs_on)
    entries = (job.get("strategy") or {}).get("matrix", {}).get("include") or [{}]
    out = []
    for entry in entries:
        resolved = set()
        for label in labels:
            resolved.add(
                re.sub(r"\$\{\{\s*matrix\.(\w+)\s*\}\}", lambda m, e=entry: str(e[m.group(1)]), label)
            )
        out.append(resolved)
    return out


# (a) The three linters `make lint` runs on the workflows.


def test_all_workflows_exist():
    assert sorted(p.name for p in WORKFLOWS.glob("*.yml")) == sorted(NAMES)
    assert not list(WORKFLOWS.glob("*.yaml")), (
        "one extension: .yml (the Makefile lints .github/workflows/*.yml)"
    )


def test_actionlint_passes():
    proc = run_tool(tool("actionlint"))
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_zizmor_offline_reports_nothing():
    proc = run_tool(tool("zizmor"), "--offline", "--no-progress", WORKFLOWS)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.cli
def test_workflows_match_the_github_workflow_schema():
    proc = run_tool(
        tool("check-jsonschema"),
        "--builtin-schema",
        "vendor.github-workflows",
        *sorted(WORKFLOWS.glob("*.yml")),
    )
    hint = ""
    if "'type' object is not subscriptable" in proc.stderr:
        hint = (
            "\ncheck-jsonschema itself fails to import: 0.38 needs click >= 8.3, runtime.lock pins click "
            "8.2.1; constrain check-jsonschema<0.38 in requirements/dev.in and `make lock`"
        )
    assert proc.returncode == 0, proc.stdout + proc.stderr + hint


# (b) The workflows as data.


@pytest.mark.parametrize("name", NAMES)
def test_every_action_is_pinned_to_a_commit_sha_with_its_version(name):
    lines = [
        line for line in (WORKFLOWS / name).read_text().splitlines() if re.match(r"^\s*(-\s+)?uses:", line)
    ]
    assert lines, f"{name} uses no action?"
    for line in lines:
        m = USES_LINE_RE.match(line)
        assert m, f"{name}: cannot read {line.strip()!r}"
        assert SHA_RE.match(m["ref"]), f"{name}: {m['action']}@{m['ref']} is not pinned to a full commit SHA"
        assert re.fullmatch(r"\s*#\s*v\d+\.\d+\.\d+\s*", m["comment"]), (
            f"{name}: {line.strip()!r} needs a `# vX.Y.Z` comment naming the release of that SHA"
        )
    # Parsed: every step's `uses` is a SHA pin too (no `uses:` hidden in a flow mapping).
    for job_id, job in load(name)["jobs"].items():
        refs = [str(s["uses"]) for s in steps(job) if "uses" in s] + ([job["uses"]] if "uses" in job else [])
        for ref in refs:
            assert "@" in ref and SHA_RE.match(ref.split("@", 1)[1]), f"{name}:{job_id}: {ref}"


def test_one_sha_per_action_across_workflows():
    pins: dict[str, set[str]] = {}
    for name in NAMES:
        for line in (WORKFLOWS / name).read_text().splitlines():
            m = USES_LINE_RE.match(line)
            if m:
                pins.setdefault(m["action"], set()).add(f"{m['ref']} {m['comment'].strip()}")
    assert {a: p for a, p in pins.items() if len(p) > 1} == {}


@pytest.mark.parametrize("name", NAMES)
def test_least_privilege_permissions(name):
    wf = load(name)
    assert "permissions" in wf, f"{name}: no top-level permissions (the default token would be broad)"
    assert wf["permissions"] in ({}, {"contents": "read"}), f"{name}: top level grants {wf['permissions']}"
    for job_id, job in wf["jobs"].items():
        perms = job.get("permissions")
        assert isinstance(perms, dict), f"{name}:{job_id}: job-level permissions must be listed"
        writes = {k for k, v in perms.items() if v == "write"}
        assert writes <= WRITE_ALLOWED.get((name, job_id), set()), f"{name}:{job_id}: writes {sorted(writes)}"
        assert set(perms.values()) <= {"read", "write", "none"}, f"{name}:{job_id}: {perms}"


@pytest.mark.parametrize("name", NAMES)
def test_checkout_never_persists_credentials(name):
    for job_id, job in load(name)["jobs"].items():
        for step in steps(job):
            if uses(step) == "actions/checkout":
                assert (step.get("with") or {}).get("persist-credentials") is False, f"{name}:{job_id}"


@pytest.mark.parametrize("name", NAMES)
def test_no_expressions_inside_run_scripts(name):
    """Values reach scripts through `env:`; `${{ }}` in `run:` is a template-injection risk."""
    for job_id, job in load(name)["jobs"].items():
        for step in steps(job):
            assert "${{" not in str(step.get("run", "")), f"{name}:{job_id}: {step.get('name')}"


def test_ci_runs_lint_tests_and_the_container_smoke_with_caches():
    wf = load("ci.yml")
    assert {"push", "pull_request"} <= set(wf["on"])
    scripts = "\n".join(str(s.get("run", "")) for job in wf["jobs"].values() for s in steps(job))
    assert "make lint" in scripts and "make venv" in scripts and "pytest" in scripts
    assert "compose.cpu.yaml run --rm train recipe=smoke" in scripts
    actions = {uses(s): s for job in wf["jobs"].values() for s in steps(job)}
    assert actions["actions/setup-python"]["with"]["python-version"] == "3.10"
    assert actions["astral-sh/setup-uv"]["with"]["enable-cache"] is True
    build = actions["docker/build-push-action"]["with"]
    assert build["cache-from"].startswith("type=gha") and build["cache-to"].startswith("type=gha")
    assert build["load"] is True and build["tags"] == "${{ env.GRPO_RIG_IMAGE }}"
    assert "BASE_IMAGE" not in build.get("build-args", ""), "GitHub builds on the real CUDA base"
    # `make venv` takes the uv on PATH only when its version is the Makefile's.
    makefile_uv = re.search(r"^UV_VERSION\s*:=\s*(\S+)", (ROOT / "Makefile").read_text(), re.M)[1]
    assert wf["env"]["UV_VERSION"] == makefile_uv


@pytest.mark.parametrize("name", NAMES)
def test_make_targets_called_by_workflows_exist(name):
    makefile = (ROOT / "Makefile").read_text()
    targets = set(re.findall(r"^([A-Za-z][\w-]*):", makefile, re.M))
    for job in load(name)["jobs"].values():
        for step in steps(job):
            for target in re.findall(r"\bmake\s+([A-Za-z][\w-]*)", str(step.get("run", ""))):
                assert target in targets, f"{name}: `make {target}` is not a Makefile target"


def test_gpu_smoke_triggers():
    on = load("gpu-smoke.yml")["on"]
    assert "workflow_dispatch" in on and on["schedule"][0]["cron"]
    assert set(on["pull_request"]["types"]) == {"labeled", "synchronize"}


def test_gpu_smoke_jobs_run_on_self_hosted_gpu_runners_one_at_a_time():
    wf = load("gpu-smoke.yml")
    seen_labels, seen_recipes = set(), set()
    for job_id, job in wf["jobs"].items():
        assert "gpu-smoke" in job["if"] and "head.repo.full_name == github.repository" in job["if"], job_id
        for labels in runs_on_labels(job):
            assert {"self-hosted", "linux", "x64"} <= labels, f"{job_id}: {labels}"
            assert len(labels & GPU_LABELS) == 1, f"{job_id}: {labels}"
            seen_labels |= labels & GPU_LABELS
        concurrency = job["concurrency"]
        assert concurrency["cancel-in-progress"] is False, job_id
        assert "matrix.runner" in concurrency["group"] or any(g in concurrency["group"] for g in GPU_LABELS)
        for entry in (job.get("strategy") or {}).get("matrix", {}).get("include") or []:
            seen_recipes.add(entry["recipe"])
        names = [uses(s) for s in steps(job)]
        assert "actions/upload-artifact" in names, job_id
        cleanup = [
            s for s in steps(job) if s.get("if") == "always()" and "docker compose down" in str(s.get("run"))
        ]
        assert cleanup and "--remove-orphans" in cleanup[0]["run"], f"{job_id}: no always() cleanup step"
        scripts = "\n".join(str(s.get("run", "")) for s in steps(job))
        for needle in (
            "docker compose build",
            "train doctor",
            '"reward" in row',
            '"completed"',
            "adapter_model",
        ):
            assert needle in scripts, f"{job_id}: {needle!r} missing"
    assert seen_labels == GPU_LABELS
    assert seen_recipes == {"smoke-gpu", "smoke-server"}
    # actionlint knows the custom labels (it refuses unknown ones).
    config = YAML(typ="safe").load((ROOT / ".github" / "actionlint.yaml").read_text())
    assert set(config["self-hosted-runner"]["labels"]) >= GPU_LABELS


def test_release_pushes_to_ghcr_with_labels_provenance_and_sbom():
    wf = load("release.yml")
    assert wf["on"] == {"push": {"tags": ["v*"]}}
    publish = wf["jobs"]["publish"]
    assert publish["needs"] == "version"
    build = next(s for s in steps(publish) if uses(s) == "docker/build-push-action")["with"]
    assert build["push"] is True and build["provenance"] is True and build["sbom"] is True
    args = dict(line.split("=", 1) for line in build["build-args"].strip().splitlines())
    assert set(args) == {"VERSION", "REVISION", "SOURCE", "LOCK_SHA256"}
    assert "BASE_IMAGE" not in args, "a release is built on the Dockerfile's CUDA base"
    assert (
        "ghcr.io" in next(s for s in steps(publish) if uses(s) == "docker/login-action")["with"]["registry"]
    )
    assert any(uses(s) == "actions/attest" for s in steps(publish))


def release_check_script() -> tuple[str, dict[str, str]]:
    step = next(s for s in steps(load("release.yml")["jobs"]["version"]) if s.get("id") == "check")
    return step["run"], step.get("env") or {}


def run_release_check(tmp_path: Path, tag: str) -> tuple[subprocess.CompletedProcess, str]:
    """The release job's version check, run in a copy of the files it reads."""
    if subprocess.run(["python3", "-c", "import tomllib"], capture_output=True).returncode:
        pytest.skip("python3 here has no tomllib (3.11+; ubuntu-latest has it)")
    for rel in ("pyproject.toml", "entrypoint/__init__.py", "requirements/runtime.lock"):
        if not (tmp_path / rel).exists():  # a test may have edited its copy
            (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(ROOT / rel, tmp_path / rel)
    script, env = release_check_script()
    assert env == {"TAG": "${{ github.ref_name }}"}
    output = tmp_path / "github_output"
    output.write_text("")
    proc = subprocess.run(
        ["bash", "-e", "-c", script],
        cwd=tmp_path,
        env={**os.environ, "TAG": tag, "GITHUB_OUTPUT": str(output)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    return proc, output.read_text()


def project_version() -> str:
    return re.search(r'^version\s*=\s*"([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.M)[1]


@pytest.mark.cli
def test_release_tag_matching_the_project_version_passes(tmp_path):
    version = project_version()
    init = (ROOT / "entrypoint" / "__init__.py").read_text()
    assert f'__version__ = "{version}"' in init, "pyproject.toml and entrypoint/__init__.py disagree"
    proc, output = run_release_check(tmp_path, f"v{version}")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"version={version}\n" in output
    assert re.search(r"^lock_sha256=[0-9a-f]{64}$", output, re.M)


@pytest.mark.cli
@pytest.mark.parametrize("tag", ["v99.0.0", "v0.1", "release-1"])
def test_release_tag_not_matching_the_project_version_fails(tmp_path, tag):
    proc, output = run_release_check(tmp_path, tag)
    assert proc.returncode != 0 and output == ""
    assert tag in proc.stderr


@pytest.mark.cli
def test_release_check_reads_both_version_sources(tmp_path):
    """A bump of pyproject.toml alone (entrypoint/__init__.py forgotten) is refused."""
    version = project_version()
    proc, _ = run_release_check(tmp_path, f"v{version}")
    assert proc.returncode == 0
    init = tmp_path / "entrypoint" / "__init__.py"
    init.write_text(init.read_text().replace(f'"{version}"', '"0.0.0-stale"'))
    proc, _ = run_release_check(tmp_path, f"v{version}")
    assert proc.returncode != 0 and "entrypoint/__init__.py" in proc.stderr


# (c) The GPU smoke recipes plan and validate on example machines.

SMOKE_RECIPES = [
    ("smoke-gpu", "1x4090-driver535", "colocate"),
    ("smoke-server", "2x4090-driver535", "server"),
]


@pytest.mark.cli
@pytest.mark.parametrize(("recipe", "inventory", "mode"), SMOKE_RECIPES)
def test_gpu_smoke_recipe_plans(recipe, inventory, mode, tmp_path):
    proc = run_cli(
        "plan",
        "--json",
        f"recipe={recipe}",
        f"INVENTORY={INVENTORIES / f'{inventory}.json'}",
        f"OUTPUT_DIR={tmp_path}",
        "RUN_NAME=r",
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    plan = json.loads(proc.stdout)
    assert plan["layout"]["mode"] == mode
    assert plan["layout"]["train_gpus"] == [0]
    assert plan["layout"]["rollout_gpus"] == ([1] if mode == "server" else [])
    assert [p["role"] for p in plan["processes"]] == (
        ["rollout", "trainer"] if mode == "server" else ["trainer"]
    )
    # Warnings about the example machine (its driver, say) are fine; none may point at the recipe.
    assert not [w for w in plan["warnings"] if f"recipes/{recipe}.env" in w], plan["warnings"]


@pytest.mark.cli
@pytest.mark.parametrize(("recipe", "inventory", "mode"), SMOKE_RECIPES)
def test_gpu_smoke_recipe_validates(recipe, inventory, mode, tmp_path):
    """`validate` passes; on a machine where the embedded model is not converted yet (`make model`),
    that must be its only complaint."""
    proc = run_cli(
        "validate",
        f"recipe={recipe}",
        f"INVENTORY={INVENTORIES / f'{inventory}.json'}",
        f"OUTPUT_DIR={tmp_path}",
        "RUN_NAME=r",
        env=clean_env(),
        timeout=120,
    )
    if proc.returncode == 0:
        assert f"recipe {recipe}: valid (" in proc.stdout
        assert f"recipes/{recipe}.env" not in proc.stdout, proc.stdout
        return
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert proc.returncode == 2 and errors, proc.stdout + proc.stderr
    assert all("embedded model" in e and "not converted" in e for e in errors), proc.stderr
