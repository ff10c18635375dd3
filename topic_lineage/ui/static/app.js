// Topic lineage page: talks to the JSON API next to it (api/...), draws with plain DOM + SVG.
// Every value from the server is inserted as text (textContent), never as HTML.
"use strict";

const BASE = document.querySelector('meta[name="tl-base"]').content || "./";
const SVG_NS = "http://www.w3.org/2000/svg";
const CHANGE_LABELS = {
  created: "created",
  attributes_changed: "attributes changed",
  renamed: "renamed",
  id_assigned: "ID assigned",
  reappeared: "REAPPEARED after deletion",
};

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "class") node.className = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function svg(tag, attrs, ...children) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [key, value] of Object.entries(attrs || {})) node.setAttribute(key, String(value));
  for (const child of children.flat()) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

class ApiError extends Error {
  constructor(status, detail) { super(detail); this.status = status; }
}

async function api(path, params) {
  const url = new URL(BASE + path, window.location.href);
  for (const [key, value] of Object.entries(params || {})) {
    if (value !== undefined && value !== null && value !== "") url.searchParams.set(key, value);
  }
  const response = await fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } });
  let body = null;
  try { body = await response.json(); } catch (e) { body = null; }
  if (!response.ok) {
    let detail = body && body.detail ? body.detail : response.statusText;
    if (typeof detail !== "string") detail = JSON.stringify(detail);
    if (response.status === 401 || response.status === 403) detail = "Not signed in to Airflow: " + detail;
    throw new ApiError(response.status, detail);
  }
  return body;
}

function fmt(ts) {
  if (!ts) return "";
  return ts.replace("T", " ").replace(/\.\d+Z$/, "Z").replace("Z", " UTC");
}

function day(ts) { return ts ? ts.slice(0, 10) : ""; }

// A time-axis label for ISO time `ts` on an axis spanning `spanMs`: the date for long spans;
// for spans under two days the time too (else every tick would read the same date), with
// seconds under ten minutes.
function axisLabel(ts, spanMs) {
  if (spanMs >= 2 * 86400e3) return day(ts);
  if (spanMs >= 600e3) return ts.slice(5, 10) + " " + ts.slice(11, 16);
  return ts.slice(11, 19);
}

function copyButton(text) {
  return el("button", {
    class: "copy", type: "button", title: "Copy " + text,
    onclick: async (event) => {
      const button = event.currentTarget;
      try {
        if (navigator.clipboard && window.isSecureContext) await navigator.clipboard.writeText(text);
        else {
          const area = el("textarea", { style: "position:fixed;opacity:0" }, text);
          document.body.append(area); area.select(); document.execCommand("copy"); area.remove();
        }
        button.textContent = "copied";
      } catch (e) { button.textContent = "copy failed"; }
      setTimeout(() => { button.textContent = "copy"; }, 1500);
    },
  }, "copy");
}

function idCell(id) {
  if (!id) return el("span", { class: "status" }, "no ID reported");
  return el("span", {}, el("code", { class: "topic-id" }, id), copyButton(id));
}

function setMessage(text, isError) {
  const box = document.getElementById("search-message");
  box.textContent = text || "";
  box.classList.toggle("error", !!isError);
}

// --- status and gate ------------------------------------------------------------------------
async function loadStatus() {
  const statusBox = document.getElementById("status");
  try {
    const status = await api("api/status");
    const counts = status.row_counts || {};
    statusBox.textContent = status.published_version
      ? `Published version ${status.published_version} · ${counts.topic_incarnations || 0} incarnation rows`
      : "No published version yet: run a build (topic-lineage build) to publish the tables.";
    renderGate(status.gate);
    renderForced(status.forced || []);
  } catch (error) {
    statusBox.textContent = error.message;
    statusBox.classList.add("error");
  }
}

