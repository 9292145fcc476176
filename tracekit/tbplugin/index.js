// The tracekit tab: pick a view (every run, one run, or two runs as a diff) and show its offline report.
// Runs inside TensorBoard's plugin iframe (base href: plugin/tracekit/); names reach the page as text only.
function el(tag, attrs, text) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
}

function options(select, names) {
  for (const n of names) select.appendChild(el("option", {value: n}, n));
}

export async function render() {
  document.body.style.margin = "0";
  document.body.style.font = "14px system-ui, sans-serif";
  const bar = document.body.appendChild(el("div", {id: "tk-bar", style: "padding:8px 12px;border-bottom:1px solid #ddd;display:flex;gap:10px;align-items:center;flex-wrap:wrap"}));
  const status = el("span", {id: "tk-status", style: "color:#666"}, "listing runs\u2026");
  const frame = el("iframe", {id: "tk-report", title: "tracekit report", style: "border:0;width:100%;height:calc(100vh - 52px)"});
  let listing;
  try {
    const resp = await fetch("./runs");
    listing = await resp.json();
  } catch (err) {
    bar.appendChild(el("span", {}, "tracekit: cannot list runs (" + err + ")"));
    return;
  }
  const names = listing.runs.map((r) => r.name);
  if (!names.length) {
    bar.appendChild(el("span", {}, "No profiler traces (*.pt.trace.json[.gz]) under " + listing.logdir));
    return;
  }
  const mode = el("select", {id: "tk-mode"});
  mode.appendChild(el("option", {value: "all"}, "all runs (" + names.length + ")"));
  mode.appendChild(el("option", {value: "run"}, "one run"));
  mode.appendChild(el("option", {value: "diff"}, "diff of two runs"));
  const first = el("select", {id: "tk-run"});
  const second = el("select", {id: "tk-after"});
  options(first, names);
  options(second, names);
  if (names.length > 1) second.selectedIndex = 1;
  const vs = el("span", {}, "\u2192");
  // "open annotated trace": the selected run's trace with tracekit's block tracks, a .json.gz download for
  // Perfetto UI or chrome://tracing; a run of several trace files (one per rank or worker) picks one first.
  const traces = el("select", {id: "tk-trace", title: "the run's trace file to annotate"});
  const link = el("a", {id: "tk-annotated", download: "", title: "a copy of this trace with tracekit's attention " +
    "blocks above the kernels: open it in ui.perfetto.dev or chrome://tracing"}, "open annotated trace");
  bar.append(el("b", {}, "tracekit"), mode, first, vs, second, traces, link, status);
  const filesOf = Object.fromEntries(listing.runs.map((r) => [r.name, r.traces || []]));

  function pickTraces() {
    traces.replaceChildren();
    options(traces, filesOf[first.value] || []);
    traces.style.display = traces.options.length > 1 ? "" : "none";
    aim();
  }

  function aim() {
    const on = mode.value === "run" && traces.value;
    link.style.display = on ? "" : "none";
    if (on) link.setAttribute("href", "./annotated?run=" + encodeURIComponent(first.value) +
                              "&file=" + encodeURIComponent(traces.value));
  }

  function show() {
    const m = mode.value;
    first.style.display = m === "all" ? "none" : "";
    vs.style.display = second.style.display = m === "diff" ? "" : "none";
    pickTraces();
    if (m !== "run") traces.style.display = "none";
    let q = "";
    if (m === "run") q = "?run=" + encodeURIComponent(first.value);
    if (m === "diff") q = "?before=" + encodeURIComponent(first.value) + "&after=" + encodeURIComponent(second.value);
    status.textContent = "analysing\u2026";
    frame.src = "./report" + q;
  }
  frame.addEventListener("load", () => { status.textContent = ""; });
  for (const s of [mode, first, second]) s.addEventListener("change", show);
  traces.addEventListener("change", aim);
  document.body.appendChild(frame);
  show();
}
