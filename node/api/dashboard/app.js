// The dashboard: polls /api/status every second and redraws from it; no framework, no network
// beyond this node. Every string from the status (names, run names, errors: some come from
// peers) goes in through textContent, never as HTML.
"use strict";

const POLL_MS = 1000;
const SVG_NS = "http://www.w3.org/2000/svg";
const $ = (id) => document.getElementById(id);

function el(tag, attrs = {}, text = "") {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  if (text !== "") node.textContent = text;
  return node;
}

function svg(tag, attrs = {}, text = "") {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  if (text !== "") node.textContent = text;
  return node;
}

function short(peerId) {
  return peerId.length > 16 ? `${peerId.slice(0, 8)}…${peerId.slice(-6)}` : peerId;
}

function bytes(n) {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  const digits = i === 0 || n >= 100 ? 0 : 1;  // three figures at most: "190 KiB", "36.1 KiB"
  return `${n.toFixed(digits)} ${units[i]}`;
}

function duration(s) {
  if (s < 60) return `${Math.round(s)} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min ${Math.round(s % 60)} s`;
  return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
}

function runsOf(status) {
  if (!status.run) return [];
  return status.run.runs ? status.run.runs : [status.run];
}

// -- header and this node ------------------------------------------------------------------------

function renderHeader(status) {
  $("node-name").textContent = status.name;
  $("peer-id").textContent = status.peer_id;
  const reach = status.reachability.status;
  const badge = $("reachability");
  badge.textContent = reach;
  badge.className = `badge reach-${reach}`;
  badge.title = status.reachability.text || "";
  $("private").hidden = !status.private_network;
  $("uptime").textContent = `up ${duration(status.uptime_s)}`;
  $("version").textContent = status.version;
  document.title = `${status.name} · peertrain`;
}

function renderNode(status) {
  const facts = [
    ["peers", String(status.peers.length)],
    ["relays held", String(status.reachability.relays.length)],
    ["DHT", `${status.dht.mode}, ${status.dht.routing.peers} in table`],
    ["connections", String(status.budget.connections.total ?? 0)],
  ];
  $("node-facts").replaceChildren(...facts.flatMap(([k, v]) => [el("dt", {}, k), el("dd", {}, v)]));
  $("addresses").replaceChildren(...status.addrs.map((a) => el("li", {}, a)));
}

// -- peer graph: this node in the middle, peers on a ring -----------------------------------------

function latency(ms) {
  if (ms == null) return "";
  return ms < 10 ? `${ms.toFixed(1)} ms` : `${Math.round(ms)} ms`;
}

function renderPeers(status) {
  const graph = $("peer-graph");
  const kinds = status.reachability.connections || {};
  const rtt = status.peer_latency_ms || {};
  const peers = [...status.peers].sort();
  $("peer-count").textContent = String(peers.length);
  const cx = 160, cy = 125, r = peers.length > 1 ? 78 : 70;
  const children = [];
  const spots = peers.map((peer, i) => {
    const angle = -Math.PI / 2 + (2 * Math.PI * i) / Math.max(peers.length, 1);
    return { peer, x: cx + r * Math.cos(angle) * 1.45, y: cy + r * Math.sin(angle) };
  });
  for (const { peer, x, y } of spots) {
    const kind = kinds[peer] || "direct";
    children.push(svg("line", { x1: cx, y1: cy, x2: x, y2: y, class: `link ${kind}` }));
  }
  children.push(svg("circle", { cx, cy, r: 16, class: "me" }));
  children.push(svg("text", { x: cx, y: cy + 30, class: "label me-label" }, "this node"));
  for (const { peer, x, y } of spots) {
    const group = svg("g", { class: "peer", "data-peer": peer });
    const kind = kinds[peer] || "direct";
    group.append(svg("circle", { cx: x, cy: y, r: 10, class: `node ${kind}` }));
    const name = (status.peer_names || {})[peer] || short(peer);
    const below = y >= cy;
    group.append(svg("text", { x, y: y + (below ? 24 : -28), class: "label" }, name));
    const figure = [kind, latency(rtt[peer])].filter(Boolean).join(" · ");
    group.append(svg("text", { x, y: y + (below ? 37 : -15), class: "label sub", "data-latency": rtt[peer] ?? "" }, figure));
    group.append(svg("title", {}, `${name}\n${peer}\n${figure}`));
    children.push(group);
  }
  if (!peers.length) {
    children.push(svg("text", { x: cx, y: 30, class: "label muted" }, "no peers connected yet"));
  }
  graph.replaceChildren(...children);
}