function renderForced(forced) {
  // A version published past the gate (topic-lineage publish V --force --reason TEXT) says so.
  const old = document.getElementById("gate-forced");
  if (old) old.remove();
  if (!forced.length) return;
  const last = forced[forced.length - 1];
  document.getElementById("gate").append(el("div", { class: "forced", id: "gate-forced" },
    el("span", { class: "badge bad" }, "published by FORCE, past the quality gate"), " ",
    el("span", { class: "warning-text" },
      `reason: ${last.reason || "?"} · by ${last.by || "?"} · ${fmt(last.at)}`)));
}

function renderGate(result) {
  // The badge is the gate run of the published version; a newer build that failed the gate
  // (and so was not published, R7) is shown next to it, separately.
  const box = document.getElementById("gate");
  box.replaceChildren();
  const link = (path, text) => el("a", { href: BASE + "data-docs/" + path, target: "_blank", rel: "noopener" }, text);
  const tableLinks = (pages) => Object.entries(pages || {}).flatMap(([table, path]) => [" ", link(path, table)]);
  if (!result || !result.available) {
    const text = result && result.published_version
      ? `quality gate: no result for version ${result.published_version}` : "quality gate: no result yet";
    box.append(el("span", { class: "badge none", id: "gate-badge" }, text));
  } else {
    const ok = result.success === true;
    box.append(el("span", { class: "badge " + (ok ? "ok" : "bad"), id: "gate-badge" },
      ok ? "quality gate passed" : "quality gate FAILED"));
    box.append(" ", el("span", { class: "status" },
      `version ${result.version || "?"} · ${result.expectations} expectation(s) · ${fmt(result.validated_at)}`));
    if (!ok && result.failed_expectations && result.failed_expectations.length) {
      box.append(" ", el("span", { class: "warning-text" }, "failed: " + result.failed_expectations.join(", ")));
    }
    if (result.warnings && result.warnings.length) {
      box.append(" ", el("span", { class: "badge warn", id: "gate-warnings" },
        `${result.warnings.length} warning(s): ${result.warnings.join("; ")}`));
    }
  }
  if (result && result.report) box.append(" ", link(result.report, "gate report"));
  if (result && result.data_docs) box.append(" ", link(result.data_docs, "Data Docs"));
  if (result && result.available) box.append(...tableLinks(result.detail_pages));
  const newer = result && result.newer_failed;
  if (newer) {
    box.append(el("div", { class: "newer-failed", id: "gate-newer-failed" },
      el("span", { class: "badge bad" }, "newer build FAILED the gate"), " ",
      el("span", { class: "status" }, `version ${newer.version || "?"} · ${fmt(newer.validated_at)} · not published`),
      newer.failed_expectations && newer.failed_expectations.length
        ? [" ", el("span", { class: "warning-text" }, "failed: " + newer.failed_expectations.join(", "))] : null,
      ...tableLinks(newer.detail_pages)));
  }
}

// --- clusters -------------------------------------------------------------------------------
let CLUSTERS = [];

function clusterLabel(c) {
  return c.cluster_alias && c.cluster_alias !== c.cluster_id ? `${c.cluster_alias} (${c.cluster_id})` : c.cluster_id;
}

async function loadClusters() {
  try {
    CLUSTERS = (await api("api/clusters")).clusters;
  } catch (error) { setMessage(error.message, true); return; }
  const search = document.getElementById("cluster");
  const overview = document.getElementById("overview-cluster");
  for (const c of CLUSTERS) {
    search.append(el("option", { value: c.cluster_id }, clusterLabel(c)));
    overview.append(el("option", { value: c.cluster_id }, clusterLabel(c)));
  }
  if (CLUSTERS.length) loadOverview();
  else document.getElementById("overview").textContent = "No clusters in the published tables.";
}

