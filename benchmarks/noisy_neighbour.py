"""Fair share inside a class: the `noisy_neighbour` scenario three ways, per tenant.

Run (offline, several seeds):   .venv/bin/python -m benchmarks.noisy_neighbour --seeds 1 2 3
Live (Locust, the real gateway and the simulated fleet on loopback, one seed):
                                .venv/bin/python -m benchmarks.noisy_neighbour --live --seeds 1

The scenario is gateway/offline/fairness_scenarios.py. Variants:
    alone   the noisy tenant's burst left out (its steady sessions stay): the quiet tenant's
            attainment without a noisy neighbour
    fifo    the burst, the queue first come first served (admission.fair_share off)
    fair    the burst, fair share on (the default)
Per tenant: attainment (share of its requests that met the SLO), served tokens (uncached prompt
plus output of its answered requests), and offline the queue wait (arrival to admission) p50 and
p95 of its answered requests; per run the cached share (cached prompt tokens over prompt tokens
of answered requests: prefix locality), the requests answered and their output tokens (the
fleet's decode work: fair share is work-conserving, so these stay level while served tokens
move with the mix, the noisy tenant's one-off prompts being uncached). Each figure is the mean
over the seeds.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

from gateway.bench.percentile import percentile
from gateway.offline.fairness_scenarios import NOISY, QUIET, noisy_neighbour
from gateway.offline.prefix_scenarios import PrefixScenario
from gateway.offline.records import LoadRecord
from gateway.offline.report import record_meets_slo
from gateway.offline.simulator import Simulator
from gateway.offline.workload import RateShape
from policies.admission import AdmissionParams

POLICY = "slo_aware"
VARIANTS = ("alone", "fifo", "fair")
Measures = dict[str, float]


def variant(name: str) -> PrefixScenario:
    scenario = noisy_neighbour()
    if name == "alone":
        (burst,) = scenario.traffic
        quiet = burst.model_copy(update={"shape": RateShape.constant(0.0, 0.0, 1.0)})
        return scenario.model_copy(update={"traffic": [quiet]})
    return scenario.model_copy(update={"admission": AdmissionParams(fair_share=name == "fair")})


def measure_tenants(records: Sequence[LoadRecord], scenario: PrefixScenario) -> Measures:
    found: Measures = {}
    for tenant in (QUIET, NOISY):
        mine = [r for r in records if r.tenant == tenant]
        answered = [r for r in mine if r.outcome == "ok"]
        met = sum(record_meets_slo(r, scenario.classes[r.slo_class]) for r in mine)
        waits = sorted(r.queued_s for r in answered)
        found[f"{tenant}_attainment"] = met / len(mine) if mine else float("nan")
        found[f"{tenant}_requests"] = float(len(mine))
        found[f"{tenant}_served_tokens"] = float(sum(_served(r) for r in answered))
        found[f"{tenant}_wait_p50_s"] = percentile(waits, 50) or 0.0
        found[f"{tenant}_wait_p95_s"] = percentile(waits, 95) or 0.0
    answered = [r for r in records if r.outcome == "ok"]
    prompt = sum(r.prompt_tokens for r in answered)
    found["cached_share"] = sum(r.cached_tokens for r in answered) / prompt if prompt else 0.0
    found["answered"] = float(len(answered))
    found["met"] = float(sum(record_meets_slo(r, scenario.classes[r.slo_class]) for r in records))
    found["output_tokens"] = float(sum(r.output_tokens for r in answered))
    return found


def _served(record: LoadRecord) -> int:
    return max(0, record.prompt_tokens - record.cached_tokens) + record.output_tokens


def offline(name: str, seed: int) -> Measures:
    scenario = variant(name)
    result = Simulator(scenario, scenario.plan(seed), {"name": POLICY}, seed=seed).run()
    return measure_tenants(result.records, scenario)


def live(name: str, seed: int) -> Measures:
    from loadtests.live import LiveOptions, run_live  # Locust is an optional extra

    scenario = variant(name)
    with tempfile.TemporaryDirectory() as out:
        run = run_live(scenario, Path(out), LiveOptions(policy=POLICY, seed=seed))
    return measure_tenants(run.records, scenario)


def table(rows: dict[str, Measures], live_run: bool) -> str:
    names = [n for n in next(iter(rows.values())) if not (live_run and "_wait_" in n)]
    lines = ["| variant | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
    for label, found in rows.items():
        cells = [
            f"{found[n]:.3f}" if n.endswith(("_s", "share", "attainment")) else f"{found[n]:.0f}"
            for n in names
        ]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--live", action="store_true", help="run live instead of offline")
    args = parser.parse_args(argv)
    run: Callable[[str, int], Measures] = live if args.live else offline
    rows: dict[str, Measures] = {}
    for name in VARIANTS:
        each = [run(name, seed) for seed in args.seeds]
        rows[name] = {key: statistics.fmean(m[key] for m in each) for key in each[0]}
    driver = "live" if args.live else "offline"
    print(f"noisy_neighbour, {driver}, {POLICY}, mean over seeds {args.seeds}")
    print(table(rows, args.live))


if __name__ == "__main__":
    main()
