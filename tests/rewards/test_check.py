"""The reward functions checked before training (entrypoint/rewards/check.py, on what the plugin probe
found): a name no reward registers, a plugin that shadows an installed module, fails to import, is missing
or is slow to import, and rewards whose answers ms-swift cannot score. Through `train` and `validate` (the
fake `swift`, tests/fakes/swift, records every start) and on rewards_check.check in process."""

from __future__ import annotations

import pytest

from tests.conftest import clean_env, refused, run_cli

pytestmark = pytest.mark.cli  # each test starts the entrypoint or a process tree

# Plugins --------------------------------------------------------------------------------------------------


def test_unregistered_reward_name(tmp_path):
    err = refused(tmp_path, "recipe=smoke", "REWARD_FUNCS=countdown TCMSDAccuracy")
    assert "no reward function is registered under 'TCMSDAccuracy'" in err and "tcm_sd_accuracy" in err


def test_plugin_stem_that_shadows_an_installed_module_is_refused(tmp_path):
    plugin = tmp_path / "datasets.py"
    plugin.write_text(
        "from swift.plugin import ORM, orms\nclass R(ORM):\n    def __call__(self, completions, **kw):\n"
        "        return [1.0] * len(completions)\norms['mine'] = R\n"
    )
    err = refused(tmp_path, "recipe=smoke", f"EXTERNAL_PLUGINS={plugin}", "REWARD_FUNCS=mine")
    assert "as module 'datasets', which is already the installed" in err and "rename the file" in err


def test_plugin_that_fails_to_import_is_reported(tmp_path):
    plugin = tmp_path / "my_broken_rewards.py"
    plugin.write_text("import numpy\nraise RuntimeError('typo in my reward')\n")
    err = refused(tmp_path, "recipe=smoke", f"EXTERNAL_PLUGINS={plugin}", "REWARD_FUNCS=countdown")
    assert "import failed: RuntimeError: typo in my reward" in err


def test_missing_plugin_file(tmp_path):
    err = refused(
        tmp_path,
        "recipe=smoke",
        "EXTERNAL_PLUGINS=/data/plugin.py",
        "REWARD_FUNCS=countdown",
        extra_env={"GRPO_RIG_VERSION": "test"},
    )
    assert "/data/plugin.py: does not exist inside the container" in err
    err = refused(tmp_path, "recipe=smoke", "EXTERNAL_PLUGINS=/data/plugin.py", "REWARD_FUNCS=countdown")
    assert "/data/plugin.py: does not exist on this machine" in err  # on a clone: no container to look in


def test_a_reward_returning_a_string_is_refused(tmp_path):
    plugin = tmp_path / "my_string_rewards.py"
    plugin.write_text(
        "from swift.plugin import ORM, orms\nclass R(ORM):\n    def __call__(self, completions, **kw):\n"
        "        return 'good'\norms['stringy'] = R\n"
    )
    err = refused(tmp_path, "recipe=smoke", f"EXTERNAL_PLUGINS={plugin}", "REWARD_FUNCS=stringy")
    assert "REWARD_FUNCS stringy: returned 'good' for 4 completions" in err
    assert "one number (or None where the reward does not apply) per completion" in err


@pytest.mark.parametrize(
    "returns, funcs, valid",
    [
        ("[float('nan')] * len(completions)", "countdown nanny", True),  # countdown scores every completion
        ("[float('nan')] * len(completions)", "nanny", False),  # nothing scores them: ms-swift fails
        ("[None] * len(completions)", "nanny", False),
        ("[float('nan') if i % 2 else 1.0 for i, _ in enumerate(completions)]", "nanny", False),
        ("[float('inf')] * len(completions)", "countdown nanny", False),  # inf breaks the mean
    ],
)
def test_nan_is_none_to_ms_swift_and_a_completion_no_reward_scores_is_refused(
    tmp_path, returns, funcs, valid
):
    """Cases re-run: an all-NaN reward was refused as 'return a list of floats' (NaN is a float), while NaN
    where another reward scores the completion is what ms-swift accepts (None becomes NaN there)."""
    plugin = tmp_path / "my_nan_rewards.py"
    plugin.write_text(
        "from swift.plugin import ORM, orms\nclass R(ORM):\n    def __call__(self, completions, **kw):\n"
        f"        return {returns}\norms['nanny'] = R\n"
    )
    proc = run_cli(
        "validate",
        "recipe=smoke",
        f"EXTERNAL_PLUGINS={plugin}",
        f"REWARD_FUNCS={funcs}",
        f"OUTPUT_DIR={tmp_path}",
        env=clean_env(),
    )
    assert (proc.returncode == 0) == valid, proc.stderr
    if "nan" in returns and not valid:
        assert "every reward returned None or NaN for" in proc.stderr and "return 0.0 where" in proc.stderr