// -- runs: figures, loss curve, traffic per round --------------------------------------------------

function renderRuns(status) {
  const holder = $("runs");
  const history = (status.history && status.history.runs) || {};
  const cards = runsOf(status).map((run) => runCard(run, status));
  if (!cards.length) {
    const empty = el("section", { class: "card" });
    empty.append(el("h2", {}, "Runs"), el("p", { class: "muted" }, "This node is in no run."));
    cards.push(empty);
  }
  holder.replaceChildren(...cards);
  for (const card of holder.querySelectorAll(".run")) {
    const samples = history[card.dataset.run] || [];
    const loss = card.querySelector(".slot-loss"), traffic = card.querySelector(".slot-traffic");
    loss.replaceChildren(lossChart(samples, loss.clientWidth || 320));
    traffic.replaceChildren(trafficChart(samples, traffic.clientWidth || 320));
  }
}

function runCard(run, status) {
  const card = el("section", { class: "card run", "data-run": run.run_id });
  const title = el("h2", {}, run.name);
  title.append(el("span", { class: "mode" }, run.model ? `${run.mode} · ${run.model}` : run.mode));
  title.append(el("span", { class: `phase phase-${run.finished ? "done" : "live"}` }, run.phase));
  card.append(title);
  card.append(figureGrid(run));
  const progress = progressBlock(run);
  if (progress) card.append(progress);
  if (run.error) card.append(el("p", { class: "error" }, run.error));
  card.append(el("h3", {}, "Loss"), el("div", { class: "slot-loss" }));
  card.append(el("h3", {}, "Traffic per round"), el("div", { class: "slot-traffic" }));
  card.append(el("h3", {}, "Members"), ...(run.view ? memberTable(run.view, status) : memberList(run, status)));
  const samples = sampleGrid(run.sample_grid);
  if (samples) card.append(el("h3", {}, "Samples"), samples);
  return card;
}

// The run's figures; a figure its mode does not report (a diffusion or pipeline run) is left out,
// never shown as "undefined".
function figureGrid(run) {
  const view = run.view;
  const figures = [
    ["round", run.round],
    ["rounds", view && view.rounds != null ? view.rounds || "no end" : undefined],
    ["ETA", view && view.eta_s != null ? roughly(view.eta_s) : undefined],
    ["samples/s", view ? speed(view.samples_per_s) : undefined],
    ["members", run.members.length],
    ["loss", run.loss == null ? "–" : run.loss.toFixed(4)],
    ["group", run.group || undefined],  // a diffusion member's expert group
    ["sent", run.bytes_published === undefined ? undefined : bytes(run.bytes_published)],
    ["received", run.bytes_fetched === undefined ? undefined : bytes(run.bytes_fetched)],
    ["re-syncs", run.resyncs],
    ["rejected", run.rejected_updates],
  ];
  const grid = el("div", { class: "figures" });
  for (const [k, v] of figures) {
    if (v === undefined || v === null) continue;
    const cell = el("div", { class: "figure", "data-field": k });
    cell.append(el("span", { class: "value" }, String(v)), el("span", { class: "key" }, k));
    grid.append(cell);
  }
  return grid;
}

