// The live page (controller/live.py serves it): the fabric drawn from /topology.json, redrawn from
// every frame /events pushes. A link's colour is the utilisation band of its busier direction, as
// INT last reported it; a direction INT has not reported for stale_s (/topology.json) is idle. window.starnetLive
// keeps what the tests read: frames seen, and every colour change with how long after the INT
// report behind it the page drew it.
"use strict";

const BANDS = [[0.2, "#aab4be", "below 20%"], [0.4, "#2e9d5b", "20-40%"], [0.6, "#d4b106", "40-60%"],
               [0.8, "#e8730c", "60-80%"], [Infinity, "#d0312d", "80% and above"]];
const HISTORY_S = 60;
const live = window.starnetLive = { frames: 0, colourChanges: [], last: null, cy: null, selected: null };
const history = {};  // link id -> [[t...], [util a>b...], [util b>a...], [queue a>b...], [queue b>a...]]
const previousSeen = {};
let plot = null;

function band(util) {
  for (const [top, colour] of BANDS) if (util < top) return colour;
  return BANDS[BANDS.length - 1][1];
}

function text(el, value) { document.getElementById(el).textContent = value; }

function legend() {
  const footer = document.getElementById("legend");
  footer.append("utilisation (busier direction, INT):");
  for (const [, colour, label] of BANDS) {
    const swatch = document.createElement("span");
    swatch.style.background = colour;
    footer.append(swatch, label);
  }
  footer.append("  ·  dashed: down  ·  dotted: lossy  ·  red outline: the localiser's alert  ·  q: queue (packets)");
}

async function start() {
  legend();
  const topo = await (await fetch("/topology.json")).json();
  text("title", `StarNet live — ${topo.name}`);
  live.topology = topo;
  const elements = [];
  for (const sv of topo.servers || []) {  // a multi-GPU server: a box round its GPUs (NVLink inside it)
    elements.push({ group: "nodes", data: { id: sv.name, kind: "server",
                                            label: `${sv.name} · NVLink ${(sv.nvlink_bps / 1e6).toFixed(0)} Mbit/s` } });
  }
  for (const n of topo.nodes) {
    const data = { id: n.name, kind: n.kind, role: n.role, label: n.name };
    if (n.server) data.parent = n.server;
    elements.push({ group: "nodes", data, position: { x: n.x, y: n.y } });
  }
  for (const l of topo.links) {
    elements.push({ group: "edges", data: { id: l.id, source: l.a, target: l.b, colour: BANDS[0][1], qa: "", qb: "" } });
  }
  live.cy = cytoscape({
    container: document.getElementById("graph"), elements, layout: { name: "preset", padding: 30 },
    style: [
      { selector: "node", style: { label: "data(label)", "text-valign": "center", "font-size": 11, color: "#fff",
                                   "background-color": "#3c4a58", width: 34, height: 34 } },
      { selector: "node[kind = 'server']", style: { shape: "round-rectangle", "background-color": "#8fb3d9",
                                                    "background-opacity": 0.15, "border-width": 1,
                                                    "border-style": "dashed", "border-color": "#1f5f99",
                                                    "text-valign": "bottom", "text-margin-y": 4, color: "#1d2733",
                                                    padding: 8 } },
      { selector: "node[kind = 'switch']", style: { shape: "round-rectangle", width: 44, "background-color": "#1f5f99" } },
      { selector: "node.suspect", style: { "border-width": 4, "border-color": "#d0312d" } },
      { selector: "edge", style: { width: 5, "line-color": "data(colour)", "curve-style": "straight",
                                   "source-label": "data(qa)", "target-label": "data(qb)", "font-size": 10,
                                   "source-text-offset": 28, "target-text-offset": 28, color: "#1d2733",
                                   "text-background-color": "#fff", "text-background-opacity": 0.8 } },
      { selector: "edge.down", style: { "line-style": "dashed", "line-color": "#5b6670", width: 3 } },
      { selector: "edge.lossy", style: { "line-style": "dotted" } },
      { selector: "edge.suspect", style: { "underlay-color": "#d0312d", "underlay-opacity": 0.35, "underlay-padding": 5 } },
      { selector: "edge:selected", style: { "overlay-color": "#1f5f99", "overlay-opacity": 0.25, "overlay-padding": 6 } },
    ],
  });
  live.cy.on("tap", "edge", (event) => select(event.target.id()));
  const source = new EventSource("/events" + location.search);
  source.onopen = () => { text("status", "live"); document.getElementById("status").className = "status live"; };
  source.onerror = () => { text("status", "connection lost: retrying"); document.getElementById("status").className = "status lost"; };
  source.onmessage = (message) => render(JSON.parse(message.data));
}

