"""`--policy-file`: labelled policy configs for `slo-gateway simulate` and `loadtest`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from gateway.offline.runs import PolicyChoice, defined_policies, policy_choices
from gateway.offline.scenarios import smoke
from gateway.offline.simulate_command import register
from loadtests import command as live
from loadtests.stack import Stack


def app() -> typer.Typer:
    cli = typer.Typer()
    register(cli)
    live.register(cli)  # `loadtest`, as the real command line has it
    return cli


def simulate(tmp_path: Path, policy_file: str, policies: str) -> tuple[int, str]:
    path = tmp_path / "policies.yaml"
    path.write_text(policy_file)
    args = ["simulate", "sessions_rag", "--policy-file", str(path), "--policy", policies]
    result = CliRunner().invoke(app(), [*args, "--out", str(tmp_path / "out"), "--no-chart"])
    return result.exit_code, result.output


def records(tmp_path: Path, label: str) -> list[dict[str, object]]:
    text = (tmp_path / "out" / label / "records.jsonl").read_text()
    return [json.loads(line) for line in text.splitlines()]


def test_a_labelled_config_runs_as_configured_under_its_label(tmp_path: Path) -> None:
    file = "same: {name: slo_aware}\nwithout_prefix: {name: slo_aware, prefix_aware: false}\n"
    code, output = simulate(tmp_path, file, "slo_aware,same,without_prefix")
    assert code == 0, output
    assert "| same | chat |" in output and "| without_prefix | chat |" in output
    report = json.loads((tmp_path / "out" / "without_prefix" / "report.json").read_text())
    assert report["policy"] == "without_prefix"
    # the defaults under a label are the named policy, run for run; another parameter is not
    assert records(tmp_path, "same") == records(tmp_path, "slo_aware")
    assert records(tmp_path, "without_prefix") != records(tmp_path, "slo_aware")


@pytest.mark.parametrize(
    ("file", "message"),
    [
        ("fast: {name: slo_aware, prefix_awar: false}", "slo_aware.prefix_awar: Extra inputs"),
        ("fast: {name: fastest}", "policy 'fast': invalid config"),
        ("[slo_aware]", "expected a mapping of labels to policy sections"),
        ("slo_aware: {name: slo_aware}", "label 'slo_aware' is a policy's own name"),
        ("'../up': {name: slo_aware}", "label '../up': use letters"),
        ("fast: {name: slo_aware", "--policy-file"),
    ],
)
def test_a_bad_policy_file_is_a_usage_error_saying_what_is_wrong(
    tmp_path: Path, file: str, message: str
) -> None:
    code, output = simulate(tmp_path, file, "least_loaded")
    assert code == 2 and message in " ".join(output.split()), output


def test_an_unknown_label_names_the_defined_ones(tmp_path: Path) -> None:
    code, output = simulate(tmp_path, "tuned: {name: slo_aware}", "tunde")
    assert code == 2 and "unknown policies ['tunde']" in output and "tuned" in output


def test_choices_keep_the_order_asked_and_name_registered_policies_with_defaults() -> None:
    defined = defined_policies({"tuned": {"name": "slo_aware", "prefix_aware": False}}, "f")
    assert policy_choices("tuned, round_robin", defined) == [
        PolicyChoice("tuned", {"name": "slo_aware", "prefix_aware": False}),
        PolicyChoice("round_robin", {"name": "round_robin"}),
    ]
    with pytest.raises(ValueError, match="unknown policies"):
        policy_choices(" , ")


def test_the_live_stack_configures_the_gateway_with_the_section() -> None:
    stack = Stack(smoke(), {"name": "slo_aware", "prefix_aware": False})
    assert stack.config.policy.name == "slo_aware" and stack.config.policy.prefix_aware is False
    assert Stack(smoke(), "round_robin").config.policy.name == "round_robin"