// A tile's duration, short enough for its width: "42 s", "5 min", "3.2 h", "2.5 d".
function roughly(s) {
  if (s < 60) return `${Math.round(s)} s`;
  if (s < 3600) return `${Math.round(s / 60)} min`;
  return s < 86400 ? `${(s / 3600).toFixed(1)} h` : `${(s / 86400).toFixed(1)} d`;
}

function speed(n) {
  return n >= 100 ? String(Math.round(n)) : n.toFixed(1);
}

// The run-wide view (node/runs/run_view.py): each member's own report, its agreement at a glance.
// Rows but ours are the members' claims (signed by each, checked by nobody): said in a title.
function memberTable(view, status) {
  const a = view.agreement;
  const grouped = (a.groups || 1) > 1; // a diffusion run: each expert group has its own model
  const held = grouped
    ? `${a.holders} of ${a.at_round} at their group's newest round hold their group's state (${a.groups} groups)`
    : `${a.holders} of ${a.at_round} at round ${a.round} hold state ${a.checksum || "–"}`;
  const glance = a.round == null
    ? "no member reports its progress yet"
    : held + (a.reporting > a.at_round ? ` · ${a.reporting - a.at_round} behind` : "");
  const agreed = a.round != null && a.holders === a.at_round && a.reporting === view.total;
  const head = el("tr");
  const columns = ["peer", "name", ...(grouped ? ["group"] : []), "round", "checksum", "samples/s", "device", "version"];
  for (const c of columns) {
    head.append(el("th", c === "round" || c === "samples/s" ? { class: "num" } : {}, c));
  }
  const body = el("tbody");
  const names = status.peer_names || {};
  for (const m of view.members) {
    const row = el("tr", { class: m.me ? "me" : "claimed", "data-peer": m.peer });
    row.title = m.me ? "this node" : "what this member says of itself (signed by it, not checked)";
    const name = m.name || names[m.peer] || "";
    const differs = !grouped && m.round === a.round && m.checksum && m.checksum !== a.checksum;
    const cells = [
      [short(m.peer), "mono"], [m.me ? `${name || status.name} (this node)` : name || "–", ""],
      ...(grouped ? [[m.group || "–", ""]] : []),
      [m.round ?? "–", "num"], [m.checksum || "–", differs ? "mono differs" : "mono"],
      [m.samples_per_s == null ? "–" : speed(m.samples_per_s), "num"], [m.device || "–", ""],
      [m.version || "–", ""],
    ];
    for (const [text, cls] of cells) row.append(el("td", cls ? { class: cls } : {}, String(text)));
    body.append(row);
  }
  const table = el("table", { class: "member-table" });
  const thead = el("thead");
  thead.append(head);
  table.append(thead, body);
  const wrap = el("div", { class: "table-wrap" });
  wrap.append(table);
  const more = view.total > view.members.length ? ` · ${view.total - view.members.length} more not shown` : "";
  const line = el("p", { class: `agreement ${agreed ? "agreed" : "split"}` }, `${glance}${more}`);
  return [line, wrap];
}

function memberList(run, status) {
  const names = status.peer_names || {};
  const members = el("ul", { class: "members" });
  for (const m of run.members) {
    members.append(el("li", { title: m }, m === status.peer_id ? `${status.name} (this node)` : names[m] || short(m)));
  }
  return [members];
}

// What the run waits on now (swarm/progress.py): inner steps i/H, a state download, a wait.
function progressBlock(run) {
  const p = run.progress;
  if (!p || run.finished) return null;
  const block = el("div", { class: "progress" });
  if (p.phase === "inner steps" && p.inner_steps) {
    block.append(bar("inner steps", p.inner_step, p.inner_steps, `${p.inner_step}/${p.inner_steps}`));
  }
  const d = p.download;
  if (d) {
    const mb = (n) => (n / 1e6).toFixed(1);
    const size = d.bytes_total ? `${mb(d.bytes_done)}/${mb(d.bytes_total)} MB` : "asking";
    const figures = `${size} · ${mb(d.bytes_per_s)} MB/s · ${d.donors} donor${d.donors === 1 ? "" : "s"}`;
    block.append(bar(`download ${d.what}`, d.bytes_done, d.bytes_total || 1, figures));
  }
  const w = p.waiting;
  if (w) {
    const more = Math.max(w.need - w.have, 0);
    const text = `waiting for ${more} more ${w.what} (have ${w.have}, need ${w.need}), ${Math.round(w.elapsed_s)} s`;
    block.append(el("p", { class: "waiting" }, text));
  }
  return block.childElementCount ? block : null;
}

