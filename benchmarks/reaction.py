"""How fast routing reacts: per-phase interactive attainment and the slowed engine's last request.

Run (offline, several seeds):   .venv/bin/python -m benchmarks.reaction --seeds 1 2 3
Whole answers (no streaming):   .venv/bin/python -m benchmarks.reaction --seeds 1 2 3 --whole
Read live runs' records:        .venv/bin/python -m benchmarks.reaction --records DIR/records.jsonl
Another tree (e.g. main):       PYTHONPATH=/path/to/tree .venv/bin/python benchmarks/reaction.py ...

The scenario is `reaction` (gateway/offline/reaction_scenarios.py), loaded from its file, so a
tree without it (main, before this change) is measured on the same workload. For each run:
    last_to_slowed_s  the last interactive request *sent* to the slowed engine after the slowdown,
                      minus the slowdown time (0 when none was sent after it)
    sent_after        how many interactive requests were sent to it after the slowdown
    last_routed_s     the same as last_to_slowed_s, leaving out `explore` decisions (slo_aware
                      sends 2% of requests to a cold endpoint, and the slowed one turns cold
                      when its statistics jump); explored: how many of those there were
                      (records before the `decision` field count none)
    attainment        per phase (`PHASES` of the scenario module): the share of interactive
                      requests arriving in the phase that succeeded and met every target
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from gateway.offline.records import LoadRecord, read_records
from gateway.offline.report import record_meets_slo
from gateway.offline.simulator import Simulator

COUNTS = ("last_to_slowed_s", "sent_after", "last_routed_s", "explored")
SCENARIO_FILE = Path(__file__).parent.parent / "gateway" / "offline" / "reaction_scenarios.py"


def scenario_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("reaction_scenarios", SCENARIO_FILE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def measure_reaction(records: Sequence[LoadRecord], module: ModuleType) -> dict[str, float]:
    scenario = module.reaction()
    target = scenario.classes["interactive"]
    interactive = [r for r in records if r.slo_class == "interactive"]
    after = [
        (r.start_s - module.SLOWDOWN_AT_S, getattr(r, "decision", "") == "explore")
        for r in interactive
        if r.endpoint == module.SLOWED and r.start_s >= module.SLOWDOWN_AT_S
    ]
    routed = [at for at, explored in after if not explored]
    found = {
        "last_to_slowed_s": max((at for at, _ in after), default=0.0),
        "sent_after": float(len(after)),
        "last_routed_s": max(routed, default=0.0),
        "explored": float(len(after) - len(routed)),
    }
    for phase, spans in module.PHASES.items():
        inside = [r for r in interactive if any(a <= r.arrival_s < b for a, b in spans)]
        met = sum(record_meets_slo(r, target) for r in inside)
        found[phase] = met / len(inside) if inside else float("nan")
    return found


def offline(seed: int, policy: str, module: ModuleType, stream: bool = True) -> dict[str, float]:
    scenario = module.reaction(stream)
    plan = scenario.plan(seed)
    result = Simulator(scenario, plan, {"name": policy}, seed=seed).run()
    return measure_reaction(result.records, module)


def table(rows: dict[str, dict[str, float]]) -> str:
    names = list(next(iter(rows.values())))
    lines = ["| run | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
    for run, row in rows.items():
        cells = [f"{row[n]:.2f}" if n in COUNTS else f"{row[n]:.1%}" for n in names]
        lines.append(f"| {run} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="*", default=[1, 2, 3])
    parser.add_argument("--policy", default="slo_aware")
    parser.add_argument("--records", type=Path, nargs="*", default=[])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--whole", action="store_true", help="offline: answers not streamed")
    args = parser.parse_args(argv)
    module = scenario_module()
    rows: dict[str, dict[str, float]] = {}
    if args.records:
        for path in args.records:
            rows[str(path)] = measure_reaction(list(read_records(path)), module)
    else:
        for seed in args.seeds:
            rows[f"seed {seed}"] = offline(seed, args.policy, module, not args.whole)
    if len(rows) > 1:
        names = next(iter(rows.values()))
        rows["mean"] = {k: statistics.fmean(r[k] for r in rows.values()) for k in names}
    out: Any = rows if args.json else table(rows)
    sys.stdout.write((json.dumps(out, indent=1) if args.json else out) + "\n")


if __name__ == "__main__":
    main()
