// koord dashboard: reads the collector's /api/v1 and the recommender's recommendations,
// draws with the vendored uPlot, refreshes on a timer. State is kept on window.koord so an
// operator (or a test) can see what was fetched and drawn.
(function () {
  "use strict";

  const GIB = 1024 ** 3;
  const MAX_RECOMMENDATIONS = 25; // workloads listed; the savings total covers all of them
  const MAX_EVENTS = 30;
  const params = new URLSearchParams(location.search);
  const koord = (window.koord = {
    charts: {},      // name -> uPlot instance
    series: {},      // name -> {labels: [...], data: [[x...], [y...], ...]}
    requests: [],    // every URL fetched, in order
    errors: [],
    refreshes: 0,
    config: null,
    selectedNode: params.get("node") || null,
  });

  const $ = (sel) => document.querySelector(sel);
  const windowSelect = $("#window");
  const resourceSelect = $("#resource");
  const eventKind = $("#event-kind");
  if (params.get("window")) windowSelect.value = params.get("window");
  if (params.get("resource")) resourceSelect.value = params.get("resource");

  // ------------------------------------------------------------------ helpers

  async function getJSON(url) {
    koord.requests.push(url);
    const resp = await fetch(url, { headers: { Accept: "application/json" } });
    if (!resp.ok) {
      let detail = "";
      try { detail = (await resp.json()).detail || ""; } catch (e) { /* not JSON */ }
      throw new Error(`${url} answered ${resp.status}${detail ? ": " + detail : ""}`);
    }
    return resp.json();
  }

  function qs(obj) {
    const p = new URLSearchParams();
    for (const [k, v] of Object.entries(obj)) if (v !== undefined && v !== null && v !== "") p.set(k, v);
    return p.toString();
  }

  const isCpu = () => resourceSelect.value === "cpu";
  const resKey = () => (isCpu() ? "cpu_milli" : "memory_bytes");
  const scale = (v) => (v === null || v === undefined ? null : isCpu() ? v / 1000 : v / GIB);
  const unit = () => (isCpu() ? "cores" : "GiB");

  function fmtRes(r) {
    if (!r) return "–";
    return `${(r.cpu_milli / 1000).toFixed(1)} c / ${(r.memory_bytes / GIB).toFixed(1)} Gi`;
  }

  function fmtTime(ms) {
    return new Date(ms).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: "2-digit" });
  }

  function row(tbody, cells, attrs) {
    const tr = document.createElement("tr");
    for (const c of cells) {
      const td = document.createElement("td");
      if (c instanceof Node) td.appendChild(c); else td.textContent = c === null || c === undefined ? "–" : String(c);
      tr.appendChild(td);
    }
    if (attrs) for (const [k, v] of Object.entries(attrs)) tr.setAttribute(k, v);
    tbody.appendChild(tr);
    return tr;
  }

  function stepFor(windowS) {
    if (windowS <= 3600) return "60s";
    if (windowS <= 6 * 3600) return "5m";
    return "15m";
  }

  function setStatus(text, bad) {
    const el = $("#status");
    el.textContent = text;
    el.classList.toggle("error", !!bad);
  }

  // The y axis is as wide as its widest tick label, so large values are never clipped.
  function axisSize(u, values) {
    if (!values || !values.length) return 50;
    const widest = Math.max(...values.map((v) => String(v).length));
    return Math.max(50, widest * 8 + 28);
  }

  // Create the chart the first time, then only swap its data (keeps zoom and legend state).
  // `extra.stack`: the series are bands stacked bottom up (data given as heights; drawn as
  // running sums with the area between each and the one under it filled; the legend shows
  // each band's own height). `extra.log`: a logarithmic y axis.
  function draw(name, el, labels, colors, data, extra) {
    extra = extra || {};
    koord.series[name] = { labels, data };
    const width = Math.max(320, el.clientWidth || 800);
    const key = unit() + (extra.log ? ":log" : "") + (extra.stack ? `:stack${extra.stack}` : "");
    let shown = data;
    if (extra.stack) {
      shown = [data[0]];
      const sums = data[0].map(() => 0);
      for (let i = 1; i <= extra.stack; i++) {
        shown.push(data[i].map((v, j) => (v === null || v === undefined ? null : (sums[j] += Math.max(v, 0)))));
      }
      for (let i = extra.stack + 1; i < data.length; i++) shown.push(data[i]);
    }
    if (extra.log) shown = shown.map((col, i) => (i === 0 ? col : col.map((v) => (v > 0 ? v : null))));
    const existing = koord.charts[name];
    if (existing && existing.series.length === labels.length + 1 && existing._key === key) {
      existing._raw = data;
      existing.setData(shown);
      return existing;
    }
    if (existing) existing.destroy();
    el.textContent = "";
    const raw = (u, si, i) => (u._raw && u._raw[si] ? u._raw[si][i] : null);
    const opts = {
      width, height: 320,
      scales: { x: { time: true }, y: extra.log ? { distr: 3 } : { range: (u, lo, hi) => [0, hi > 0 ? hi * 1.05 : 1] } },
      axes: [{}, { label: unit(), size: axisSize }],
      series: [{}].concat(labels.map((label, i) => ({
        label, stroke: colors[i], width: extra.stack && i < extra.stack ? 1 : 2,
        fill: extra.stack && i < extra.stack ? colors[i] + "99" : (label.includes("allocatable") ? colors[i] + "18" : undefined),
        dash: label.includes("allocated") ? [6, 4] : undefined,
        value: (u, v, si, idx) => {
          const r = extra.stack ? raw(u, si, idx) : v;
          return r === null || r === undefined ? "–" : r.toFixed(1);
        },
      }))),
    };
    if (extra.stack) {
      // fill each band down to the band under it (the first down to the axis)
      opts.bands = [];
      for (let i = 2; i <= extra.stack; i++) opts.bands.push({ series: [i, i - 1], fill: colors[i - 1] + "99" });
      for (let i = 2; i <= extra.stack; i++) opts.series[i].fill = undefined;
    }
    const chart = new uPlot(opts, shown, el);
    chart._key = key;
    chart._raw = data;
    koord.charts[name] = chart;
    return chart;
  }

  const CHART_ELEMENTS = { cluster: "#cluster-chart", node: "#node-chart", nodeStack: "#node-stack" };
  window.addEventListener("resize", () => {
    for (const [name, chart] of Object.entries(koord.charts)) {
      const el = $(CHART_ELEMENTS[name]);
      if (el && el.clientWidth) chart.setSize({ width: el.clientWidth, height: 320 });
    }
  });

  // ------------------------------------------------------------------ cluster view

  const CLUSTER_SERIES = [
    ["capacity", "#1d2433", (p) => p.capacity],
    ["prod used", "#d35400", (p) => p.bands && p.bands.prod.used],
    ["prod allocated", "#e67e22", (p) => p.bands && p.bands.prod.allocated],
    ["mid allocatable", "#16a085", (p, r) => r && r.mid_allocatable],
    ["mid allocated", "#1abc9c", (p) => p.bands && p.bands.mid.allocated],
    ["batch allocatable", "#2c6fbb", (p, r) => r && r.batch_allocatable],
    ["batch allocated", "#5b9bd5", (p) => p.bands && sum(p.bands.batch.allocated, p.bands.free.allocated)],
    ["batch used", "#8e44ad", (p) => p.bands && sum(p.bands.batch.used, p.bands.free.used)],
  ];
  // Free pods draw on batch resources too; where there are any, their own band shows their part.
  const FREE_SERIES = [
    ["free allocated", "#95a5a6", (p) => p.bands && p.bands.free.allocated],
    ["free used", "#5d6d7e", (p) => p.bands && p.bands.free.used],
  ];
  const logScale = $("#log-scale");
  if (params.get("log") === "1") logScale.checked = true;

  function sum(a, b) {
    if (!a && !b) return null;
    return {
      cpu_milli: (a ? a.cpu_milli : 0) + (b ? b.cpu_milli : 0),
      memory_bytes: (a ? a.memory_bytes : 0) + (b ? b.memory_bytes : 0),
    };
  }

  async function loadCluster() {
    const windowS = Number(windowSelect.value);
    const to = Date.now();
    const range = { from: to - windowS * 1000, to, step: stepFor(windowS) };
    const [summary, resources] = await Promise.all([
      getJSON(`${koord.config.api}/cluster/summary?${qs(range)}`),
      getJSON(`${koord.config.api}/cluster/resources?${qs(range)}`),
    ]);
    const byTs = new Map(resources.points.map((r) => [r.ts, r]));
    const stamps = Array.from(new Set(summary.points.map((p) => p.ts).concat(resources.points.map((r) => r.ts))))
      .sort((a, b) => a - b);
    const points = new Map(summary.points.map((p) => [p.ts, p]));
    const key = resKey();
    const column = (pick) => stamps.map((t) => {
      const v = pick(points.get(t) || {}, byTs.get(t));
      return v ? scale(v[key]) : null;
    });
    const hasFree = summary.points.some((p) => p.bands && (p.bands.free.used[key] > 0 || p.bands.free.allocated[key] > 0));
    const series = hasFree ? CLUSTER_SERIES.concat(FREE_SERIES) : CLUSTER_SERIES;
    const data = [stamps.map((t) => t / 1000)].concat(series.map(([, , pick]) => column(pick)));
    draw("cluster", $("#cluster-chart"), series.map((s) => s[0]), series.map((s) => s[1]), data, { log: logScale.checked });

    const totals = $("#cluster-totals");
    totals.textContent = "";
    const last = (i) => { for (let j = data[i].length - 1; j >= 0; j--) if (data[i][j] !== null) return data[i][j]; return null; };
    const lastPoint = summary.points[summary.points.length - 1];
    const items = [["nodes", lastPoint ? lastPoint.nodes : "–"]].concat(
      series.map((s, i) => [s[0], last(i + 1) === null ? "–" : `${last(i + 1).toFixed(1)} ${unit()}`]));
    for (const [label, value] of items) {
      const d = document.createElement("div");
      const b = document.createElement("b");
      b.textContent = value;
      d.appendChild(b);
      d.appendChild(document.createTextNode(label));
      totals.appendChild(d);
    }
  }

  // ------------------------------------------------------------------ nodes

  async function loadNodes() {
    const items = [];
    let cursor = null;
    do {
      const page = await getJSON(`${koord.config.api}/nodes?${qs({ limit: 500, cursor })}`);
      items.push(...page.items);
      cursor = page.next_cursor;
    } while (cursor && items.length < 5000);
    koord.nodes = items;
    const tbody = $("#node-table tbody");
    tbody.textContent = "";
    for (const n of items) {
      const state = n.degraded === null ? "no resources yet" : n.degraded ? "degraded" : "ok";
      const tr = row(tbody, [n.node, n.pods, fmtRes(n.capacity), fmtRes(n.usage), fmtRes(n.prod_usage),
        fmtRes(n.batch_allocatable), fmtRes(n.batch_allocated), fmtRes(n.mid_allocatable), state], { "data-node": n.node });
      if (n.degraded) tr.classList.add("degraded");
      if (n.node === koord.selectedNode) tr.classList.add("selected");
      tr.addEventListener("click", () => selectNode(n.node));
    }
  }

  function selectNode(name) {
    koord.selectedNode = name;
    for (const tr of document.querySelectorAll("#node-table tbody tr")) {
      tr.classList.toggle("selected", tr.getAttribute("data-node") === name);
    }
    loadNodeDetail().catch(report);
  }

  $("#node-close").addEventListener("click", () => {
    koord.selectedNode = null;
    $("#node-detail").hidden = true;
    if (koord.charts.node) { koord.charts.node.destroy(); delete koord.charts.node; }
  });

  const NODE_METRICS = ["capacity", "allocatable", "usage", "prod_used", "mid_used", "batch_used", "free_used"];
  const NODE_COLORS = ["#1d2433", "#7f8c8d", "#c0392b", "#d35400", "#16a085", "#8e44ad", "#2980b9"];

  async function loadNodeDetail() {
    const name = koord.selectedNode;
    if (!name) return;
    $("#node-detail").hidden = false;
    $("#node-name").textContent = name;
    const windowS = Number(windowSelect.value);
    const to = Date.now();
    const suffix = isCpu() ? "cpu_milli" : "memory_bytes";
    const metrics = NODE_METRICS.map((m) => (m === "usage" ? suffix : `${m}_${suffix}`));
    const enc = encodeURIComponent(name);
    const [usage, resources, pods, explained] = await Promise.all([
      getJSON(`${koord.config.api}/nodes/${enc}/usage?${qs({ from: to - windowS * 1000, to, step: stepFor(windowS), metrics: metrics.join(",") })}`),
      getJSON(`${koord.config.api}/nodes/${enc}/resources?${qs({ from: to - windowS * 1000, to, limit: 200 })}`),
      getJSON(`${koord.config.api}/pods?${qs({ node: name, limit: 500 })}`),
      getJSON(`${koord.config.api}/nodes/${enc}/explain?${qs({ from: to - windowS * 1000, to, limit: 2000 })}`)
        .catch(() => ({ items: [] })),  // no report stored yet: the chart says so
    ]);
    const data = [usage.points.map((p) => p.ts / 1000)];
    for (const m of metrics) data.push(usage.points.map((p) => scale(p.avg[m])));
    const labels = NODE_METRICS.map((m) => m.replace("_", " "));
    draw("node", $("#node-chart"), labels, NODE_COLORS, data, { log: logScale.checked });
    drawNodeStack(explained.items || []);

    const rtb = $("#node-resources tbody");
    rtb.textContent = "";
    for (const r of resources.items.slice(-20).reverse()) {
      row(rtb, [fmtTime(r.ts), fmtRes(r.batch), fmtRes(r.mid), r.degraded ? "yes" : "no", r.reason || ""]);
    }
    const ptb = $("#node-pods tbody");
    ptb.textContent = "";
    for (const p of pods.items) {
      row(ptb, [`${p.namespace}/${p.name}`, p.band, p.qos, fmtRes(p.requests), fmtRes(p.batch_requests), fmtRes(p.usage)]);
    }
  }

  // The seed's picture of one node: capacity split into safety margin, system, HP and the batch
  // band on top, at each report of the slo-controller, with the values it used.
  const STACK_BANDS = [["safety margin", "safetyMargin", "#bdc3c7"], ["system", "system", "#7f8c8d"],
    ["HP", "hp", "#d35400"], ["batch", "batch", "#2c6fbb"]];

  function drawNodeStack(items) {
    const res = isCpu() ? "cpu" : "memory";
    const rows = items.filter((it) => it.explained && it.resources && it.resources[res]);
    const note = $("#node-stack-note");
    if (!rows.length) {
      if (koord.charts.nodeStack) { koord.charts.nodeStack.destroy(); delete koord.charts.nodeStack; }
      $("#node-stack").textContent = "No batch allocatable report with its inputs in this window.";
      koord.series.nodeStack = { labels: [], data: [[]] };
      return;
    }
    note.hidden = false;
    const data = [rows.map((it) => it.ts / 1000)];
    for (const [, key] of STACK_BANDS) data.push(rows.map((it) => scale(it.resources[res].bands[key])));
    data.push(rows.map((it) => scale(it.resources[res].terms.capacity)));
    const labels = STACK_BANDS.map((b) => b[0]).concat(["capacity"]);
    const colors = STACK_BANDS.map((b) => b[2]).concat(["#1d2433"]);
    draw("nodeStack", $("#node-stack"), labels, colors, data, { stack: STACK_BANDS.length });
  }

  // ------------------------------------------------------------------ recommendations

  function recommendationsUrl() {
    const direct = params.get("recommender");
    if (direct) return direct.replace(/\/$/, "") + "/api/v1/recommendations";
    return koord.config.recommendations_path || "";
  }

  async function loadRecommendations() {
    const base = recommendationsUrl();
    const note = $("#recommendations-note");
    const tbody = $("#recommendation-table tbody");
    if (!base) {
      note.textContent = "No recommender configured (KOORD_COLLECTOR_RECOMMENDER_URL or ?recommender=URL).";
      return;
    }
    const body = await getJSON(`${base}?${qs({ limit: 1000 })}`);
    tbody.textContent = "";
    // a workload's estimated_savings leaves out its provisional recommendations (under a day of history)
    let cpu = 0, mem = 0, provisional = 0;
    for (const w of body.items) {
      if (w.estimated_savings) { cpu += w.estimated_savings.cpu_milli; mem += w.estimated_savings.memory_bytes; }
      provisional += w.containers.filter((c) => c.provisional).length;
    }
    // The workloads with most to give back first; the table keeps to the top ones.
    const saving = (w) => (w.estimated_savings ? w.estimated_savings.cpu_milli : -Infinity);
    const ranked = body.items.slice().sort((a, b) => saving(b) - saving(a)).slice(0, MAX_RECOMMENDATIONS);
    for (const w of ranked) {
      for (const c of w.containers) {
        let status = "ready";
        if (c.provisional) {
          status = document.createElement("span");
          status.className = "tag";
          status.textContent = "provisional";
          status.title = "less than a day of history: not counted in the estimated savings";
        }
        // the method behind the target; one set but without samples of its own yet shows VPA's
        const m = c.method || {};
        const method = document.createElement("span");
        method.textContent = m.used || "-";
        if (m.configured && m.configured !== m.used) {
          method.textContent += ` (set: ${m.configured})`;
          method.title = `${m.configured} has no samples of its own yet: ${m.used}'s target stands`;
        }
        const tr = row(tbody, [`${w.namespace}/${w.kind}/${w.name}`, c.container, fmtRes(c.current_requests),
          fmtRes(c.recommendation.target), c.recommendation.confidence.toFixed(2), fmtRes(c.estimated_savings), status,
          method]);
        if (c.provisional) tr.classList.add("provisional");
      }
    }
    $("#savings").textContent = `estimated savings ${(cpu / 1000).toFixed(1)} cores, ${(mem / GIB).toFixed(1)} GiB` +
      (provisional ? ` (${provisional} provisional not counted)` : "");
    koord.savings = { cpu_milli: cpu, memory_bytes: mem, provisional };
    koord.recommendations = { shown: ranked.length, total: body.total };
    note.textContent = `${ranked.length} of ${body.total} workloads, largest CPU savings first; ` +
      "savings are (current requests − target) × replicas, counted only for recommendations with at least a day " +
      "of history (the others are marked provisional).";
  }

  // ------------------------------------------------------------------ events

  async function loadEvents() {
    const body = await getJSON(`${koord.config.api}/events?${qs({ kind: eventKind.value, limit: MAX_EVENTS })}`);
    const tbody = $("#event-table tbody");
    tbody.textContent = "";
    for (const e of body.items) {
      const [scope, target, full] = describeTarget(e.target || {});
      const cell = document.createElement("span");
      cell.textContent = target;
      cell.title = full;
      row(tbody, [fmtTime(e.ts), e.kind, e.node, e.action, scope, cell, e.reason, e.dry_run ? "yes" : "no"]);
    }
    koord.events = body.items.length;
  }

  // [scope, what is shown, the whole target]: a pod by namespace/name; a cgroup write by its
  // level and the last parts of its path (pod and container dirs differ only at the end).
  function describeTarget(t) {
    if (t.name) {
      const name = `${t.namespace ? t.namespace + "/" : ""}${t.name}`;
      return ["pod", t.target_node ? `${name} → ${t.target_node}` : name, JSON.stringify(t)];
    }
    if (t.path) {
      const parts = t.path.split("/").filter(Boolean);
      const tail = parts.slice(-2).join("/");
      const scope = t.level || (parts.length > 3 ? "container" : parts.length > 2 ? "pod" : "node");
      return [scope, `${parts.length > 2 ? "…/" : ""}${tail}${t.file ? " " + t.file : ""}`, `${t.path} ${t.file || ""}`];
    }
    return ["–", JSON.stringify(t), JSON.stringify(t)];
  }

  // ------------------------------------------------------------------ what-if report

  async function loadWhatif() {
    const resp = await fetch(`${koord.config.api}/whatif/last`, { headers: { Accept: "application/json" } });
    koord.requests.push(`${koord.config.api}/whatif/last`);
    if (resp.status === 404) {
      $("#whatif-empty").hidden = false;
      $("#whatif-body").hidden = true;
      koord.whatif = null;
      return;
    }
    if (!resp.ok) throw new Error(`${koord.config.api}/whatif/last answered ${resp.status}`);
    const w = await resp.json();
    if (koord.whatif && koord.whatif.ts === w.ts) return;  // unchanged: keep the images as loaded
    koord.whatif = w;
    $("#whatif-empty").hidden = true;
    $("#whatif-body").hidden = false;
    $("#whatif-when").textContent = `published ${new Date(w.ts).toLocaleString()}`;
    $("#whatif-title").textContent = (w.scenario && w.scenario.title) || "";
    $("#whatif-recommendation").textContent = w.recommended ? `Recommended: ${w.recommended}: ${w.why}` : w.why || "";
    const head = $("#whatif-table thead tr"), body = $("#whatif-table tbody");
    head.textContent = ""; body.textContent = "";
    if (w.table) {
      for (const c of w.table.columns) { const th = document.createElement("th"); th.textContent = c; head.appendChild(th); }
      for (const r of w.table.rows) {
        const tr = row(body, r);
        if (r[0] === w.recommended) tr.classList.add("recommended");
      }
    } else {
      row(body, ["the report was published without report.md: no table"]);
    }
    const plots = $("#whatif-plots");
    plots.textContent = "";
    for (const [name, url] of Object.entries(w.plots || {})) {
      const img = document.createElement("img");
      img.src = url; img.alt = name; img.setAttribute("data-plot", name);
      plots.appendChild(img);
    }
    const fights = $("#whatif-fights");
    fights.textContent = "";
    for (const c of w.configs || []) {
      for (const f of c.findings || []) {
        const li = document.createElement("li");
        li.textContent = `${c.name}: ${f.level} ${f.settings.join(" vs ")}: ${f.problem} Fix: ${f.fix}`;
        if (f.level === "error") li.classList.add("error");
        fights.appendChild(li);
      }
    }
    $("#whatif-fights-head").hidden = fights.childElementCount === 0;
    const ul = $("#whatif-assumptions");
    ul.textContent = "";
    for (const a of w.assumptions || []) { const li = document.createElement("li"); li.textContent = a; ul.appendChild(li); }
  }

  // ------------------------------------------------------------------ refresh loop

  function report(err) {
    koord.errors.push(String(err && err.message ? err.message : err));
    setStatus(String(err && err.message ? err.message : err), true);
  }

  let running = false;
  async function refresh() {
    if (running) return;
    running = true;
    try {
      const results = await Promise.allSettled([loadCluster(), loadNodes(), loadRecommendations(), loadEvents(),
        loadNodeDetail(), loadWhatif()]);
      const failed = results.filter((r) => r.status === "rejected");
      failed.forEach((r) => report(r.reason));
      koord.refreshes += 1;
      if (!failed.length) setStatus(`updated ${fmtTime(Date.now())}`, false);
    } finally {
      running = false;
    }
  }

  async function start() {
    try {
      koord.config = await getJSON("/dashboard/config.json");
    } catch (err) {
      report(err);
      koord.config = { api: "/api/v1", recommendations_path: "", refresh_s: 15 };
    }
    const every = Number(params.get("refresh")) || koord.config.refresh_s || 15;
    for (const el of [windowSelect, resourceSelect, eventKind, logScale]) el.addEventListener("change", refresh);
    await refresh();
    if (koord.selectedNode) selectNode(koord.selectedNode);
    koord.timer = setInterval(refresh, Math.max(2, every) * 1000);
  }

  start();
})();
