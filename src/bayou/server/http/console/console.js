// bayou console: a dependency-free front end on the admin API (/api/v1) and /metrics.
// Pages are hash routes (#/, #/topics, #/topics/NAME, #/groups, #/groups/NAME, #/cluster); each
// renders into #page, and timers it starts stop when the page changes.
"use strict";

const API = "/api/v1";
const POLL_MS = 2000;
const CHART_POINTS = 60;
let timers = [];
let renderSeq = 0;

// -- small helpers ---------------------------------------------------------------------------

function h(tag, props, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(props || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") el.className = v;
    else if (k === "text") el.textContent = v;
    else if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (k === "dataset") Object.assign(el.dataset, v);
    else if (k === "value") el.value = v;
    else el.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

async function api(method, path, body) {
  const init = { method, headers: { "Accept": "application/json" } };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  let resp;
  try {
    resp = await fetch(API + path, init);
  } catch (e) {
    throw new ApiError(0, "NETWORK", "cannot reach the broker (" + e.message + ")");
  }
  let doc = null;
  try { doc = await resp.json(); } catch (e) { doc = null; }
  if (!resp.ok) {
    const err = doc && doc.error ? doc.error : { code: "HTTP_" + resp.status, message: resp.statusText };
    throw new ApiError(resp.status, err.code, err.message);
  }
  return doc;
}

function describeError(e) {
  if (e instanceof ApiError) {
    if (e.status === 401) return "Sign-in needed: this broker asks for credentials (an Iggy user). " + e.message;
    if (e.status === 403) return "Not allowed: " + e.message;
    return e.message + (e.code ? " (" + e.code + ")" : "");
  }
  return String(e && e.message ? e.message : e);
}

function showError(e) {
  const box = document.getElementById("error");
  box.textContent = describeError(e);
  box.hidden = false;
}

function clearError() {
  const box = document.getElementById("error");
  box.hidden = true;
  box.textContent = "";
}

function fmtNum(n) {
  return n === null || n === undefined ? "\u2013" : Number(n).toLocaleString("en-US");
}

function fmtBytes(n) {
  if (n === null || n === undefined) return "\u2013";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  let v = n;
  while (v >= 1024 && i < units.length - 1) { v /= 1024; i++; }
  return (i === 0 ? v : v.toFixed(1)) + " " + units[i];
}

function fmtRate(n) {
  if (n >= 1e6) return (n / 1e6).toFixed(2) + "M";
  if (n >= 1e3) return (n / 1e3).toFixed(1) + "k";
  return n.toFixed(n >= 10 ? 0 : 1);
}

function fmtTime(ms) {
  if (!ms && ms !== 0) return "\u2013";
  const d = new Date(ms);
  const pad = (x, n = 2) => String(x).padStart(n, "0");
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:` +
    `${pad(d.getMinutes())}:${pad(d.getSeconds())}.${pad(d.getMilliseconds(), 3)}`;
}

function preview(v) {
  if (v === null || v === undefined) return "";
  return typeof v === "string" ? v : JSON.stringify(v);
}

function card(label, value, opts) {
  const o = opts || {};
  const word = typeof value === "string" && /[a-z]/.test(value);
  return h("div", { class: "card" + (o.tone ? " " + o.tone : ""), id: o.id },
    h("div", { class: "label", text: label }), h("div", { class: "value" + (word ? " word" : ""), text: value }));
}

function table(headers, rows, empty, opts) {
  const o = opts || {};
  const head = h("tr", {}, headers.map((x) => h("th", { class: x.num ? "num" : "", text: x.label || x })));
  const body = rows.length
    ? rows
    : [h("tr", {}, h("td", { class: "empty", colspan: headers.length, text: empty }))];
  return h("table", { id: o.id, class: o.class }, h("thead", {}, head), h("tbody", {}, body));
}

function badge(text, tone) {
  return h("span", { class: "badge" + (tone ? " " + tone : ""), text });
}

function every(ms, fn) {
  const seq = renderSeq;
  const id = setInterval(() => { if (seq === renderSeq) fn(); }, ms);
  timers.push(id);
}

function enc(s) { return encodeURIComponent(s); }

// A topic's or group's page header: where it is, its name, and a delete button (confirmed).
function pageHeader(kind, name, listLabel, question) {
  const list = `#/${kind}s`;
  const del = h("button", { type: "button", class: "danger", id: `delete-${kind}`, text: `Delete ${kind}`, onclick: async () => {
    if (!window.confirm(question)) return;
    try { await api("DELETE", `/${kind}s/${enc(name)}`); go(list); } catch (e) { showError(e); }
  } });
  return [h("div", { class: "crumbs" }, h("a", { href: list, text: listLabel }), " / ", name),
    h("div", { style: "display:flex;justify-content:space-between;align-items:center" }, h("h1", { id: `${kind}-name`, text: name }), del)];
}

// -- /metrics ------------------------------------------------------------------------------

async function scrapeTotals() {
  const resp = await fetch("/metrics", { headers: { "Accept": "text/plain" } });
  if (!resp.ok) throw new ApiError(resp.status, "METRICS", "/metrics answered " + resp.status);
  const text = await resp.text();
  const totals = { recordsIn: 0, recordsOut: 0, bytesIn: 0, bytesOut: 0 };
  const names = {
    bayou_topic_records_in_total: "recordsIn", bayou_topic_records_out_total: "recordsOut",
    bayou_topic_bytes_in_total: "bytesIn", bayou_topic_bytes_out_total: "bytesOut",
  };
  for (const line of text.split("\n")) {
    if (!line || line[0] === "#") continue;
    const brace = line.indexOf("{");
    const space = line.lastIndexOf(" ");
    const name = brace >= 0 ? line.slice(0, brace) : line.slice(0, space);
    const key = names[name];
    if (key) totals[key] += Number(line.slice(space + 1));
  }
  return totals;
}

// The smallest of 1, 2, 5 times a power of ten that is at least n (the chart's top line).
function niceCeil(n) {
  const p = Math.pow(10, Math.floor(Math.log10(n)));
  for (const m of [1, 2, 5, 10]) if (m * p >= n) return m * p;
  return 10 * p;
}

// The live chart: two series on a canvas, drawn by hand (no chart library).
function drawChart(canvas, series) {
  const dpr = window.devicePixelRatio || 1;
  const w = canvas.clientWidth;
  const hgt = canvas.clientHeight;
  canvas.width = w * dpr;
  canvas.height = hgt * dpr;
  const ctx = canvas.getContext("2d");
  ctx.scale(dpr, dpr);
  ctx.clearRect(0, 0, w, hgt);
  const left = 54, right = 10, top = 10, bottom = 22;
  const max = Math.max(1, ...series.flatMap((s) => s.points));
  const niceMax = niceCeil(max);
  ctx.font = "11px system-ui, sans-serif";
  ctx.fillStyle = "#6b7385";
  ctx.strokeStyle = "#e1e4ea";
  ctx.lineWidth = 1;
  for (let i = 0; i <= 4; i++) {
    const y = top + (hgt - top - bottom) * (1 - i / 4);
    ctx.beginPath(); ctx.moveTo(left, y + 0.5); ctx.lineTo(w - right, y + 0.5); ctx.stroke();
    ctx.fillText(fmtRate(niceMax * i / 4) + "/s", 4, y + 4);
  }
  ctx.fillText(`last ${Math.round(CHART_POINTS * POLL_MS / 1000)} s`, left, hgt - 6);
  ctx.fillText("now", w - right - 22, hgt - 6);
  for (const s of series) {
    if (s.points.length < 2) continue;
    ctx.strokeStyle = s.color;
    ctx.lineWidth = 2;
    ctx.beginPath();
    s.points.forEach((v, i) => {
      const x = left + (w - left - right) * (i + CHART_POINTS - s.points.length) / (CHART_POINTS - 1);
      const y = top + (hgt - top - bottom) * (1 - v / niceMax);
      if (i === 0) ctx.moveTo(x, y); else ctx.lineTo(x, y);
    });
    ctx.stroke();
  }
  canvas.dataset.points = String(series[0].points.length);
  canvas.dataset.max = String(max);
}

// -- pages ---------------------------------------------------------------------------------

async function overview(root) {
  const [cluster, topics] = await Promise.all([api("GET", "/cluster"), api("GET", "/topics")]);
  const under = cluster.under_replicated_partitions;
  const cardsEl = h("div", { class: "cards", id: "overview-cards" },
    card("Brokers", fmtNum(cluster.brokers.length), { id: "card-brokers" }),
    card("Topics", fmtNum(topics.topics.length), { id: "card-topics" }),
    card("Partitions", fmtNum(cluster.partitions), { id: "card-partitions" }),
    card("Under-replicated", fmtNum(under), { id: "card-under", tone: under ? "warn" : "" }),
    card("Offline", fmtNum(cluster.offline_partitions), { id: "card-offline", tone: cluster.offline_partitions ? "bad" : "" }),
    card("Records in", "\u2013", { id: "card-in" }),
    card("Records out", "\u2013", { id: "card-out" }));
  const canvas = h("canvas", { id: "throughput", dataset: { points: "0" } });
  const note = h("p", { class: "muted", id: "chart-note", text: "Sampling /metrics every 2 s\u2026" });
  const rows = topics.topics.map((t) => h("tr", { class: "clickable", onclick: () => go("#/topics/" + enc(t.name)) },
    h("td", {}, h("a", { href: "#/topics/" + enc(t.name), text: t.name })),
    h("td", { class: "num", text: fmtNum(t.partitions) }), h("td", { class: "num", text: fmtNum(t.records) }),
    h("td", { class: "num", text: fmtBytes(t.size_bytes) }),
    h("td", {}, t.under_replicated_partitions ? badge(t.under_replicated_partitions + " under-replicated", "warn") : badge("healthy", "good"))));
  root.replaceChildren(
    h("h1", { text: "Overview" }),
    h("p", { class: "sub", text: `${cluster.mode === "cluster" ? "Cluster" : "Single broker"} \u00b7 broker ${cluster.broker_id}` +
      (cluster.controller !== null ? ` \u00b7 controller ${cluster.controller}` : " \u00b7 no controller") }),
    cardsEl,
    h("div", { class: "panel" }, h("h2", { text: "Throughput (records per second)" }), canvas,
      h("div", { class: "chart-legend" }, h("span", {}, h("i", { style: "background:var(--in)" }), "in (produced)"),
        h("span", {}, h("i", { style: "background:var(--out)" }), "out (consumed)")), note),
    h("div", { class: "panel" }, h("h2", { text: "Topics" }),
      table(["Topic", { label: "Partitions", num: true }, { label: "Records", num: true }, { label: "Size", num: true }, "Health"],
        rows, "No topics yet. Create one on the Topics page, or produce with any client.", { id: "overview-topics" })));
  const series = [{ color: "#1f6feb", points: [] }, { color: "#1a9e75", points: [] }];
  let last = null;
  const sample = async () => {
    try {
      const t = await scrapeTotals();
      const now = performance.now();
      document.querySelector("#card-in .value").textContent = fmtNum(t.recordsIn);
      document.querySelector("#card-out .value").textContent = fmtNum(t.recordsOut);
      if (last) {
        const secs = Math.max(0.001, (now - last.at) / 1000);
        series[0].points.push(Math.max(0, (t.recordsIn - last.t.recordsIn) / secs));
        series[1].points.push(Math.max(0, (t.recordsOut - last.t.recordsOut) / secs));
        for (const s of series) if (s.points.length > CHART_POINTS) s.points.shift();
        const inNow = series[0].points[series[0].points.length - 1];
        const outNow = series[1].points[series[1].points.length - 1];
        note.textContent = `Now: ${fmtRate(inNow)} in/s, ${fmtRate(outNow)} out/s \u00b7 ` +
          `${fmtBytes(t.bytesIn)} in, ${fmtBytes(t.bytesOut)} out since start`;
      }
      last = { t, at: now };
      drawChart(canvas, series);
    } catch (e) {
      note.textContent = "Throughput unavailable: " + describeError(e);
    }
  };
  await sample();
  every(POLL_MS, sample);
}

async function topicsPage(root) {
  const doc = await api("GET", "/topics");
  const msg = h("div", { id: "create-result" });
  const name = h("input", { id: "new-topic-name", placeholder: "orders", required: true });
  const parts = h("input", { id: "new-topic-partitions", type: "number", min: "1", value: "1", style: "width:90px" });
  const form = h("form", { class: "inline", id: "create-topic", onsubmit: async (ev) => {
    ev.preventDefault();
    msg.replaceChildren();
    try {
      await api("POST", "/topics", { name: name.value.trim(), partitions: Number(parts.value) });
      go("#/topics/" + enc(name.value.trim()));
    } catch (e) {
      msg.replaceChildren(h("div", { class: "banner error", text: describeError(e) }));
    }
  } }, h("label", { class: "field" }, "Name", name), h("label", { class: "field" }, "Partitions", parts),
  h("button", { type: "submit", text: "Create topic" }));
  const rows = doc.topics.map((t) => h("tr", { class: "clickable", onclick: () => go("#/topics/" + enc(t.name)) },
    h("td", {}, h("a", { href: "#/topics/" + enc(t.name), text: t.name })),
    h("td", { class: "num", text: fmtNum(t.partitions) }), h("td", { class: "num", text: fmtNum(t.replication_factor) }),
    h("td", { class: "num", text: fmtNum(t.records) }), h("td", { class: "num", text: fmtBytes(t.size_bytes) }),
    h("td", {}, t.under_replicated_partitions ? badge(t.under_replicated_partitions + " under-replicated", "warn") : badge("healthy", "good"))));
  root.replaceChildren(h("h1", { text: "Topics" }),
    h("p", { class: "sub", text: `${doc.topics.length} topics, written by any protocol (V1, Cursus, Iggy, TANK)` }),
    h("div", { class: "panel" }, table(["Topic", { label: "Partitions", num: true }, { label: "Replicas", num: true },
      { label: "Records", num: true }, { label: "Size", num: true }, "Health"], rows,
    "No topics yet. Create the first one below.", { id: "topics-table" })),
    h("div", { class: "panel" }, h("h2", { text: "Create a topic" }), form, msg));
}

function recordDetail(rec, partition) {
  const value = rec.value_format === "json" ? JSON.stringify(rec.value, null, 2) : preview(rec.value);
  const headers = rec.headers.map((x) => h("tr", {}, h("td", { class: "mono", text: x.key }), h("td", { class: "mono", text: preview(x.value) })));
  return h("div", { id: "record-detail" },
    h("h2", { text: `Record ${rec.offset}` }),
    h("table", { class: "kv" }, h("tbody", {},
      h("tr", {}, h("td", { text: "Partition" }), h("td", { text: partition })),
      h("tr", {}, h("td", { text: "Offset" }), h("td", { text: rec.offset })),
      h("tr", {}, h("td", { text: "Timestamp" }), h("td", { text: `${fmtTime(rec.timestamp)} (${rec.timestamp})` })),
      h("tr", {}, h("td", { text: "Size" }), h("td", { text: fmtBytes(rec.size) })))),
    h("h2", { text: "Key" + (rec.key_format ? ` (${rec.key_format})` : "") }),
    h("pre", { id: "detail-key", text: rec.key === null ? "(no key)" : preview(rec.key) }),
    h("h2", { text: `Value (${rec.value_format})` }),
    h("pre", { id: "detail-value", text: value }),
    h("h2", { text: "Headers" }),
    table(["Name", "Value"], headers, "No headers", { id: "detail-headers" }));
}

async function topicPage(root, name) {
  const t = await api("GET", "/topics/" + enc(name));
  const records = t.partitions.reduce((n, p) => n + Math.max(0, p.high_watermark - p.log_start_offset), 0);
  const size = t.partitions.reduce((n, p) => n + p.size_bytes, 0);
  const partRows = t.partitions.map((p) => h("tr", {},
    h("td", { class: "num", text: p.partition }), h("td", { class: "num", text: p.leader < 0 ? "none" : p.leader }),
    h("td", { text: p.replicas.join(", ") }), h("td", { text: p.isr.join(", ") }),
    h("td", { class: "num", text: fmtNum(p.log_start_offset) }), h("td", { class: "num", text: fmtNum(p.log_end_offset) }),
    h("td", { class: "num", text: fmtNum(p.high_watermark) }), h("td", { class: "num", text: fmtBytes(p.size_bytes) }),
    h("td", { class: "num", text: p.segments }),
    h("td", {}, p.offline ? badge("offline", "bad") : p.leader < 0 ? badge("no leader", "bad") : p.under_replicated ? badge("under-replicated", "warn") : badge("in sync", "good"))));
  const cfgRows = Object.entries(t.config).map(([k, v]) => h("tr", {}, h("td", { class: "mono", text: k }), h("td", { class: "mono", text: v })));
  const cfgKey = h("input", { id: "config-key", placeholder: "retention.ms" });
  const cfgVal = h("input", { id: "config-value", placeholder: "value (empty: remove)" });
  const cfgMsg = h("div", {});
  const cfgForm = h("form", { class: "inline", id: "config-form", onsubmit: async (ev) => {
    ev.preventDefault();
    try {
      await api("PATCH", `/topics/${enc(name)}/config`, { [cfgKey.value.trim()]: cfgVal.value === "" ? null : cfgVal.value });
      render();
    } catch (e) { cfgMsg.replaceChildren(h("div", { class: "banner error", text: describeError(e) })); }
  } }, h("label", { class: "field" }, "Key", cfgKey), h("label", { class: "field" }, "Value", cfgVal),
  h("button", { type: "submit", class: "secondary", text: "Set" }));

  // message browser
  const partOptions = () => t.partitions.map((p) => h("option", { value: String(p.partition), text: `partition ${p.partition}` }));
  const bPart = h("select", { id: "browse-partition" }, partOptions());
  const bSeek = h("select", { id: "browse-seek" }, h("option", { value: "newest", text: "newest" }),
    h("option", { value: "offset", text: "from offset" }), h("option", { value: "timestamp", text: "from time" }));
  const bAt = h("input", { id: "browse-at", placeholder: "offset, or time (ms or 2026-11-26 10:00)", style: "width:260px" });
  const bLimit = h("select", { id: "browse-limit" }, ["20", "50", "100", "500"].map((n) => h("option", { value: n, text: n + " records" })));
  bLimit.value = "50";
  const bFormat = h("select", { id: "browse-format" }, ["text", "json", "hex"].map((f) => h("option", { value: f, text: f })));
  const bStatus = h("p", { class: "muted", id: "browse-status" });
  const bBody = h("div", { id: "browse-records" });
  const bDetail = h("div", { class: "panel", id: "browse-detail" }, h("p", { class: "muted", text: "Select a record to see its key, value and headers." }));
  let page = null;
  let loads = 0;
  const load = async (query) => {
    try { await loadPage(query); } finally { bBody.dataset.loads = String(++loads); }
  };
  const loadPage = async (query) => {
    const p = bPart.value;
    let q = `limit=${bLimit.value}&format=${bFormat.value}`;
    if (query) q += "&" + query;
    try {
      page = await api("GET", `/topics/${enc(name)}/partitions/${p}/messages?${q}`);
    } catch (e) {
      bBody.replaceChildren(h("div", { class: "banner error", text: describeError(e) }));
      return;
    }
    const rows = page.records.map((r) => {
      const tr = h("tr", { class: "clickable", dataset: { offset: String(r.offset) }, onclick: () => {
        bBody.querySelectorAll("tr.selected").forEach((x) => x.classList.remove("selected"));
        tr.classList.add("selected");
        bDetail.replaceChildren(recordDetail(r, p));
      } }, h("td", { class: "num", text: r.offset }), h("td", { text: fmtTime(r.timestamp) }),
      h("td", { class: "mono", text: r.key === null ? "" : preview(r.key) }), h("td", { class: "mono value", text: preview(r.value) }));
      return tr;
    });
    bBody.replaceChildren(table([{ label: "Offset", num: true }, "Timestamp", "Key", "Value"], rows,
      page.high_watermark === page.log_start_offset ? "This partition is empty. Produce a test message below."
        : "No records here: the position is past the last record.", { id: "records-table" }));
    const first = page.records.length ? page.records[0].offset : page.next_offset;
    bStatus.textContent = `Partition ${p}: offsets ${fmtNum(page.log_start_offset)} to ${fmtNum(page.high_watermark - 1)} \u00b7 ` +
      (page.records.length ? `showing ${first}\u2013${page.records[page.records.length - 1].offset}` : "showing nothing");
    prevBtn.disabled = first <= page.log_start_offset;
    nextBtn.disabled = page.next_offset >= page.high_watermark;
  };
  const seek = () => {
    const v = bAt.value.trim();
    if (bSeek.value === "offset") return load("offset=" + enc(v || "0"));
    if (bSeek.value === "timestamp") {
      const ms = /^\d+$/.test(v) ? Number(v) : Date.parse(v.replace(" ", "T"));
      if (Number.isNaN(ms)) { bBody.replaceChildren(h("div", { class: "banner error", text: `Not a time: ${v}` })); return undefined; }
      return load("timestamp=" + ms);
    }
    return load("");
  };
  const prevBtn = h("button", { type: "button", class: "secondary", id: "browse-prev", text: "\u2190 Older", onclick: () => {
    const first = page && page.records.length ? page.records[0].offset : page.next_offset;
    load("offset=" + Math.max(page.log_start_offset, first - Number(bLimit.value)));
  } });
  const nextBtn = h("button", { type: "button", class: "secondary", id: "browse-next", text: "Newer \u2192", onclick: () => load("offset=" + page.next_offset) });
  const browseForm = h("form", { class: "toolbar", id: "browse-form", onsubmit: (ev) => { ev.preventDefault(); seek(); } },
    h("label", { class: "field" }, "Partition", bPart), h("label", { class: "field" }, "Start", bSeek),
    h("label", { class: "field" }, "Offset / time", bAt), h("label", { class: "field" }, "Show", bLimit),
    h("label", { class: "field" }, "Render as", bFormat), h("button", { type: "submit", id: "browse-go", text: "Go" }), prevBtn, nextBtn);

  // produce a test message
  const pPart = h("select", { id: "produce-partition" }, partOptions());
  const pKey = h("input", { id: "produce-key", placeholder: "(none)" });
  const pValue = h("textarea", { id: "produce-value", placeholder: '{"hello": "bayou"}' });
  const pHeaders = h("textarea", { id: "produce-headers", placeholder: "one per line: name: value", style: "min-height:40px" });
  const pMsg = h("div", { id: "produce-result" });
  const produceForm = h("form", { id: "produce-form", onsubmit: async (ev) => {
    ev.preventDefault();
    const headers = {};
    for (const line of pHeaders.value.split("\n")) {
      const i = line.indexOf(":");
      if (line.trim() && i > 0) headers[line.slice(0, i).trim()] = line.slice(i + 1).trim();
    }
    const body = { value: pValue.value, headers };
    if (pKey.value !== "") body.key = pKey.value;
    try {
      const r = await api("POST", `/topics/${enc(name)}/partitions/${pPart.value}/messages`, body);
      pMsg.replaceChildren(h("div", { class: "banner ok", text: `Sent to partition ${r.partition} at offset ${r.offset}.` }));
      bPart.value = pPart.value;
      bSeek.value = "newest";
      await load("");
    } catch (e) { pMsg.replaceChildren(h("div", { class: "banner error", text: describeError(e) })); }
  } }, h("div", { class: "toolbar" }, h("label", { class: "field" }, "Partition", pPart), h("label", { class: "field" }, "Key", pKey)),
  h("label", { class: "field", style: "margin-top:8px" }, "Value", pValue), h("label", { class: "field" }, "Headers", pHeaders),
  h("div", { style: "margin-top:8px" }, h("button", { type: "submit", id: "produce-send", text: "Produce" })), pMsg);

  root.replaceChildren(
    ...pageHeader("topic", name, "Topics", `Delete topic ${name} and all its records?`),
    h("p", { class: "sub", text: `${t.partitions.length} partitions \u00b7 replication factor ${t.replication_factor}` }),
    h("div", { class: "cards" }, card("Partitions", fmtNum(t.partitions.length), { id: "card-topic-partitions" }),
      card("Records", fmtNum(records), { id: "card-topic-records" }), card("Size", fmtBytes(size), { id: "card-topic-size" }),
      card("Replicas", fmtNum(t.replication_factor))),
    h("div", { class: "panel" }, h("h2", { text: "Partitions" }),
      table([{ label: "#", num: true }, { label: "Leader", num: true }, "Replicas", "ISR", { label: "Start", num: true },
        { label: "End", num: true }, { label: "HW", num: true }, { label: "Size", num: true }, { label: "Segments", num: true }, "Status"],
      partRows, "No partitions", { id: "partitions-table" })),
    h("div", { class: "split" },
      h("div", { class: "panel" }, h("h2", { text: "Messages" }), browseForm, bStatus, bBody),
      bDetail),
    h("div", { class: "grid2" },
      h("div", { class: "panel" }, h("h2", { text: "Produce a test message" }), produceForm),
      h("div", { class: "panel" }, h("h2", { text: "Configuration" }),
        table(["Key", "Value"], cfgRows, "No overrides: every setting is the broker's default.", { id: "config-table" }),
        h("div", { style: "margin-top:10px" }, cfgForm), cfgMsg)));
  await load("");
}

async function groupsPage(root) {
  const doc = await api("GET", "/groups");
  const rows = doc.groups.map((g) => h("tr", { class: "clickable", onclick: () => go("#/groups/" + enc(g.name)) },
    h("td", {}, h("a", { href: "#/groups/" + enc(g.name), text: g.name })), h("td", {}, badge(g.state, g.members ? "good" : "")),
    h("td", { text: g.protocol || "\u2013" }), h("td", { text: g.topics.join(", ") }),
    h("td", { class: "num", text: fmtNum(g.members) }), h("td", { class: "num", text: fmtNum(g.lag) })));
  root.replaceChildren(h("h1", { text: "Consumer groups" }),
    h("p", { class: "sub", text: "Every group or consumer that committed offsets, whichever protocol it used." }),
    h("div", { class: "panel" }, table(["Group", "State", "Protocol", "Topics", { label: "Members", num: true }, { label: "Lag", num: true }],
      rows, "No consumer groups yet: they appear when a consumer joins a group or commits an offset.", { id: "groups-table" })));
}

// Lag per partition as horizontal bars (inline SVG).
function lagChart(parts) {
  const ns = "http://www.w3.org/2000/svg";
  const rowH = 24;
  const width = 520;
  const labelW = 110;
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("id", "lag-chart");
  svg.setAttribute("width", "100%");
  svg.setAttribute("viewBox", `0 0 ${width} ${Math.max(1, parts.length) * rowH + 4}`);
  const max = Math.max(1, ...parts.map((p) => p.lag || 0));
  parts.forEach((p, i) => {
    const y = i * rowH + 2;
    const label = document.createElementNS(ns, "text");
    label.setAttribute("x", "0"); label.setAttribute("y", String(y + 16));
    label.setAttribute("font-size", "12"); label.setAttribute("fill", "#6b7385");
    label.textContent = `${p.topic}/${p.partition}`;
    const bar = document.createElementNS(ns, "rect");
    const w = p.lag ? Math.max(2, (width - labelW - 70) * p.lag / max) : 0;
    bar.setAttribute("x", String(labelW)); bar.setAttribute("y", String(y + 4));
    bar.setAttribute("width", String(w)); bar.setAttribute("height", "14"); bar.setAttribute("rx", "2");
    bar.setAttribute("fill", p.lag ? "#e08a1e" : "#1a9e75");
    bar.dataset.lag = String(p.lag === null ? "" : p.lag);
    const val = document.createElementNS(ns, "text");
    val.setAttribute("x", String(labelW + w + 6)); val.setAttribute("y", String(y + 16));
    val.setAttribute("font-size", "12"); val.setAttribute("fill", "#1d2330");
    val.textContent = p.lag === null ? "no offset" : fmtNum(p.lag);
    svg.append(label, bar, val);
  });
  return svg;
}

async function groupPage(root, name) {
  const g = await api("GET", "/groups/" + enc(name));
  const memberRows = g.members.map((m) => h("tr", {}, h("td", { class: "mono", text: m.id }),
    h("td", { text: m.partitions.join(", ") || "none" }), h("td", { text: fmtTime(m.last_seen_ms) })));
  const topics = [...new Set(g.partitions.map((p) => p.topic).concat(g.topic ? [g.topic] : []))];
  const rTopic = h("select", { id: "reset-topic" }, topics.map((x) => h("option", { value: x, text: x })));
  const rTo = h("select", { id: "reset-to" }, ["earliest", "latest", "offset", "timestamp"].map((x) => h("option", { value: x, text: x })));
  const rValue = h("input", { id: "reset-value", placeholder: "offset, or time (ms or 2026-11-26 10:00)", style: "width:250px" });
  const rResult = h("div", { id: "reset-result" });
  const submit = async (dryRun) => {
    const body = { topic: rTopic.value, to: rTo.value, dry_run: dryRun };
    const v = rValue.value.trim();
    if (rTo.value === "offset") body.value = Number(v);
    if (rTo.value === "timestamp") body.value = /^\d+$/.test(v) ? Number(v) : Date.parse(v.replace(" ", "T"));
    try {
      const r = await api("POST", `/groups/${enc(name)}/reset-offsets`, body);
      const rows = r.partitions.map((c) => h("tr", {}, h("td", { class: "num", text: c.partition }),
        h("td", { class: "num", text: fmtNum(c.before) }), h("td", { class: "num", text: fmtNum(c.after) })));
      rResult.replaceChildren(h("div", { class: "banner ok", text: dryRun ? "Preview: nothing was changed." : "Offsets reset." }),
        table([{ label: "Partition", num: true }, { label: "Before", num: true }, { label: "After", num: true }], rows, "No partitions", { id: "reset-table" }));
      if (!dryRun) await refreshTables();
    } catch (e) {
      rResult.replaceChildren(h("div", { class: "banner error", text: describeError(e) }));
    }
  };
  const partsPanel = h("div", { id: "group-partitions" });
  const refreshTables = async () => {
    const fresh = await api("GET", "/groups/" + enc(name));
    fillParts(fresh.partitions);
    document.querySelector("#card-group-lag .value").textContent = fmtNum(fresh.lag);
  };
  const fillParts = (parts) => partsPanel.replaceChildren(
    table(["Topic", { label: "Partition", num: true }, { label: "Committed", num: true }, { label: "High watermark", num: true },
      { label: "Lag", num: true }, "Member"], parts.map((p) => h("tr", {}, h("td", { text: p.topic }),
      h("td", { class: "num", text: p.partition }), h("td", { class: "num", text: fmtNum(p.committed_offset) }),
      h("td", { class: "num", text: fmtNum(p.high_watermark) }), h("td", { class: "num", text: fmtNum(p.lag) }),
      h("td", { class: "mono", text: p.member || "" }))), "No partitions", { id: "lag-table" }),
    h("h2", { style: "margin-top:16px", text: "Lag per partition" }), lagChart(parts));
  fillParts(g.partitions);
  root.replaceChildren(
    ...pageHeader("group", name, "Consumer groups", `Delete group ${name} and its committed offsets?`),
    h("p", { class: "sub", text: g.topic ? `${g.protocol} group on ${g.topic}, generation ${g.generation}, assignor ${g.assignor}` : "Committed offsets only (no membership kept)" }),
    h("div", { class: "cards" }, card("State", g.state, { id: "card-group-state" }), card("Members", fmtNum(g.members.length), { id: "card-group-members" }),
      card("Total lag", fmtNum(g.lag), { id: "card-group-lag", tone: g.lag ? "warn" : "" })),
    h("div", { class: "grid2" },
      h("div", { class: "panel" }, h("h2", { text: "Offsets and lag" }), partsPanel),
      h("div", {},
        h("div", { class: "panel" }, h("h2", { text: "Members" }),
          table(["Member", "Partitions", "Last seen"], memberRows, "No active members: offsets can be reset.", { id: "members-table" })),
        h("div", { class: "panel" }, h("h2", { text: "Reset offsets" }),
          h("p", { class: "muted", text: "Refused while the group has members: stop its consumers first." }),
          h("div", { class: "toolbar" }, h("label", { class: "field" }, "Topic", rTopic), h("label", { class: "field" }, "To", rTo),
            h("label", { class: "field" }, "Value", rValue)),
          h("div", { class: "toolbar", style: "margin-top:8px" },
            h("button", { type: "button", class: "secondary", id: "reset-preview", text: "Preview", onclick: () => submit(true) }),
            h("button", { type: "button", id: "reset-apply", text: "Reset offsets", onclick: () => submit(false) })),
          rResult))));
}

async function clusterPage(root) {
  const c = await api("GET", "/cluster");
  const topics = await api("GET", "/topics");
  const brokerRows = c.brokers.map((b) => h("tr", {}, h("td", { class: "num", text: b.id }), h("td", { text: b.host }),
    h("td", { class: "mono", text: Object.entries(b.endpoints).map(([k, v]) => `${k} ${v}`).join(" \u00b7 ") }),
    h("td", {}, b.id === c.controller ? badge("controller", "good") : null, " ", b.self ? badge("this broker") : null, " ",
      b.leaving ? badge("leaving", "warn") : null)));
  const details = await Promise.all(topics.topics.map((t) => api("GET", "/topics/" + enc(t.name)).catch(() => null)));
  const partRows = [];
  for (const t of details) {
    if (!t) continue;
    for (const p of t.partitions) {
      partRows.push(h("tr", {}, h("td", {}, h("a", { href: "#/topics/" + enc(t.name), text: t.name })), h("td", { class: "num", text: p.partition }),
        h("td", { class: "num", text: p.leader < 0 ? "none" : p.leader }), h("td", { text: p.replicas.join(", ") }),
        h("td", { text: p.isr.join(", ") }),
        h("td", {}, p.leader < 0 ? badge("offline", "bad") : p.under_replicated ? badge("under-replicated", "warn") : badge("in sync", "good"))));
    }
  }
  root.replaceChildren(h("h1", { text: "Cluster" }),
    h("p", { class: "sub", text: c.mode === "cluster" ? "Cluster mode, coordinated by ZooKeeper" : "A single broker (no ZooKeeper)" }),
    h("div", { class: "cards" }, card("Mode", c.mode, { id: "card-mode" }), card("This broker", String(c.broker_id), { id: "card-me" }),
      card("Controller", c.controller === null ? "none" : String(c.controller), { id: "card-controller" }),
      card("Brokers", fmtNum(c.brokers.length), { id: "card-cluster-brokers" }),
      card("Under-replicated", fmtNum(c.under_replicated_partitions), { tone: c.under_replicated_partitions ? "warn" : "" }),
      card("Offline", fmtNum(c.offline_partitions), { tone: c.offline_partitions ? "bad" : "" })),
    h("div", { class: "panel" }, h("h2", { text: "Brokers" }),
      table([{ label: "Id", num: true }, "Host", "Listeners", "Role"], brokerRows, "No brokers registered.", { id: "brokers-table" })),
    h("div", { class: "panel" }, h("h2", { text: "Partitions" }),
      table(["Topic", { label: "Partition", num: true }, { label: "Leader", num: true }, "Replicas", "ISR", "Status"], partRows,
        "No partitions yet.", { id: "cluster-partitions" })));
}

// -- routing -------------------------------------------------------------------------------

const ROUTES = [
  [/^#?\/?$/, "overview", overview],
  [/^#\/topics\/?$/, "topics", topicsPage],
  [/^#\/topics\/([^/]+)$/, "topics", topicPage],
  [/^#\/groups\/?$/, "groups", groupsPage],
  [/^#\/groups\/([^/]+)$/, "groups", groupPage],
  [/^#\/cluster\/?$/, "cluster", clusterPage],
];

function go(hash) {
  if (location.hash === hash) render(); else location.hash = hash;
}

async function render() {
  for (const id of timers) clearInterval(id);
  timers = [];
  const seq = ++renderSeq;
  clearError();
  const root = document.getElementById("page");
  const hash = location.hash || "#/";
  const route = ROUTES.find(([re]) => re.test(hash));
  document.querySelectorAll("#nav a").forEach((a) => a.classList.toggle("active", !!route && a.dataset.page === route[1]));
  if (!route) {
    root.replaceChildren(h("h1", { text: "Not found" }), h("p", { class: "sub" }, "No page here. ", h("a", { href: "#/", text: "Back to the overview" })));
    return;
  }
  const args = hash.match(route[0]).slice(1).map(decodeURIComponent);
  const holder = h("div", {}, h("p", { class: "muted", text: "Loading\u2026" }));
  root.replaceChildren(holder);
  try {
    await route[2](holder, ...args);
    if (seq === renderSeq) root.dataset.page = route[1];
  } catch (e) {
    if (seq !== renderSeq) return;
    holder.replaceChildren(h("h1", { text: "Could not load this page" }));
    showError(e);
  }
  document.body.dataset.rendered = String(seq);
}

async function footer() {
  try {
    const c = await api("GET", "/cluster");
    document.getElementById("nav-foot").textContent = `broker ${c.broker_id} \u00b7 ${c.mode}`;
  } catch (e) {
    document.getElementById("nav-foot").textContent = "";
  }
}

window.addEventListener("hashchange", render);
render();
footer();