// --- search ---------------------------------------------------------------------------------
async function runSearch(query, clusterId) {
  setMessage("Searching…");
  document.getElementById("results").replaceChildren();
  let found;
  try {
    found = await api("api/search", { q: query, cluster_id: clusterId });
  } catch (error) { setMessage(error.message, true); return; }
  const results = found.results;
  if (!results.length) {
    setMessage(`No topic matches “${query}”` + (found.topic_id ? ` (ID ${found.topic_id})` : "") + ".", true);
    document.getElementById("timeline-section").hidden = true;
    return;
  }
  const exact = results.filter((r) => r.matched_by !== "partial");
  const exactNames = [...new Set(exact.map((r) => r.topic_name))];
  setMessage(`${results.length}${found.truncated ? "+" : ""} match(es)` + (found.topic_id ? ` · searched ID ${found.topic_id}` : ""));
  renderResults(results);
  if (exactNames.length === 1) {
    const onlyCluster = new Set(exact.map((r) => r.cluster_id)).size === 1 && found.topic_id ? exact[0].cluster_id : clusterId;
    await showTimeline(exactNames[0], onlyCluster);
  } else if (results.length === 1) {
    await showTimeline(results[0].topic_name, results[0].cluster_id);
  }
}

function renderResults(results) {
  const list = document.getElementById("results");
  list.replaceChildren(...results.map((r) => el("li", {},
    el("a", { href: "#", onclick: (e) => { e.preventDefault(); showTimeline(r.topic_name, r.cluster_id); } }, r.topic_name),
    el("span", { class: "meta" },
      `${r.cluster_alias || r.cluster_id} · ${r.incarnations} incarnation(s) · ${r.is_live ? "live" : "deleted"}`
      + ` · matched by ${r.matched_by}`))));
}

// --- timeline -------------------------------------------------------------------------------
async function showTimeline(name, clusterId) {
  const section = document.getElementById("timeline-section");
  const box = document.getElementById("timeline");
  let data;
  try {
    data = await api("api/timeline", { name, cluster_id: clusterId });
  } catch (error) { setMessage(error.message, true); return; }
  section.hidden = false;
  document.getElementById("timeline-title").textContent = `Incarnations of “${name}”`;
  box.replaceChildren(document.getElementById("legend-template").content.cloneNode(true));
  for (const cluster of data.clusters) box.append(renderCluster(cluster));
  history.replaceState(null, "", "#" + new URLSearchParams({ name, cluster: clusterId || "" }).toString());
}

function renderCluster(cluster) {
  const warning = cluster.incarnations.some((i) => i.has_reappeared);
  const block = el("div", { class: "cluster-block" + (warning ? " warning" : ""), "data-cluster": cluster.cluster_id });
  block.append(el("h3", {}, `${cluster.cluster_alias} `, el("span", { class: "status" }, cluster.cluster_id),
    " · ", `${cluster.incarnations.length} incarnation(s)`,
    cluster.recreations ? ` · re-created ${cluster.recreations} time(s)` : ""));
  if (warning) {
    block.append(el("p", { class: "warning-text" },
      "Warning: a deleted topic ID was seen again (reappeared). The quality gate refuses to publish such data (see KAFKA-19383)."));
  }
  block.append(drawTimeline(cluster));
  for (const inc of cluster.incarnations) block.append(renderIncarnation(inc));
  return block;
}

