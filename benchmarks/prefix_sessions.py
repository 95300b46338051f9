"""Prefix-aware routing offline: the sessions scenarios under each policy, over several seeds.

Run: .venv/bin/python -m benchmarks.prefix_sessions [scenario ...] [--seeds 1,2,3]

Per scenario, seed and policy on the identical plan: chat SLO attainment and TTFT p50/p95/p99,
goodput (chat requests meeting the SLO per second), the share of prompt tokens the engines
found cached and the prefill tokens they computed, load imbalance (max/mean requests per
engine), cost, and the gateway index's precision and recall against the engines' truth
(Σ min(predicted, actual) over Σ predicted, and over Σ actual, per served request).

slo_aware runs with and without prefix awareness (`prefix_aware`), each with a vLLM prior
seeded as docs/slo-guide.md (section 6) seeds one from a `slo-gateway bench` run: the engines'
prefill slope (5e-4 s/token on the slow engines) and, since it is measured, `uncertainty` 1.2;
and once with the default prior. The others need no prior.
"""

from __future__ import annotations

import argparse
import collections
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from gateway.offline.report import RunFacts, summarize
from gateway.offline.scenarios import SCENARIOS
from gateway.offline.simulator import Simulator
from gateway.telemetry.record import Finished
from policies.base import RouteRequest

SCENARIO_NAMES = ["sessions_slow", "sessions_fast", "sessions_rag"]
BENCH_PRIOR = {"priors": {"vllm": {"ttft_per_token_s": 5e-4, "uncertainty": 1.2}}}
VARIANTS: dict[str, dict[str, Any]] = {
    "round_robin": {"name": "round_robin"},
    "least_loaded": {"name": "least_loaded"},
    "prefix_only": {"name": "prefix_only"},
    "slo_aware, no prefix": {"name": "slo_aware", "prefix_aware": False, "estimate": BENCH_PRIOR},
    "slo_aware + prefix": {"name": "slo_aware", "estimate": BENCH_PRIOR},
    "slo_aware + prefix, default prior": {"name": "slo_aware"},
}
COLUMNS = (
    "attainment", "ttft_p50", "ttft_p95", "ttft_p99", "goodput", "cached_share",
    "prefill_tokens", "imbalance", "cost", "precision", "recall",
)  # fmt: skip


def run_one(scenario_name: str, policy: Mapping[str, Any], seed: int) -> dict[str, float]:
    scenario = SCENARIOS[scenario_name]()
    sim = Simulator(scenario, scenario.plan(seed), policy, seed=seed)
    truth: list[tuple[float, int]] = []
    finished = sim.gateway.finished

    def observed(endpoint_id: str, route: RouteRequest, result: Finished, *rest: Any) -> None:
        if result.cached_tokens is not None:
            truth.append((route.cached_tokens.get(endpoint_id, 0.0), result.cached_tokens))
        finished(endpoint_id, route, result, *rest)

    sim.gateway.finished = observed  # type: ignore[method-assign,assignment]
    records = sim.run().records
    summary = summarize(scenario, records, RunFacts(policy=str(policy), driver="offline"))
    chat = summary.groups["class:chat"]
    ok = [r for r in records if r.outcome == "ok"]
    prompt, cached = sum(r.prompt_tokens for r in ok), sum(r.cached_tokens for r in ok)
    per_engine = collections.Counter(r.endpoint for r in ok)
    matched = sum(min(p, a) for p, a in truth)
    return {
        "attainment": chat.attainment,
        "ttft_p50": chat.ttft_p50_s or 0.0,
        "ttft_p95": chat.ttft_p95_s or 0.0,
        "ttft_p99": chat.ttft_p99_s or 0.0,
        "goodput": chat.goodput_rps,
        "cached_share": cached / max(1, prompt),
        "prefill_tokens": float(prompt - cached),
        "imbalance": max(per_engine.values()) / statistics.mean(per_engine.values()),
        "cost": summary.groups["all"].cost,
        "precision": matched / max(1.0, sum(p for p, _ in truth)),
        "recall": matched / max(1, sum(a for _, a in truth)),
    }


def table(scenario_name: str, seeds: Sequence[int]) -> str:
    lines = [
        f"### {scenario_name} (seeds {', '.join(map(str, seeds))}: mean; attainment min-max)",
        "",
        "| policy | chat attainment | TTFT p50 s | p95 s | p99 s | goodput req/s | cached share"
        " | prefill tokens | imbalance | cost $ | index precision | recall |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for label, policy in VARIANTS.items():
        runs = [run_one(scenario_name, policy, seed) for seed in seeds]
        mean = {c: statistics.mean(r[c] for r in runs) for c in COLUMNS}
        spread = [r["attainment"] for r in runs]
        lines.append(
            f"| {label} | {mean['attainment']:.1%} ({min(spread):.0%}-{max(spread):.0%}) | "
            f"{mean['ttft_p50']:.2f} | {mean['ttft_p95']:.2f} | {mean['ttft_p99']:.2f} | "
            f"{mean['goodput']:.2f} | {mean['cached_share']:.2f} | {mean['prefill_tokens']:,.0f} "
            f"| {mean['imbalance']:.2f} | {mean['cost']:.4f} | {mean['precision']:.2f} | "
            f"{mean['recall']:.2f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("scenarios", nargs="*", default=SCENARIO_NAMES)
    parser.add_argument("--seeds", default="1,2,3")
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    for name in args.scenarios:
        print(table(name, seeds))
        print()


if __name__ == "__main__":
    main()