function bar(label, done, total, figures) {
  const row = el("div", { class: "bar-row" });
  const track = el("div", { class: "track" });
  const fill = el("div", { class: "fill" });
  fill.style.width = `${Math.min(100, (100 * done) / Math.max(total, 1)).toFixed(1)}%`;
  track.append(fill);
  row.append(el("span", { class: "bar-label" }, label), track, el("span", { class: "bar-figures" }, figures));
  return row;
}

// A diffusion run's newest sample grid, when its status carries one: {png: base64, round, caption}.
// Only base64 PNG data goes into the image's source; anything else is ignored.
function sampleGrid(grid) {
  if (!grid || typeof grid.png !== "string" || !/^[A-Za-z0-9+/=]+$/.test(grid.png)) return null;
  const figure = el("figure", { class: "samples" });
  const img = el("img", { alt: "samples of the run's newest model", src: `data:image/png;base64,${grid.png}` });
  const caption = [grid.round != null ? `round ${grid.round}` : "", grid.caption || ""].filter(Boolean).join(" · ");
  figure.append(img);
  if (caption) figure.append(el("figcaption", {}, caption));
  return figure;
}

function lossChart(samples, W) {
  const H = 150, pad = { l: 44, r: 10, t: 10, b: 22 };
  const chart = svg("svg", { viewBox: `0 0 ${W} ${H}`, class: "chart loss" });
  const points = samples.filter((s) => s.loss != null);
  if (points.length < 1) {
    chart.append(svg("text", { x: W / 2, y: H / 2, class: "label muted" }, "waiting for the first round"));
    return chart;
  }
  const r0 = points[0].round, r1 = Math.max(points[points.length - 1].round, r0 + 1);
  const losses = points.map((p) => p.loss);
  let lo = Math.min(...losses), hi = Math.max(...losses);
  if (hi - lo < 1e-9) { lo -= 0.5; hi += 0.5; }
  const x = (round) => pad.l + ((round - r0) / (r1 - r0)) * (W - pad.l - pad.r);
  const y = (loss) => pad.t + (1 - (loss - lo) / (hi - lo)) * (H - pad.t - pad.b);
  for (const v of [lo, (lo + hi) / 2, hi]) {
    chart.append(svg("line", { x1: pad.l, x2: W - pad.r, y1: y(v), y2: y(v), class: "grid" }));
    chart.append(svg("text", { x: pad.l - 4, y: y(v) + 3, class: "axis", "text-anchor": "end" }, v.toFixed(2)));
  }
  chart.append(svg("text", { x: pad.l, y: H - 4, class: "axis" }, `round ${r0}`));
  chart.append(svg("text", { x: W - pad.r, y: H - 4, class: "axis", "text-anchor": "end" }, `round ${r1}`));
  const path = points.map((p, i) => `${i ? "L" : "M"}${x(p.round).toFixed(1)},${y(p.loss).toFixed(1)}`);
  chart.append(svg("path", { d: path.join(" "), class: "curve" }));
  const last = points[points.length - 1];
  chart.append(svg("circle", { cx: x(last.round), cy: y(last.loss), r: 3, class: "dot" }));
  return chart;
}

