"""The dashboard on a live gateway in front of the simulated fleet: sign-in, the JSON document
checked against the store and the admin views, and the page in headless Chromium while load
runs, with one endpoint broken (screenshot: artifacts/dashboard.png).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from gateway.config.settings import Settings
from gateway.server.dashboard.routes import COOKIE
from tests.fixtures.gateway import (
    ADMIN_KEY,
    OTHER_TENANT_KEY,
    TENANT_KEY,
    admin_endpoints,
    chat_body,
    counter_sum,
    engine,
    fleet_gateway,
    member,
    provider,
    runtime_of,
    set_faults,
    tenants_with,
)
from tests.fixtures.servers import UvicornThread

pytestmark = pytest.mark.integration
ADMIN = {"authorization": f"Bearer {ADMIN_KEY}"}
ARTIFACT = Path(__file__).resolve().parents[2] / "artifacts" / "dashboard.png"
ENDPOINTS = ("vllm-a", "vllm-b", "hosted")


@dataclass
class Stack:
    gateway: UvicornThread
    members: dict[str, str]

    @property
    def url(self) -> str:
        return self.gateway.base_url


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    """Two engines and a hosted provider behind one gateway that samples every 0.5 s."""
    members = {
        "vllm-a": member(engine(), price={"output_per_1m": 0.2}),
        "vllm-b": member(engine(), price={"output_per_1m": 0.2}),
        "hosted": member(provider(), price={"input_per_1m": 0.5}),
    }
    with fleet_gateway(
        members,
        Settings(dashboard_sample_s=0.5),
        policy={"name": "slo_aware", "explore_fraction": 0.0},
        state={"health_interval_s": 0.5, "breaker_failures": 2, "breaker_cooldown_s": 120},
        tenants=tenants_with(zeta={"limits": {"requests_per_min": 8}}),  # so some of it is shed
    ) as (gateway, urls):
        yield Stack(gateway, urls)


@contextlib.contextmanager
def load(base_url: str, clients: int = 3) -> Iterator[None]:
    """A few closed-loop clients (acme streaming interactive, zeta batch) until the block ends."""
    stop = threading.Event()

    def client(index: int) -> None:
        key = OTHER_TENANT_KEY if index == 0 else TENANT_KEY
        body = chat_body("hello " * (40 + 30 * index), stream=index > 0, max_tokens=12)
        with httpx.Client(headers={"authorization": f"Bearer {key}"}, timeout=30) as http:
            while not stop.is_set():
                with contextlib.suppress(httpx.HTTPError):
                    http.post(base_url + "/v1/chat/completions", json=body)
                if index == 0:
                    stop.wait(0.3)  # zeta's limit sheds some of these

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(clients)]
    for thread in threads:
        thread.start()
    try:
        yield
    finally:
        stop.set()
        for thread in threads:
            thread.join(30)


def eventually(check: Callable[[], bool], timeout_s: float = 15.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


def board(base_url: str, **auth: Any) -> dict[str, Any]:
    response = httpx.get(base_url + "/admin/dashboard.json", **({"headers": ADMIN} | auth))
    response.raise_for_status()
    document: dict[str, Any] = response.json()
    return document


def test_sign_in_sets_a_session_cookie_that_never_holds_the_key(stack: Stack) -> None:
    url = stack.url + "/dashboard"
    assert httpx.get(url).status_code == 401
    assert 'type="password"' in httpx.get(url).text
    assert httpx.get(url, params={"key": "sk-wrong"}).status_code == 401
    tenant = {"authorization": f"Bearer {TENANT_KEY}"}
    assert httpx.get(stack.url + "/admin/dashboard.json", headers=tenant).status_code == 401

    in_the_address = httpx.get(url, params={"key": ADMIN_KEY})  # never used: it gets logged
    assert in_the_address.status_code == 401 and "set-cookie" not in in_the_address.headers
    signed = httpx.post(url, data={"key": ADMIN_KEY})
    assert signed.status_code == 303 and signed.headers["location"] == "dashboard"
    cookie = signed.headers["set-cookie"]
    assert ADMIN_KEY not in cookie
    for flag in ("HttpOnly", "SameSite=strict", "Path=/"):
        assert flag.lower() in cookie.lower()
    session = {COOKIE: signed.cookies[COOKIE]}

    page = httpx.get(url, cookies=session)
    assert page.status_code == 200 and "Endpoints" in page.text
    assert all(f'data-id="{eid}"' in page.text for eid in ENDPOINTS)  # complete without JS
    assert "<polyline" in page.text and '<meta http-equiv="refresh"' in page.text
    assert "script-src 'self'" in page.headers["content-security-policy"]
    assert httpx.get(stack.url + "/admin/dashboard.json", cookies=session).status_code == 200
    forged = {COOKIE: "9999999999." + session[COOKIE].partition(".")[2]}
    assert httpx.get(stack.url + "/admin/dashboard.json", cookies=forged).status_code == 401

    assert httpx.post(url, data={"key": "sk-wrong"}).status_code == 401
    assert httpx.get(url, headers=ADMIN).status_code == 200
    assert httpx.get(stack.url + "/dashboard/static/dashboard.js").status_code == 200
    assert httpx.get(stack.url + "/dashboard/static/secrets.txt").status_code == 404


def test_the_json_agrees_with_the_store_the_admin_views_and_the_counters(stack: Stack) -> None:
    with load(stack.url):
        eventually(lambda: len(board(stack.url)["decisions"]) >= 10)
    zeta_key = {"authorization": f"Bearer {OTHER_TENANT_KEY}"}
    body = chat_body("hi", max_tokens=1)
    statuses = [
        httpx.post(stack.url + "/v1/chat/completions", json=body, headers=zeta_key).status_code
        for _ in range(10)
    ]
    assert statuses.count(429) >= 2
    time.sleep(0.5)  # idle: every lease released, the shared view refreshed
    document = board(stack.url)
    admin = admin_endpoints(stack.url)
    runtime = runtime_of(stack.gateway)
    stored = asyncio.run(runtime.store.read(list(ENDPOINTS), now=time.time()))
    assert [e["id"] for e in document["endpoints"]] == list(ENDPOINTS)
    for entry in document["endpoints"]:
        eid = entry["id"]
        assert entry["phase"] == admin[eid]["phase"]
        assert entry["in_flight"] == admin[eid]["in_flight"] == stored[eid].in_flight == 0
        assert entry["breaker"]["phase"] == admin[eid]["breaker"]["phase"]
        assert entry["estimate"]["samples"] == stored[eid].latency.samples
        p95_s = stored[eid].latency.ttft_p95_s  # None for an endpoint nothing was sent to
        assert entry["estimate"]["ttft_p95_s"] == (p95_s and pytest.approx(p95_s, rel=0.05))
        assert entry["predicted"]["ttft_p95_s"] > 0
        assert len(entry["history"]["at_s"]) == len(entry["history"]["ttft_p95_s"]) >= 2

    decisions = httpx.get(stack.url + "/admin/decisions", headers=ADMIN).json()["decisions"]
    newest = [d["request_id"] for d in reversed(decisions)][: len(document["decisions"])]
    assert [d["request_id"] for d in document["decisions"]] == newest
    assert all(d["explanation"].startswith("slo_aware chose ") for d in document["decisions"])

    metrics = httpx.get(stack.url + "/metrics").text
    judged = {c["name"]: c["total"]["requests"] for c in document["classes"]}
    assert judged == {
        name: round(counter_sum(metrics, "slo_gateway_slo_total", slo_class=name))
        for name in ("interactive", "batch")
    }
    for entry in document["endpoints"]:  # its p95 coverage, from slo_gateway_p95_coverage
        eid, covered = entry["id"], entry["coverage"]
        judged = counter_sum(metrics, "slo_gateway_p95_coverage_total", endpoint=eid, signal="ttft")
        within = counter_sum(
            metrics, "slo_gateway_p95_coverage_total", endpoint=eid, signal="ttft", result="within"
        )
        assert covered.get("ttft_n", 0.0) == judged
        assert covered.get("ttft") == (within / judged if judged else None)
    assert any(entry["coverage"].get("ttft_n") for entry in document["endpoints"])
    zeta = next(t for t in document["tenants"] if t["name"] == "zeta")
    assert zeta["total"]["shed"]["tenant_rate_limited"] >= statuses.count(429)
    assert zeta["total"]["shed_total"] == round(
        counter_sum(metrics, "slo_gateway_shed_total", tenant="zeta")
    )
    batch = next(c for c in document["classes"] if c["name"] == "batch")
    assert batch["window"]["shed"] == zeta["window"]["shed"]  # zeta sends only batch
    for tenant in document["tenants"]:  # spend at the hosted endpoint's price, per 1k met
        total = tenant["total"]
        usd = counter_sum(metrics, "slo_gateway_usage_cost_usd_total", tenant=tenant["name"])
        assert total["spend_usd"] == pytest.approx(usd)
        assert total["cost_per_1k_met_usd"] == pytest.approx(1000 * usd / total["met"])
    assert any(t["total"]["spend_usd"] > 0 for t in document["tenants"])


# --- the page in a real browser --------------------------------------------------------------


def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if path := shutil.which(name):
            return path
    pytest.skip(
        "headless Chromium is not installed, so the dashboard browser test cannot run: "
        "install Debian's package (apt-get install -y chromium)"
    )


def browse(url: str, *action: str) -> str:
    """Open `url` in a fresh headless profile, let timers run 3 s of virtual time, then act."""
    with tempfile.TemporaryDirectory() as profile:
        command = [
            chromium(),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={profile}",
            "--window-size=1440,1000",
            "--virtual-time-budget=3000",
            *action,
            url,
        ]
        done = subprocess.run(command, capture_output=True, text=True, timeout=90, check=True)
        return done.stdout


class Rows(HTMLParser):
    """Table rows of the dumped DOM: (data-list, data-id) -> class and text."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: dict[tuple[str, str], dict[str, str]] = {}
        self.polls = 0
        self._current: dict[str, str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = {k: v or "" for k, v in attrs}
        if tag == "body":
            self.polls = int(found.get("data-polls", "0"))
        if tag == "tr" and "data-list" in found:
            self._current = {"class": found.get("class", ""), "text": ""}
            self.rows[(found["data-list"], found["data-id"])] = self._current

    def handle_endtag(self, tag: str) -> None:
        if tag == "tr":
            self._current = None

    def handle_data(self, data: str) -> None:
        if self._current is not None:
            self._current["text"] += data


def rendered(signed_in_url: str) -> Rows:
    rows = Rows()
    rows.feed(browse(f"{signed_in_url}/dashboard", "--dump-dom"))
    return rows


def with_admin_key(gateway_url: str) -> Starlette:
    """A loopback proxy that signs every GET in with the admin key as a Bearer header, for a
    headless browser that can neither send one nor fill the form (a key in the URL is refused)."""

    async def forward(request: Request) -> Response:
        async with httpx.AsyncClient() as client:
            answer = await client.get(gateway_url + request.url.path, headers=ADMIN)
        kind = answer.headers.get("content-type")
        csp = {"content-security-policy": answer.headers.get("content-security-policy", "")}
        return Response(answer.content, answer.status_code, headers=csp, media_type=kind)

    return Starlette(routes=[Route("/{path:path}", forward)])


def judged_in_page(rows: Rows, slo_class: str) -> int:
    """The "Since start" cell: '<attainment>% <n> req · <m> shed'."""
    match = re.search(r"(\d+) req ·", rows.rows[("classes", slo_class)]["text"])
    assert match is not None
    return int(match.group(1))


def test_the_page_shows_the_fleet_live_and_marks_the_broken_endpoint(stack: Stack) -> None:
    chromium()
    with load(stack.url), UvicornThread(with_admin_key(stack.url)) as signed_in:
        eventually(lambda: len(board(stack.url)["decisions"]) >= 5)
        set_faults(stack.members["vllm-b"], status_code=503)
        eventually(lambda: admin_endpoints(stack.url)["vllm-b"]["phase"] == "breaker_open")
        first = rendered(signed_in.base_url)
        time.sleep(1.5)
        second = rendered(signed_in.base_url)
        ARTIFACT.parent.mkdir(exist_ok=True)
        browse(f"{signed_in.base_url}/dashboard", f"--screenshot={ARTIFACT}")

    assert first.polls >= 1 and second.polls >= 1, "the script never rendered a poll"
    for page in (first, second):
        assert {eid for kind, eid in page.rows if kind == "endpoints"} == set(ENDPOINTS)
        assert {name for kind, name in page.rows if kind == "classes"} == {"interactive", "batch"}
        assert {name for kind, name in page.rows if kind == "tenants"} == {"acme", "zeta"}
        broken = page.rows[("endpoints", "vllm-b")]
        assert broken["class"] == "health-degraded" and "DEGRADED" in broken["text"]
        # ok, or a warning a loaded host earns it (a slowdown its step detector sees, a busy
        # batch, a late scrape: a dry run of .ci/run once saw health-warn): never degraded
        assert page.rows[("endpoints", "vllm-a")]["class"] in ("health-ok", "health-warn")
    assert judged_in_page(second, "interactive") > judged_in_page(first, "interactive")
    assert ARTIFACT.stat().st_size > 10_000


def test_each_decision_shows_its_own_request_id_and_each_class_what_it_missed_by() -> None:
    # interactive: a TPOT no stream meets; batch: a TTFT nothing meets (streamed), so its whole
    # answers miss by their end-to-end budget; zeta's batch requests past 2 a minute are shed
    classes = {
        "interactive": {"ttft_ms": 60000, "tpot_ms": 0.001, "priority": 10},
        "batch": {"ttft_ms": 0.001, "priority": 0, "sheddable": True},
    }
    limited = tenants_with(zeta={"limits": {"requests_per_min": 2}})
    with fleet_gateway({"e": engine()}, classes=classes, tenants=limited) as (gw, _):
        acme = {"authorization": f"Bearer {TENANT_KEY}"}
        zeta = {"authorization": f"Bearer {OTHER_TENANT_KEY}"}
        url = gw.base_url + "/v1/chat/completions"
        for _ in range(2):
            httpx.post(url, json=chat_body(stream=True, max_tokens=5), headers=acme)
            httpx.post(url, json=chat_body(max_tokens=5), headers=acme)  # 60 s: met
        for _ in range(4):  # two streamed (ttft), then two whole answers (e2e) or shed
            httpx.post(url, json=chat_body(stream=True, max_tokens=5), headers=zeta)
        for _ in range(3):
            httpx.post(url, json=chat_body(max_tokens=5), headers=acme | {"x-slo-class": "batch"})
        document = board(gw.base_url)
        page = httpx.get(gw.base_url + "/dashboard", headers=ADMIN).text
    by_class = {c["name"]: c["total"] for c in document["classes"]}
    assert by_class["interactive"]["missed_by"] == {
        "ttft": 0, "tpot": 2, "e2e": 0, "not_ok": 0, "shed": 0,
    }  # fmt: skip
    assert by_class["batch"]["missed_by"] == {
        "ttft": 2, "tpot": 0, "e2e": 3, "not_ok": 0, "shed": 2,
    }  # fmt: skip
    assert "ttft 2 · tpot 0 · e2e 3 · not_ok 0 · shed 2" in page
    ids = [d["request_id"] for d in document["decisions"]]
    assert len(ids) == 9 == len(set(ids))
    shown = re.findall(r"<td>…([0-9a-f]{12})</td>", page)
    assert shown == [i[-12:] for i in ids] and len(set(shown)) == len(shown)
