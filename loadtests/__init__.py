"""Live load tests: Locust against the gateway, scenarios from gateway.offline.scenarios."""
