"""Load-test scenarios, the offline simulator and the SLO report they share.

scenario.py, scenarios.py   what a run is: fleet, classes, tenants, traffic, faults, checks
workload.py, trace.py       planned requests: trace-shaped lengths, rate shapes, trace files
simulator.py                virtual-time replay through gateway_model.py (the gateway's
                            decision pipeline and state, wired to a virtual clock) and
                            members.py (the engine and provider models)
records.py, report.py       one record per request -> per-class and per-tenant metrics
render.py, charts.py        markdown, JSON and PNG; runs.py writes a run's files
simulate_command.py         `slo-gateway simulate`; its live twin `loadtest` is loadtests/
                            command.py, which may import this package (never the reverse)
"""