function drawTimeline(cluster) {
  const width = 1100, left = 170, right = 20, rowH = 30, top = 10;
  const incs = cluster.incarnations;
  const height = top + incs.length * rowH + 30;
  const t0 = Date.parse(cluster.span.start);
  let t1 = Date.parse(cluster.span.end);
  if (!(t1 > t0)) t1 = t0 + 3600e3;
  const pad = (t1 - t0) * 0.02;
  const lo = t0 - pad, hi = t1 + pad;
  const x = (ts) => left + ((Date.parse(ts) - lo) / (hi - lo)) * (width - left - right);
  const root = svg("svg", { class: "timeline", viewBox: `0 0 ${width} ${height}`, role: "img",
    "aria-label": `timeline of ${incs.length} incarnation(s)` });
  const axisY = top + incs.length * rowH + 4;
  root.append(svg("line", { class: "axis", x1: left, x2: width - right, y1: axisY, y2: axisY }));
  for (let i = 0; i <= 5; i++) {
    const t = new Date(lo + ((hi - lo) * i) / 5).toISOString();
    const tx = x(t);
    root.append(svg("line", { class: "axis", x1: tx, x2: tx, y1: top, y2: axisY + 4 }));
    const anchor = i === 0 ? "start" : i === 5 ? "end" : "middle";
    root.append(svg("text", { class: "tick", x: tx, y: axisY + 18, "text-anchor": anchor }, axisLabel(t, hi - lo)));
  }
  incs.forEach((inc, index) => {
    const y = top + index * rowH;
    const label = `#${inc.ordinal} ${inc.topic_id ? inc.topic_id.slice(0, 10) + "…" : "(no ID)"}`;
    root.append(svg("text", { x: 4, y: y + 17 }, label));
    const end = inc.deleted_at || (inc.is_live ? cluster.span.end : inc.last_seen_at);
    const x0 = x(inc.first_seen_at), x1 = Math.max(x(end), x0 + 3);
    const cls = "bar " + (inc.deleted_at ? "deleted" : "live");
    root.append(svg("rect", { class: cls, x: x0, y: y + 6, width: x1 - x0, height: 14, rx: 3,
      "data-incarnation": inc.incarnation_key },
      svg("title", {}, `incarnation #${inc.ordinal} ${inc.topic_id || ""}\n${fmt(inc.first_seen_at)} → ${inc.deleted_at ? "deleted " + fmt(inc.deleted_at) : "live"}`)));
    for (const v of inc.versions.filter((version) => version.change_type === "reappeared")) {
      // The life after deletion (R6), in the warning colour.
      const until = v.valid_to || (v.is_current ? cluster.span.end : inc.last_seen_at);
      const r0 = x(v.valid_from), r1 = Math.max(x(until), r0 + 6);
      root.append(svg("rect", { class: "bar reappeared", x: r0, y: y + 6, width: r1 - r0, height: 14, rx: 3 },
        svg("title", {}, `REAPPEARED ${fmt(v.valid_from)}: this ID was deleted ${fmt(inc.deleted_at)}`)));
    }
    for (const v of inc.versions) {
      root.append(svg("circle", { class: "marker " + v.change_type, cx: x(v.valid_from), cy: y + 13, r: v.change_type === "reappeared" ? 7 : 5 },
        svg("title", {}, `v${v.version} ${CHANGE_LABELS[v.change_type] || v.change_type} · ${fmt(v.valid_from)} · ${v.partition_count ?? "?"} partitions`)));
    }
    if (inc.deleted_at) {
      const dx = x(inc.deleted_at);
      root.append(svg("path", { class: "marker deleted", d: `M${dx - 5},${y + 8} l10,10 M${dx + 5},${y + 8} l-10,10` },
        svg("title", {}, `deleted ${fmt(inc.deleted_at)}`)));
    }
  });
  return root;
}