function trafficChart(samples, W) {
  const H = 100, pad = { l: 60, r: 10, t: 8, b: 20 };
  const chart = svg("svg", { viewBox: `0 0 ${W} ${H}`, class: "chart traffic" });
  const rounds = [];
  for (let i = 1; i < samples.length; i++) {
    // samples are a second apart: one may span several fast rounds, so bars show the average
    const span = Math.max(samples[i].round - samples[i - 1].round, 1);
    const sent = (samples[i].bytes_published - samples[i - 1].bytes_published) / span;
    const got = (samples[i].bytes_fetched - samples[i - 1].bytes_fetched) / span;
    rounds.push({ round: samples[i].round, sent: Math.max(sent, 0), got: Math.max(got, 0) });
  }
  const shown = rounds.slice(-40);
  if (!shown.length) {
    chart.append(svg("text", { x: W / 2, y: H / 2, class: "label muted" }, "no round traffic yet"));
    return chart;
  }
  const top = Math.max(...shown.map((r) => r.sent + r.got), 1);
  const slot = Math.min((W - pad.l - pad.r) / shown.length, 36);
  const h = (v) => (v / top) * (H - pad.t - pad.b);
  shown.forEach((r, i) => {
    const x0 = pad.l + i * slot + slot * 0.15, w = slot * 0.7, base = H - pad.b;
    chart.append(svg("rect", { x: x0, y: base - h(r.got), width: w, height: h(r.got), class: "bar in" }));
    chart.append(svg("rect", { x: x0, y: base - h(r.got) - h(r.sent), width: w, height: h(r.sent), class: "bar out" }));
    const tip = svg("title", {}, `round ${r.round}: sent ${bytes(r.sent)}, received ${bytes(r.got)}`);
    chart.lastChild.append(tip);
  });
  chart.append(svg("text", { x: pad.l - 4, y: pad.t + 8, class: "axis", "text-anchor": "end" }, bytes(top)));
  chart.append(svg("text", { x: pad.l, y: H - 4, class: "axis" }, `rounds ${shown[0].round}–${shown[shown.length - 1].round}`));
  const legend = svg("text", { x: W - pad.r, y: H - 4, class: "axis", "text-anchor": "end" });
  legend.append(svg("tspan", { class: "in-text" }, "■ received "), svg("tspan", { class: "out-text" }, "■ sent"));
  chart.append(legend);
  return chart;
}

// -- events and services ---------------------------------------------------------------------------

function renderEvents(status) {
  const events = ((status.history && status.history.events) || []).slice().reverse().slice(0, 20);
  const items = events.map((e) => {
    const li = el("li", { class: `event ${e.kind}` });
    const at = new Date(e.time * 1000).toLocaleTimeString();
    li.append(el("time", {}, at), el("span", { class: "kind" }, e.kind), el("span", {}, e.text));
    return li;
  });
  if (!items.length) items.push(el("li", { class: "muted" }, "nothing happened yet"));
  $("events").replaceChildren(...items);
}

function renderServices(status) {
  $("services").replaceChildren(
    ...status.services.map((s) => {
      const li = el("li", { class: `service ${s.state}`, title: s.error || "" });
      li.append(el("span", { class: "dot" }), el("span", {}, s.name));
      if (s.restarts) li.append(el("span", { class: "muted" }, ` · ${s.restarts} restarts`));
      return li;
    }),
  );
}

// -- polling -------------------------------------------------------------------------------------

function render(status) {
  renderHeader(status);
  renderNode(status);
  renderPeers(status);
  renderRuns(status);
  renderEvents(status);
  renderServices(status);
}

function setLive(ok, why) {
  const badge = $("live");
  badge.textContent = ok ? "live" : "no answer";
  badge.className = ok ? "badge live ok" : "badge live down";
  badge.title = ok ? `updated ${new Date().toLocaleTimeString()}` : String(why || "");
}

async function poll() {
  try {
    const response = await fetch("/api/status", { cache: "no-store" });
    if (!response.ok) throw new Error(`HTTP ${response.status}`);
    render(await response.json());
    setLive(true);
  } catch (err) {
    setLive(false, err);
  } finally {
    setTimeout(poll, POLL_MS);
  }
}

poll();
