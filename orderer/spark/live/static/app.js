// The live page: polls the job's documents and redraws what changed (read-only).
"use strict";

const POLL_MS = 500;
const state = { run: null, batch: null, log: {}, shown: {} };

function api(path) {
  return fetch(path, { cache: "no-store" }).then((r) => (r.ok ? r.json() : null));
}

function runPath(run) {
  return "api/runs/" + encodeURIComponent(run);
}

function fmt(value) {
  if (value === null || value === undefined) return "–";
  return typeof value === "number" ? value.toLocaleString("en") : String(value);
}

function fillRows(tbody, rows) {
  tbody.replaceChildren(
    ...rows.map((cells) => {
      const tr = document.createElement("tr");
      cells.forEach((cell, k) => {
        const td = document.createElement(k === 0 ? "th" : "td");
        td.textContent = fmt(cell);
        tr.appendChild(td);
      });
      return tr;
    })
  );
}

function panel(entry) {
  let div = document.getElementById("h-" + entry.name);
  if (div) return div;
  div = document.createElement("div");
  div.className = "panel";
  div.id = "h-" + entry.name;
  const title = document.createElement("h2");
  const name = document.createElement("span");
  name.className = "title";
  const button = document.createElement("button");
  button.className = "scale";
  button.addEventListener("click", () => {
    state.log[entry.name] = !state.log[entry.name];
    delete state.shown[entry.name];
    refresh();
  });
  title.append(name, button);
  const plot = document.createElement("div");
  plot.className = "plot";
  const flows = document.createElement("div");
  flows.className = "flows";
  div.append(title, plot, flows);
  document.getElementById("histograms").appendChild(div);
  return div;
}

function draw(div, h) {
  const log = state.log[h.name] !== undefined ? state.log[h.name] : h.log;
  state.log[h.name] = log;
  div.querySelector(".title").textContent = h.title;
  div.querySelector(".scale").textContent = log ? "log → linear" : "linear → log";
  const flows = h.dimensions === 2
    ? (h.outside === undefined ? "" : `; ${fmt(h.outside)} outside the range`)
    : `; underflow ${fmt(h.underflow)}, overflow ${fmt(h.overflow)}`;
  div.querySelector(".flows").textContent = `${fmt(h.entries)} entries${flows}; as of micro-batch ${h.batch}`;
  const plot = div.querySelector(".plot");
  const layout = {
    margin: { l: 60, r: 20, t: 10, b: 45 },
    xaxis: { title: { text: h.x.label } },
  };
  let data;
  if (h.dimensions === 1) {
    const edges = h.x.edges;
    data = [{
      x: edges,
      y: h.counts.concat(h.counts.length ? [h.counts[h.counts.length - 1]] : []),
      type: "scatter", mode: "lines", line: { shape: "hv", color: "#6a3d9a" },
      hovertemplate: "%{x}: %{y}<extra></extra>",
    }];
    layout.yaxis = { title: { text: "counts" }, type: log ? "log" : "linear" };
  } else {
    const z = [];  // z[y][x]: the counts are given per x bin
    const nx = h.counts.length, ny = nx ? h.counts[0].length : 0;
    for (let j = 0; j < ny; j++) {
      const row = [];
      for (let i = 0; i < nx; i++) {
        const c = h.counts[i][j];
        row.push(log ? (c > 0 ? Math.log10(c) : null) : c);
      }
      z.push(row);
    }
    const axis = (a) => (a.categories ? a.categories : a.edges.slice(0, -1).map((e, k) => (e + a.edges[k + 1]) / 2));
    data = [{
      z: z, x: axis(h.x), y: axis(h.y), type: "heatmap", colorscale: "Viridis",
      colorbar: { title: { text: log ? "log10 counts" : "counts" } },
    }];
    layout.yaxis = { title: { text: h.y.label }, type: h.y.categories ? "category" : "linear" };
    if (h.x.categories) layout.xaxis.type = "category";
  }
  Plotly.react(plot, data, layout, { displaylogo: false, responsive: true });
}

async function refresh() {
  const runs = await api("api/runs");
  if (!runs || !runs.runs.length) return;
  const select = document.getElementById("runs");
  const names = runs.runs.map((r) => r.run);
  if (select.options.length !== names.length) {
    select.replaceChildren(...names.map((n) => new Option(n, n)));
    if (state.run === null || !names.includes(state.run)) state.run = names[names.length - 1];
  }
  select.value = state.run;
  const index = await api(runPath(state.run));
  if (!index) return;
  document.getElementById("run-title").textContent = "run " + index.run;
  const badge = document.getElementById("state");
  badge.textContent = index.state;
  badge.className = index.state;
  const rates = index.rates;
  fillRows(document.querySelector("#numbers tbody"), [
    ["micro-batches", index.micro_batches],
    ["events", index.events],
    ["barrier rows", index.barrier_rows],
    ["fragments", index.fragments],
    ["late fragments", index.late_fragments],
    ["late fraction", (100 * index.late_fraction).toFixed(3) + " %"],
    ["fragments / s", rates.fragments_per_second === null ? null : Math.round(rates.fragments_per_second)],
    ["events / s", rates.events_per_second === null ? null : Math.round(rates.events_per_second)],
  ]);
  fillRows(document.querySelector("#sources tbody"), index.sources.map((s) => [s.source, s.fragments, s.late]));
  fillRows(document.querySelector("#stages tbody"), index.stages.map((s) => [s.name, s.rows]));
  document.getElementById("stages").hidden = index.stages.length === 0;
  for (const entry of index.histograms) {
    const div = panel(entry);
    if (state.shown[entry.name] === index.batch + "/" + state.run) continue;
    const h = await api(runPath(state.run) + "/histograms/" + encodeURIComponent(entry.name));
    if (!h) continue;
    draw(div, h);
    state.shown[entry.name] = index.batch + "/" + state.run;
  }
}

document.getElementById("runs").addEventListener("change", (e) => {
  state.run = e.target.value;
  state.shown = {};
  document.getElementById("histograms").replaceChildren();
  refresh();
});

refresh();
setInterval(refresh, POLL_MS);