function renderIncarnation(inc) {
  const cls = "incarnation" + (inc.has_reappeared ? " reappeared" : inc.is_live ? " live" : "");
  const state = inc.has_reappeared
    ? el("span", { class: "badge warn" }, "reappeared")
    : el("span", { class: "badge " + (inc.is_live ? "live" : "deleted") }, inc.is_live ? "live" : "deleted");
  const head = el("div", {},
    el("strong", {}, `Incarnation #${inc.ordinal}`), " ", state,
    inc.is_recreation ? el("span", { class: "status" }, " · re-creation") : null,
    " · ID ", idCell(inc.topic_id),
    inc.topic_uuid ? el("span", { class: "status" }, " UUID ", el("code", {}, inc.topic_uuid)) : null);
  const life = el("div", { class: "status" },
    `first seen ${fmt(inc.first_seen_at)} · last seen ${fmt(inc.last_seen_at)}`
    + (inc.deleted_at ? ` · deleted ${fmt(inc.deleted_at)}` : ""));
  const rows = inc.versions.map((v) => el("tr", { class: v.change_type === "reappeared" ? "warning-text" : "" },
    el("td", {}, v.version), el("td", {}, CHANGE_LABELS[v.change_type] || v.change_type),
    el("td", {}, v.topic_name), el("td", {}, v.partition_count ?? "?"), el("td", {}, v.replication_factor ?? "?"),
    el("td", {}, fmt(v.valid_from)), el("td", {}, v.valid_to ? fmt(v.valid_to) : (v.is_current ? "current" : ""))));
  const versions = el("table", { class: "versions" },
    el("thead", {}, el("tr", {}, ["v", "change", "name", "partitions", "replication", "valid from", "valid to"].map((h) => el("th", {}, h)))),
    el("tbody", {}, rows));
  const partitions = el("div", { class: "partition-history" }, "Partitions: ",
    inc.partition_history.map((p, i) => el("span", {}, i ? " → " : "", el("strong", {}, p.partition_count ?? "?"),
      el("span", { class: "status" }, ` (${day(p.at)})`))));
  return el("div", { class: cls, "data-incarnation": inc.incarnation_key }, head, life, partitions, versions,
    renderGroups(inc.groups || []));
}

const CARRIED_TITLE = "The committed offset exceeded this incarnation's log end offset read in the same "
  + "snapshot: the position was carried over from an earlier incarnation of the same name.";

// The consumer groups that committed offsets on one incarnation (contract R8-R10).
function renderGroups(groups) {
  const box = el("div", { class: "groups" }, el("div", { class: "groups-title" }, "Consumer groups",
    groups.length ? el("span", { class: "status" }, ` (${groups.length})`) : null));
  if (!groups.length) {
    box.append(el("div", { class: "status groups-empty" }, "no consumer group committed offsets on this incarnation"));
    return box;
  }
  const rows = groups.map((g) => el("tr", { class: "group" + (g.carried_offset ? " carried" : ""), "data-group": g.group_id },
    el("td", {}, el("code", { class: "group-id" }, g.group_id)),
    el("td", {}, fmt(g.first_seen_at)), el("td", {}, fmt(g.last_seen_at)),
    el("td", { class: "num" }, g.max_committed_offset),
    el("td", {}, g.carried_offset
      ? el("span", { class: "badge warn carried-mark", title: CARRIED_TITLE, "aria-label": "carried position: " + CARRIED_TITLE },
        "carried position")
      : null)));
  box.append(el("table", { class: "groups" },
    el("thead", {}, el("tr", {}, el("th", {}, "group"), el("th", {}, "first seen"), el("th", {}, "last seen"),
      el("th", { class: "num" }, "max committed offset"), el("th", {}, ""))),
    el("tbody", {}, rows)));
  if (groups.some((g) => g.carried_offset)) {
    box.append(el("div", { class: "status groups-note" }, el("span", { class: "warning-text" }, "carried position"),
      ": " + CARRIED_TITLE.charAt(0).toLowerCase() + CARRIED_TITLE.slice(1)));
  }
  return box;
}

