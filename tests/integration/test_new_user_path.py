"""The load-testing path as a new user meets it: `slo-gateway` run as a process, in an
interpreter where an optional extra (Locust, matplotlib) cannot be imported, as after the
plain install."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

# A None entry in sys.modules makes a package missing to `import` and to find_spec alike.
_WITHOUT = """
import sys
sys.modules.update(dict.fromkeys({hidden!r}))
from gateway.cli import main
sys.argv = ["slo-gateway", *sys.argv[1:]]
main()
"""


def _cli(args: list[str], hidden: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    script = _WITHOUT.format(hidden=hidden)
    return subprocess.run(
        [sys.executable, "-c", script, *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
        check=False,
    )


def test_loadtest_without_locust_names_the_extra_at_once(tmp_path: Path) -> None:
    done = _cli(["loadtest", "smoke", "--out", str(tmp_path / "out")], ["locust"], tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "pip install 'slo-gateway[load]'" in done.stderr
    assert not (tmp_path / "out").exists()  # nothing started, nothing written


def test_the_default_simulate_passes(tmp_path: Path) -> None:
    done = _cli(["simulate", "--no-chart", "--out", str(tmp_path)], [], tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "# chat: PASS" in done.stdout


def test_simulate_without_matplotlib_names_the_plot_extra(tmp_path: Path) -> None:
    done = _cli(["simulate", "smoke", "--out", str(tmp_path)], ["matplotlib"], tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "charts skipped (matplotlib missing): pip install 'slo-gateway[plot]'" in done.stdout
    assert not list(tmp_path.rglob("*.png"))
