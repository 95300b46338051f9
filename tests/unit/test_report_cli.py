"""`slo-gateway simulate`: files written, the comparison, trace replay and the exit code."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from typer.testing import CliRunner

from gateway.offline import report_charts as charts
from gateway.offline.simulate_command import register
from gateway.offline.trace import PlannedRequest, write_trace
from loadtests import command as live


def app() -> typer.Typer:
    cli = typer.Typer()
    register(cli)
    live.register(cli)  # `loadtest`, as the real command line has it
    return cli


def test_simulate_compares_policies_and_writes_every_file(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app(), ["simulate", "smoke", "--policy", "round_robin,least_loaded", "--out", str(tmp_path)]
    )
    assert result.exit_code == 0, result.output
    assert "round_robin: simulated 40 requests in" in result.output and "s CPU" in result.output
    assert "| least_loaded | interactive |" in result.output
    for policy in ("round_robin", "least_loaded"):
        folder = tmp_path / policy
        assert len((folder / "records.jsonl").read_text().splitlines()) == 40
        assert json.loads((folder / "report.json").read_text())["policy"] == policy
        assert (folder / "report.md").read_text().startswith("# smoke: PASS")
    rows = json.loads((tmp_path / "comparison.json").read_text())
    assert {r["policy"] for r in rows} == {"round_robin", "least_loaded"}
    assert (tmp_path / "comparison.png").exists() == charts.available()


def test_a_trace_that_misses_the_criteria_exits_1(tmp_path: Path) -> None:
    trace = tmp_path / "trace.jsonl"
    # prompts longer than the engines' context: they answer 400, only providers serve them
    write_trace(
        trace, [PlannedRequest(i * 0.5, 9000, 8, "anyone", "interactive") for i in range(20)]
    )
    result = CliRunner().invoke(
        app(),
        [
            "simulate",
            "chat",
            "--trace",
            str(trace),
            "--policy",
            "round_robin",
            "--out",
            str(tmp_path / "out"),
            "--no-chart",
        ],
    )
    assert result.exit_code == 1, result.output
    report = json.loads((tmp_path / "out" / "round_robin" / "report.json").read_text())
    assert report["groups"]["tenant:anyone"]["count"] == 20
    assert 0 < report["groups"]["all"]["error_rate"] < 1
    assert not (tmp_path / "out" / "round_robin" / "report.png").exists()


def test_usage_errors_exit_2(tmp_path: Path) -> None:
    runner = CliRunner()
    bad_policy = runner.invoke(app(), ["simulate", "chat", "--policy", "fastest"])
    assert bad_policy.exit_code == 2 and "unknown policies ['fastest']" in bad_policy.output
    assert runner.invoke(app(), ["simulate", "nonsense"]).exit_code == 2
    missing = runner.invoke(app(), ["simulate", "chat", "--trace", str(tmp_path / "none.csv")])
    assert missing.exit_code == 2
