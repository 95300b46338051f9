"""Offline simulator speed: a whole `slo-gateway simulate` run, phase by phase, in CPU seconds.

Run: .venv/bin/python -m benchmarks.simulator_speed       (fleet20: ~100k requests, 20 endpoints)
     .venv/bin/python -m benchmarks.simulator_speed --requests 20000 --policy least_loaded,slo_aware

Issue 5's goal: 100k requests across 20 endpoints in under a minute on one core. Each policy's
run is timed as the CLI does it (plan once, then per policy: the simulation, the report, the
records and report files), in process CPU seconds, so another job on the other core does not
count. Ratios are against `round_robin` measured in the same run (the cheapest decision, so the
ratio is what a policy's own work costs) and against the goal. The interpreter's start-up and
imports (about a second) are left out; pin the run (`taskset -c 1 ...`) on a busy machine.
"""

from __future__ import annotations

import argparse
import logging
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from gateway.offline.report import RunFacts, summarize
from gateway.offline.runs import Run, policy_choices, publish
from gateway.offline.scenario import Scenario
from gateway.offline.scenarios import SCENARIOS
from gateway.offline.simulator import Simulator
from gateway.offline.trace import PlannedRequest

GOAL_S = 60.0  # for 100k requests
BASELINE = "round_robin"
T = TypeVar("T")


def timed(work: Callable[[], T]) -> tuple[T, float]:
    started = time.process_time()
    result = work()
    return result, time.process_time() - started


def one_policy(scenario: Scenario, plan: list[PlannedRequest], policy: str) -> dict[str, float]:
    """CPU seconds of each phase of one policy's run."""
    result, run_s = timed(Simulator(scenario, plan, {"name": policy}).run)
    facts = RunFacts(policy=policy, driver="offline", preemptions=float(result.preemptions))
    summary, report_s = timed(lambda: summarize(scenario, result.records, facts))
    with tempfile.TemporaryDirectory() as out:
        _, files_s = timed(lambda: publish([Run(summary, result.records)], Path(out), chart=False))
    return {"simulate": run_s, "report": report_s, "files": files_s}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", default="fleet20", choices=sorted(SCENARIOS))
    parser.add_argument("--requests", type=int, default=None, help="the first N of the plan")
    parser.add_argument("--policy", default="round_robin,least_loaded,slo_aware")
    args = parser.parse_args()
    names = [choice.label for choice in policy_choices(args.policy)]
    if BASELINE not in names:
        names.insert(0, BASELINE)
    logging.getLogger("gateway").setLevel(logging.ERROR)  # as `simulate` does: no breaker logs
    scenario = SCENARIOS[args.scenario]()
    plan, plan_s = timed(lambda: scenario.plan()[: args.requests])
    print(f"{args.scenario}: {len(plan)} requests, plan built in {plan_s:.2f} CPU s")
    print(
        "policy          simulate  report  files   total  requests/CPU s  vs round_robin  vs goal"
    )
    baseline_s = None
    for name in names:
        phases = one_policy(scenario, plan, name)
        total_s = plan_s + sum(phases.values())
        baseline_s = baseline_s or total_s
        goal_s = GOAL_S * len(plan) / 100_000
        simulate_s, report_s, files_s = phases["simulate"], phases["report"], phases["files"]
        print(
            f"{name:<15} {simulate_s:>8.2f} {report_s:>7.2f} {files_s:>6.2f} {total_s:>7.2f}"
            f" {len(plan) / total_s:>15.0f} {total_s / baseline_s:>14.2f}x"
            f" {total_s / goal_s:>7.2f}x"
        )
    print(f"(CPU seconds; total includes the plan; goal: {GOAL_S:.0f} s per 100k requests)")


if __name__ == "__main__":
    main()
