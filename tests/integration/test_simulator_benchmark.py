"""The simulator benchmark still runs (`python -m benchmarks.simulator_speed`), its table adds up.

Not a timed test: a few hundred requests, and only the output's structure and arithmetic are
asserted (each total is the plan plus the policy's phases; the baseline's ratio is 1), never a
speed.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ROW = re.compile(r"^(\w+)\s+" + r"\s+".join([r"([\d.]+)"] * 5) + r"\s+([\d.]+)x\s+([\d.]+)x$")


def test_the_benchmark_times_each_policy_against_round_robin() -> None:
    command = [sys.executable, "-m", "benchmarks.simulator_speed", "--requests", "300"]
    command += ["--policy", "slo_aware"]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("fleet20: 300 requests, plan built in ")
    plan_s = float(re.findall(r"in ([\d.]+) CPU s", lines[0])[0])
    rows = {m[1]: m for line in lines if (m := ROW.match(line))}
    assert list(rows) == ["round_robin", "slo_aware"]  # the baseline is added, and first
    for row in rows.values():
        simulate_s, report_s, files_s, total_s, per_cpu_s = map(float, row.groups()[1:6])
        assert total_s == pytest.approx(plan_s + simulate_s + report_s + files_s, abs=0.03)
        assert per_cpu_s == pytest.approx(300 / total_s, rel=0.05)
    assert rows["round_robin"][7] == "1.00"
