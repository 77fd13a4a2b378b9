"""The plugin probe (entrypoint/world/plugin_probe.py): the reward plugins are imported in a throwaway
process, never in the entrypoint's own, within a time bound that grows with the machine's load."""

from __future__ import annotations

import pytest

from tests.conftest import clean_env, run_cli

pytestmark = pytest.mark.cli  # each test starts the entrypoint or a process tree


def test_plugin_import_leaks_nothing_into_the_entrypoint(tmp_path):
    marker = tmp_path / "imported"
    plugin = tmp_path / "my_marker_rewards.py"
    plugin.write_text(
        f"import pathlib\npathlib.Path({str(marker)!r}).write_text('x')\nfrom swift.plugin import orms\n"
    )
    proc = run_cli(
        "validate", "recipe=smoke", f"EXTERNAL_PLUGINS={plugin}", f"OUTPUT_DIR={tmp_path}", env=clean_env()
    )
    assert proc.returncode == 0, proc.stderr
    import sys

    assert "my_marker_rewards" not in sys.modules and marker.exists()


# The probe's time bound ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("load", "cpus", "seconds", "why"),
    [
        (0.5, 2, 120, "120 s"),
        (None, None, 120, "120 s"),
        (8.0, 2, 480, "120 s x 4.0 for a load average of 8.0 on 2 core(s)"),
        (40.0, 2, 600, "capped"),
    ],
)
def test_the_probe_waits_longer_on_a_busier_machine(load, cpus, seconds, why):
    from entrypoint.world import plugin_probe

    got, text = plugin_probe.probe_bound(load, cpus)
    assert got == seconds and why in text