function render(frame) {
  const drawnAt = Date.now() / 1000;
  live.frames += 1;
  live.last = frame;
  if (frame.replay) {
    const r = frame.replay;
    text("status", `replay of ${r.run}: ${(frame.t - r.t0).toFixed(1)} s of ${(r.t1 - r.t0).toFixed(1)} s (x${r.speed})`);
  }
  const ports = {};
  for (const [sw, port, peer, util, queue, hop, seen] of frame.ports) {
    const key = `${sw}>${peer}`;
    const idle = seen === null || frame.t - seen > live.topology.stale_s;
    const fresh = !idle && previousSeen[key] !== seen;  // INT reported it since the last frame
    previousSeen[key] = seen;
    ports[key] = { util: idle ? 0 : util, queue: idle ? 0 : queue, hop, seen, fresh };
  }
  const cy = live.cy;
  cy.batch(() => {
    for (const link of live.topology.links) {
      const edge = cy.getElementById(link.id);
      const ab = ports[`${link.a}>${link.b}`], ba = ports[`${link.b}>${link.a}`];
      const util = Math.max(ab ? ab.util : 0, ba ? ba.util : 0);
      const colour = band(util);
      if (edge.data("colour") !== colour) {
        const fresh = [ab, ba].filter((p) => p && p.fresh).map((p) => p.seen);
        // the report behind the change is among those new in this frame; the oldest of them bounds it
        const latency = fresh.length ? (drawnAt - Math.min(...fresh)) * 1000 : null;
        live.colourChanges.push({ link: link.id, from: edge.data("colour"), to: colour, util, at: drawnAt,
                                  frame: frame.frame, t: frame.t, ab, ba,
                                  latency_ms: latency, rising: BANDS.findIndex((b) => b[1] === colour) >
                                  BANDS.findIndex((b) => b[1] === edge.data("colour")) });
        edge.data("colour", colour);
      }
      edge.data("qa", ab && ab.queue ? `q ${ab.queue}` : "");
      edge.data("qb", ba && ba.queue ? `q ${ba.queue}` : "");
      const series = history[link.id] || (history[link.id] = [[], [], [], [], []]);
      series[0].push(frame.t);
      series[1].push(ab ? ab.util : null); series[2].push(ba ? ba.util : null);
      series[3].push(ab ? ab.queue : null); series[4].push(ba ? ba.queue : null);
      while (series[0].length && series[0][0] < frame.t - HISTORY_S) series.forEach((s) => s.shift());
    }
    for (const state of frame.links) {
      const edge = cy.getElementById(`${state.a}-${state.b}`);
      edge.toggleClass("down", !state.up);
      edge.toggleClass("lossy", state.lossy);
    }
    cy.elements().removeClass("suspect");
    for (const s of frame.suspects.filter((x) => x.alert)) {
      const [kind, name] = s.target.split(" ");  // "link s1-s3", "switch s3", "host h3"
      if (kind === "link") {
        const [a, b] = name.split("-");
        cy.getElementById(`${a}-${b}`).union(cy.getElementById(`${b}-${a}`)).addClass("suspect");
      } else cy.getElementById(name).addClass("suspect");
    }
  });
  suspects(frame.suspects);
  advice(frame.advice);
  timeline(frame.events, frame.t);
  fidelity(frame.fidelity);
  if (live.selected) drawSeries();
}

function list(id, items, empty, fill) {
  const el = document.getElementById(id);
  el.replaceChildren();
  if (!items.length) {
    const li = document.createElement("li");
    li.className = "none"; li.textContent = empty; el.append(li);
  }
  for (const item of items) { const li = document.createElement("li"); fill(li, item); el.append(li); }
}

function suspects(items) {
  list("suspects", items, "none", (li, s) => {
    li.className = s.alert ? "alert" : "";
    li.textContent = `${s.target}: ${s.fault} (score ${s.score.toFixed(2)})${s.alert ? " ALERT" : ""}`;
    const why = document.createElement("span");
    why.className = "evidence"; why.textContent = s.evidence; li.append(why);
  });
}

function rate(bps) { return bps >= 1e6 ? `${(bps / 1e6).toFixed(1)} Mbit/s` : `${(bps / 1e3).toFixed(0)} kbit/s`; }

function advice(byHost) {
  const body = document.querySelector("#advice tbody");
  body.replaceChildren();
  const hosts = Object.keys(byHost);
  if (!hosts.length) { body.innerHTML = '<tr><td class="none">none in force</td></tr>'; return; }
  for (const host of hosts) {
    const row = document.createElement("tr");
    const to = Object.entries(byHost[host]).map(([dst, bps]) => `${dst} ${rate(bps)}`).join(", ");
    row.innerHTML = "<td></td><td></td>";
    row.cells[0].textContent = host; row.cells[1].textContent = to;
    body.append(row);
  }
}

function timeline(events, now) {
  list("timeline", events.slice().reverse(), "none yet", (li, e) => {
    li.className = e.kind;
    const at = new Date(e.t * 1000).toTimeString().slice(0, 8);
    li.textContent = `${at} (${(now - e.t).toFixed(1)} s ago): ${e.text}`;
  });
}

function fidelity(f) {
  const el = document.getElementById("fidelity");
  if (!f) { el.textContent = "fidelity: not measured"; return; }
  el.textContent = `timing held in ${(100 * f.held).toFixed(0)}% of the last ${f.seconds} s' 100 ms windows` +
    (f.worst_at ? `; worst ${f.worst_ms} ms on ${f.worst_at}` : "");
  el.className = f.held < 0.9 ? "fidelity poor" : "fidelity";
}

function select(id) {
  live.selected = id;
  const link = live.topology.links.find((l) => l.id === id);
  text("selected", `${link.a} → ${link.b} and ${link.b} → ${link.a}, ${rate(link.capacity_bps)}`);
  if (plot) plot.destroy();
  plot = new uPlot({
    width: 400, height: 180,
    scales: { util: { range: [0, 1] }, q: {} },
    axes: [{}, { scale: "util", label: "utilisation" }, { scale: "q", side: 1, label: "queue (pkts)", grid: { show: false } }],
    series: [{}, { label: `${link.a}→${link.b}`, scale: "util", stroke: "#1f5f99" },
             { label: `${link.b}→${link.a}`, scale: "util", stroke: "#e8730c" },
             { label: `q ${link.a}→${link.b}`, scale: "q", stroke: "#1f5f99", dash: [4, 4] },
             { label: `q ${link.b}→${link.a}`, scale: "q", stroke: "#e8730c", dash: [4, 4] }],
  }, history[id] || [[], [], [], [], []], document.getElementById("series"));
}

function drawSeries() { if (plot) plot.setData(history[live.selected]); }

start().catch((error) => { text("status", `cannot start: ${error}`); });
