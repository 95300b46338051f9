// Live refresh for the slo-gateway dashboard: poll the JSON document and rewrite the page.
// The server renders the first state (gateway/dashboard/page.py); the formats below must agree
// with its FORMATS. No dependencies, no build step.
(() => {
  "use strict";

  const POLL_MS = 1500;
  const NO_VALUE = "–";
  const SPARK = { w: 120, h: 30, top: 9 };
  const body = document.body;
  const live = document.getElementById("live");
  let polls = 0;

  const ms = (v) => { const x = v * 1e3; return x < 10 ? `${x.toFixed(1)} ms` : `${x.toFixed(0)} ms`; };
  const FORMATS = {
    text: String,
    num: (v) => (Number.isInteger(v) ? String(v) : v.toFixed(1)),
    ms,
    pct: (v) => `${(v * 100).toFixed(0)}%`,
    age: (v) => (v < 10 ? `${v.toFixed(1)} s` : `${v.toFixed(0)} s`),
    reasons: (v) => Object.entries(v).map(([k, n]) => `${k} ${n}`).join(" · ") || NO_VALUE,
    usd: (v) => (v < 1 ? `$${v.toFixed(4)}` : `$${v.toLocaleString("en-US", { minimumFractionDigits: 2, maximumFractionDigits: 2 })}`),
  };
  // page.py's short_id: a request id's end, where the gateway's own ids differ
  const ID_SHOWN = 12;
  const shortId = (id) => (id.length <= ID_SHOWN ? id : `…${id.slice(-ID_SHOWN)}`);
  const fmt = (v, kind) => (v === null || v === undefined ? NO_VALUE : FORMATS[kind](v));
  const get = (item, path) => path.split(".").reduce((v, k) => (v == null ? null : v[k]), item);

  function itemOf(doc, row) {
    const list = doc[row.dataset.list] || [];
    return list.find((x) => (x.id ?? x.name) === row.dataset.id);
  }

  function fill(doc) {
    for (const el of document.querySelectorAll("[data-k]")) {
      const row = el.closest("[data-list]");
      const item = row ? itemOf(doc, row) : doc;
      if (item === undefined) continue;
      const value = get(item, el.dataset.k);
      if (el.dataset.f === "meter") el.value = value ?? 0;
      else el.textContent = fmt(value, el.dataset.f || "text");
    }
  }

  function mark(doc) {
    for (const row of document.querySelectorAll("tr[data-list=endpoints]")) {
      const item = itemOf(doc, row);
      if (item) row.className = `health-${item.health}`;
    }
  }

  function points(at, values, top, now, span) {
    const start = now - span;
    const out = [];
    at.forEach((t, i) => {
      const v = values[i];
      if (v === null || t < start) return;
      const x = (SPARK.w * (t - start)) / span;
      const y = SPARK.h - 1 - (SPARK.h - 1 - SPARK.top) * (top ? v / top : 0);
      out.push(`${x.toFixed(1)},${y.toFixed(1)}`);
    });
    return out.join(" ");
  }

  function sparks(doc) {
    for (const svg of document.querySelectorAll("svg[data-spark]")) {
      const item = itemOf(doc, svg.closest("[data-list]"));
      if (!item) continue;
      const names = svg.dataset.spark.split(" ");
      const history = item.history;
      const top = Math.max(0, ...names.flatMap((n) => history[n].filter((v) => v !== null)));
      svg.querySelector("text").textContent = fmt(top || null, "ms");
      svg.querySelectorAll("polyline").forEach((line, i) => {
        line.setAttribute("points", points(history.at_s, history[names[i]], top, doc.at_s, doc.axis_s));
      });
    }
  }

  function decisions(doc) {
    const rows = doc.decisions.map((d) => {
      const tr = document.createElement("tr");
      if (d.at_risk) tr.className = "at-risk";
      const cells = [
        `${fmt(Math.max(0, doc.at_s - d.at_s), "age")} ago`,
        shortId(d.request_id),
        d.tenant,
        d.slo_class,
        d.ranking.length ? d.ranking[0] : NO_VALUE,
        d.explanation,
      ];
      for (const text of cells) {
        const td = document.createElement("td");
        td.textContent = text;
        tr.appendChild(td);
      }
      return tr;
    });
    document.getElementById("decisions").replaceChildren(...rows);
  }

  function render(doc) {
    if (doc.layout !== body.dataset.layout) {
      window.location.reload(); // endpoints, classes or tenants changed: take the new layout
      return;
    }
    fill(doc);
    mark(doc);
    sparks(doc);
    decisions(doc);
    polls += 1;
    body.dataset.polls = String(polls);
    live.className = "";
    live.textContent = `live · updated ${new Date(doc.at_s * 1000).toLocaleTimeString()}`;
  }

  function stale(message) {
    live.className = "stale";
    live.textContent = message;
  }

  async function poll() {
    try {
      const response = await fetch(body.dataset.source, {
        credentials: "same-origin",
        cache: "no-store",
        headers: { accept: "application/json" },
      });
      if (response.status === 401) {
        stale("signed out: reload the page to sign in again");
        return; // stop polling; a new session needs the key
      }
      if (!response.ok) throw new Error(`HTTP ${response.status}`);
      render(await response.json());
    } catch (error) {
      stale(`stale: ${error.message}; retrying`);
    }
    window.setTimeout(poll, POLL_MS);
  }

  poll();
})();