def test_a_reward_returning_numbers_and_none_is_accepted(tmp_path):
    plugin = tmp_path / "my_fine_rewards.py"
    plugin.write_text(
        "from swift.plugin import ORM, orms\nclass R(ORM):\n"
        "    def __call__(self, completions, target, **kw):\n"
        "        return [None if i == 0 else 1.0 for i, _ in enumerate(completions)]\norms['fine'] = R\n"
    )
    # beside a reward that scores every completion: alone, its None row is one ms-swift cannot score (below)
    proc = run_cli(
        "validate",
        "recipe=smoke",
        f"EXTERNAL_PLUGINS={plugin}",
        "REWARD_FUNCS=countdown fine",
        env=clean_env(),
    )
    assert proc.returncode == 0, proc.stderr


# What a new user sees on the host --------------------------------------------------------------------------


def test_a_missing_plugin_file_is_named_for_where_the_command_runs():
    """On a clone, "does not exist inside the container" sent a user looking for a container."""
    from entrypoint.rewards import check as rewards_check

    def missing(where: bool) -> str:
        _, problems = rewards_check.check(
            ["my_rewrds.py"], [], None, "", lambda f: "does not exist", in_container=where
        )
        return problems[0].render()

    assert (
        "does not exist on this machine" in missing(False)
        and "container" not in missing(False).split("fix:")[0]
    )
    assert "does not exist inside the container" in missing(True) and "/data" in missing(True)


def test_a_mistyped_reward_gets_a_did_you_mean():
    from entrypoint.rewards import check as rewards_check

    probe = {
        "registered": {n: {"class": n, "columns": []} for n in ("countdown", "format_partial", "accuracy")},
        "shadowed": [],
        "errors": [],
    }
    _, problems = rewards_check.check([], ["countdwn", "format_partial", "zzz"], probe, "", lambda f: "")
    fixes = {p.where: p.fix for p in problems}
    assert fixes["REWARD_FUNCS countdwn"].startswith("did you mean countdown?")
    assert "did you mean" not in fixes["REWARD_FUNCS zzz"]


def test_a_plugin_slower_to_import_than_the_bound_is_a_warning_not_a_refusal(tmp_path):
    """A fixed 120 s bound refused a valid plugin on a busy machine ("importing the reward plugins failed:
    ... timed out"); the import had not failed. Past the bound the run goes on, saying how long it waited."""
    from entrypoint.rewards import check as rewards_check
    from entrypoint.world import plugin_probe

    plugin = tmp_path / "my_slow_rewards.py"
    plugin.write_text(
        "import time\ntime.sleep(5)\nfrom swift.plugin import ORM, orms\n"
        "class Slow(ORM):\n    def __call__(self, completions, **kw):\n"
        "        return [1.0] * len(completions)\n"
        "orms['slow_reward'] = Slow\n"
    )
    result, error = plugin_probe.run([str(plugin)], bound=(1.0, "1 s (a test's bound)"))
    assert not error and result["slow"]["seconds"] >= 1 and result["slow"]["bound"] == "1 s (a test's bound)"
    infos, problems = rewards_check.check(
        [str(plugin)], ["slow_reward", "format"], result, error, lambda f: ""
    )
    assert [p.fatal for p in problems] == [False] and "had not finished after" in problems[0].message
    assert "the import did not fail" in problems[0].message and set(infos) == {"format"}
    # an import that fails is an error still, however fast
    plugin.write_text("raise RuntimeError('typo in my reward')\n")
    result, error = plugin_probe.run([str(plugin)], bound=(60.0, "60 s"))
    _, problems = rewards_check.check([str(plugin)], ["format"], result, error, lambda f: "")
    assert any(p.fatal and "import failed: RuntimeError: typo in my reward" in p.message for p in problems)