// --- overview -------------------------------------------------------------------------------
async function loadOverview() {
  const box = document.getElementById("overview");
  const clusterId = document.getElementById("overview-cluster").value;
  const days = document.getElementById("days").value || 30;
  if (!clusterId) return;
  let data;
  try { data = await api("api/overview", { cluster_id: clusterId, days }); }
  catch (error) { box.textContent = error.message; return; }
  const card = (value, label, warn) => el("div", { class: "card" + (warn ? " warn" : "") },
    el("div", { class: "value" }, value), el("div", { class: "label" }, label));
  const cards = el("div", { class: "cards" },
    card(data.live_topics, "live topics"),
    card(data.deletions, `deletions, last ${data.days} days`),
    card(data.recreations, `re-creations, last ${data.days} days`),
    card(data.reappeared_incarnations, "reappeared IDs (warning)", data.reappeared_incarnations > 0));
  const windowLine = el("div", { class: "status" }, `window ${fmt(data.window_start)} → ${fmt(data.window_end)}`);
  const top = el("table", {},
    el("thead", {}, el("tr", {}, ["topic", "incarnations", "re-creations", "last created", "state"].map((h) => el("th", {}, h)))),
    el("tbody", {}, data.most_recreated.map((r) => el("tr", {},
      el("td", {}, el("a", { href: "#", onclick: (e) => { e.preventDefault(); showTimeline(r.topic_name, data.cluster_id); window_scroll(); } }, r.topic_name)),
      el("td", {}, r.incarnations), el("td", {}, r.recreations), el("td", {}, fmt(r.last_created_at)),
      el("td", {}, r.is_live ? "live" : "deleted")))));
  const dailyLegend = el("div", { class: "legend" },
    el("span", {}, el("i", { class: "swatch deleted" }), "deletions per day"),
    el("span", {}, el("i", { class: "swatch recreated" }), "re-creations per day"));
  box.replaceChildren(cards, windowLine, dailyLegend, drawDaily(data), el("h3", {}, "Topics re-created most often"),
    data.most_recreated.length ? top : el("p", { class: "status" }, "No topic was ever re-created in this cluster."));
}

function window_scroll() { document.getElementById("timeline-section").scrollIntoView({ behavior: "smooth" }); }

function drawDaily(data) {
  const width = 1100, height = 120, bottom = 20;
  const days = data.daily;
  const root = svg("svg", { class: "daily", viewBox: `0 0 ${width} ${height}`, role: "img", "aria-label": "deletions and re-creations per day" });
  if (!days.length) {
    root.append(svg("text", { x: 4, y: 20 }, "No deletions or re-creations in this window."));
    return root;
  }
  const max = Math.max(...days.map((d) => d.deletions + d.recreations), 1);
  const step = Math.min(40, (width - 20) / days.length);
  days.forEach((d, i) => {
    const x = 10 + i * step;
    const hDel = ((height - bottom - 10) * d.deletions) / max;
    const hRec = ((height - bottom - 10) * d.recreations) / max;
    root.append(svg("rect", { class: "del", x, y: height - bottom - hDel, width: step * 0.4, height: hDel },
      svg("title", {}, `${d.day}: ${d.deletions} deletion(s)`)));
    root.append(svg("rect", { class: "rec", x: x + step * 0.42, y: height - bottom - hRec, width: step * 0.4, height: hRec },
      svg("title", {}, `${d.day}: ${d.recreations} re-creation(s)`)));
    if (days.length <= 31 || i % Math.ceil(days.length / 15) === 0) {
      root.append(svg("text", { x, y: height - 5 }, d.day.slice(5)));
    }
  });
  return root;
}

// --- wiring ---------------------------------------------------------------------------------
document.getElementById("search-form").addEventListener("submit", (event) => {
  event.preventDefault();
  const query = document.getElementById("q").value.trim();
  if (query) runSearch(query, document.getElementById("cluster").value);
});
document.getElementById("overview-form").addEventListener("submit", (event) => {
  event.preventDefault();
  loadOverview();
});

(async function init() {
  await Promise.all([loadStatus(), loadClusters()]);
  const hash = new URLSearchParams(window.location.hash.slice(1));
  if (hash.get("name")) {
    document.getElementById("q").value = hash.get("name");
    await showTimeline(hash.get("name"), hash.get("cluster") || undefined);
  } else if (hash.get("q")) {
    document.getElementById("q").value = hash.get("q");
    await runSearch(hash.get("q"), hash.get("cluster") || "");
  }
})();
