"""`slo-gateway loadtest`: the simulated fleet and the gateway on loopback, Locust against them.

1. Plan the scenario's requests (the same plan the offline simulator replays).
2. Unless `url` is given, serve the scenario's fleet and a gateway configured for it (the same
   config the simulator uses, with the chosen policy) from one event loop in a thread.
3. Run Locust headless in a subprocess with `loadtests/locustfile.py`; it replays the plan,
   sends the scenario's fault patches at their times, and appends one record per request.
4. Read the engines' preemption counters, stop the servers, and summarize the records; a
   planned request without a record (Locust stopped first) counts as an error, `not finished`.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gateway.bench.api_events import Api
from gateway.offline.records import LoadRecord, read_records, unserved
from gateway.offline.report import RunFacts, summarize
from gateway.offline.runs import Run
from gateway.offline.scenario import Scenario
from gateway.sim.fleet import FleetConfig
from loadtests.plan import PLAN_ENV, Plan, TimedFault, calls, pools
from loadtests.stack import Stack

LOCUSTFILE = Path(__file__).with_name("locustfile.py")
REPO_ROOT = LOCUSTFILE.parent.parent
LOCUST_GRACE_S = 60.0  # startup and shutdown allowance beyond the scenario's own time


@dataclass(frozen=True, slots=True)
class LiveOptions:
    policy: str = "least_loaded"  # a registered policy's name, or the label of `config`
    config: Mapping[str, Any] | None = (
        None  # the gateway's policy section; None: `policy`'s defaults
    )
    url: str | None = None  # an external gateway: no fleet, no faults
    keys: Mapping[str, str] = field(default_factory=dict)  # tenant -> key, for `url`
    seed: int | None = None
    api: Api = "chat"  # chat, responses or messages: the API the users speak


def run_live(scenario: Scenario, out_dir: Path, options: LiveOptions) -> Run:
    out_dir.mkdir(parents=True, exist_ok=True)
    records_path = out_dir / "records.jsonl"
    records_path.unlink(missing_ok=True)
    if options.url is not None:
        plan = _plan(scenario, options, records_path, dict(options.keys), None)
        _locust(plan, out_dir, options.url)
        preemptions = None
    else:
        with Stack(scenario, options.config or options.policy) as stack:
            plan = _plan(scenario, options, records_path, scenario.tenant_keys(), stack.fleet)
            _locust(plan, out_dir, stack.url)
            preemptions = stack.preemptions()
    records = _complete(plan, read_records(records_path) if records_path.exists() else [])
    policy = options.policy if options.url is None else "external"
    facts = RunFacts(policy=policy, driver="live", preemptions=preemptions)
    return Run(summarize(scenario, records, facts), records)


def _plan(
    scenario: Scenario,
    options: LiveOptions,
    records_path: Path,
    keys: dict[str, str],
    fleet: FleetConfig | None,
) -> Plan:
    planned = calls(scenario.plan(options.seed))
    missing = sorted({c.tenant for c in planned} - set(keys))
    if missing:
        raise ValueError(f"no API key for tenants {missing}; pass --api-key TENANT=KEY")
    return Plan(
        scenario=scenario.name,
        model=scenario.model,
        api=options.api,
        keys=keys,
        calls=planned,
        faults=_faults(scenario, fleet),
        pools=pools(planned, scenario.max_users),
        records=str(records_path),
        duration_s=scenario.duration_s,
        drain_s=scenario.drain_s,
    )


def _faults(scenario: Scenario, fleet: FleetConfig | None) -> list[TimedFault]:
    if fleet is None:
        return []  # an external gateway's upstreams are not ours to break
    ports = {m.id: m.port for m in fleet.members()}
    return [
        TimedFault(at_s=f.at_s, url=f"http://127.0.0.1:{ports[f.member]}/sim/faults", patch=f.patch)
        for f in scenario.faults
    ]


def _locust(plan: Plan, out_dir: Path, url: str) -> None:
    plan_path = out_dir / "plan.json"
    plan.save(plan_path)
    env = os.environ | {
        PLAN_ENV: str(plan_path),
        "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    command = [
        sys.executable,
        "-m",
        "locust",
        "-f",
        str(LOCUSTFILE),
        "--headless",
        "--host",
        url,
        "--only-summary",
        "--loglevel",
        "WARNING",
        "--csv",
        str(out_dir / "locust"),
    ]
    timeout_s = plan.duration_s + plan.drain_s + LOCUST_GRACE_S
    with (out_dir / "locust.log").open("w") as log:
        # Locust's exit code reflects failed requests, which the report judges itself
        subprocess.run(
            command, env=env, stdout=log, stderr=subprocess.STDOUT, timeout=timeout_s, check=False
        )


def _complete(plan: Plan, records: list[LoadRecord]) -> list[LoadRecord]:
    seen = {r.request_id for r in records}
    missing = [
        unserved(str(c.index), c, 0, "unfinished") for c in plan.calls if str(c.index) not in seen
    ]
    return sorted(records + missing, key=lambda r: r.arrival_s)
