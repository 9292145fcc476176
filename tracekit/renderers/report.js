/* tracekit report: draws the embedded JSON (tracekit.renderers.html). Data only ever reaches the page
   through textContent and setAttribute, never as markup. No network, no libraries. */
(function () {
  "use strict";
  var DATA = JSON.parse(document.getElementById("tk-data").textContent);
  var APP = document.getElementById("app");
  var SVGNS = "http://www.w3.org/2000/svg";
  var CAT_COL = {matmul: "#4e79a7", softmax: "#f28e2b", fused_attention: "#59a14f", memory: "#e15759",
                 elementwise: "#76b7b2", other: "#b8b0ac"};
  var ROLE_COL = ["#1f4e79", "#6a9fd4", "#a9c8ea", "#c7b8e8", "#8c6bb1", "#ddd"];
  var PALETTE = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7",
                 "#9c755f", "#bab0ac"];

  function el(tag, attrs, text) {
    var e = document.createElement(tag);
    if (attrs) for (var k in attrs) if (attrs[k] !== null && attrs[k] !== undefined) e.setAttribute(k, attrs[k]);
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }
  function sv(tag, attrs, text) {
    var e = document.createElementNS(SVGNS, tag);
    if (attrs) for (var k in attrs) e.setAttribute(k, attrs[k]);
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }
  function tip(node, text) { node.appendChild(sv("title", null, text)); return node; }
  function add(parent, child) { parent.appendChild(child); return child; }

  /* The Python renderers' units (tracekit.renderers.base.fmt_time), so a figure reads the same everywhere. */
  function fmt(us) {
    if (us === null || us === undefined) return "n/a";
    var a = Math.abs(us);
    if (a >= 1e6) return (us / 1e6).toFixed(2) + " s";
    if (a >= 1e3) return (us / 1e3).toFixed(2) + " ms";
    if (a >= 100) return us.toFixed(0) + " \u00b5s";
    return us.toFixed(1) + " \u00b5s";
  }
  function signed(us) { return Math.abs(us) < 0.05 ? "0.0 \u00b5s" : (us > 0 ? "+" : "") + fmt(us); }
  function pct(x) { return x === null || x === undefined ? "n/a" : (100 * x).toFixed(1) + "%"; }
  function keys(o) { return o ? Object.keys(o) : []; }

  function legend(parent, names, colours) {
    var d = add(parent, el("div", {"class": "legend"}));
    names.forEach(function (n, i) {
      var s = add(d, el("span"));
      add(s, el("i", {style: "background:" + colours(n, i)}));
      s.appendChild(document.createTextNode(n));
    });
  }

  /* A table whose header cells sort it; each cell: {text, value (sort key, also data-v), title, cls}. */
  function table(parent, heads, rows, onPick) {
    var t = add(parent, el("table", {"class": "sortable"}));
    var tr = add(add(t, el("thead")), el("tr"));
    var body = add(t, el("tbody"));
    var state = {col: -1, dir: 1};
    heads.forEach(function (h, i) {
      var th = add(tr, el("th", {"class": h.num ? "num" : null, "data-col": i}, h.name));
      th.addEventListener("click", function () {
        state.dir = state.col === i ? -state.dir : (h.num ? -1 : 1);
        state.col = i;
        Array.prototype.forEach.call(tr.children, function (c) { c.classList.remove("sorted-asc", "sorted-desc"); });
        th.classList.add(state.dir > 0 ? "sorted-asc" : "sorted-desc");
        rows.sort(function (a, b) {
          var x = a.cells[i].value, y = b.cells[i].value;
          if (x === y) return 0;
          if (x === null || x === undefined) return 1;
          if (y === null || y === undefined) return -1;
          return (x < y ? -1 : 1) * state.dir;
        });
        draw();
      });
    });
    function draw() {
      while (body.firstChild) body.removeChild(body.firstChild);
      rows.forEach(function (r) {
        var row = add(body, el("tr", {"class": onPick ? "pick" : null}));
        if (r.attrs) for (var k in r.attrs) row.setAttribute(k, r.attrs[k]);
        r.cells.forEach(function (c, i) {
          var v = c.value === null || c.value === undefined ? "" : String(c.value);
          add(row, el("td", {"class": c.cls || (heads[i].num ? "num" : null), title: c.title, "data-v": v}, c.text));
        });
        if (onPick) row.addEventListener("click", function () {
          Array.prototype.forEach.call(body.children, function (x) { x.classList.remove("on"); });
          row.classList.add("on");
          onPick(r);
        });
      });
    }
    draw();
    return t;
  }
  function cell(text, value, extra) {
    var c = {text: text, value: value === undefined ? text : value};
    if (extra) for (var k in extra) c[k] = extra[k];
    return c;
  }
  function nameCell(name) {
    var short = name.length > 90 ? name.slice(0, 87) + "\u2026" : name;
    return cell(short, name, {title: name, cls: "name"});
  }

  /* Stacked horizontal bars: one row per group; each segment one category (or role), width by time. */
  function stackedBars(parent, groups, segKeys, colour, opts) {
    opts = opts || {};
    var box = add(parent, el("div", {"class": "bars"}));
    var max = 0;
    groups.forEach(function (g) { max = Math.max(max, g.total); });
    groups.forEach(function (g) {
      var row = add(box, el("div", {"class": "row", "data-label": g.label, "data-us": g.total}));
      add(row, el("div", {"class": "lab", title: g.label}, g.label));
      var w = 600, h = opts.height || 16;
      var s = add(row, sv("svg", {viewBox: "0 0 " + w + " " + h, width: "100%", height: h,
                                  preserveAspectRatio: "none"}));
      var x = 0;
      segKeys.forEach(function (k, i) {
        var v = g.parts[k] || 0;
        if (v <= 0 || max <= 0) return;
        var ww = w * v / max;
        tip(add(s, sv("rect", {x: x, y: 0, width: Math.max(ww, 0.5), height: h, fill: colour(k, i),
                                 "data-key": k, "data-us": v})),
            g.label + " \u2014 " + k + ": " + fmt(v) + " (" + pct(g.total > 0 ? v / g.total : 0) + ")");
        x += ww;
      });
      add(row, el("div", {"class": "tot num"}, fmt(g.total) + (g.note ? " \u00b7 " + g.note : "")));
    });
    return box;
  }

  function groupBlocks(blocks, keyOf) {
    var out = [], index = {};
    blocks.forEach(function (b) {
      var k = keyOf(b);
      var g = index[k];
      if (!g) {
        g = index[k] = {label: k, total: 0, n: 0, parts: {}, roles: b.matmul_roles ? {} : null, flops: 0, bytes: 0,
                        timed: 0};
        out.push(g);
      }
      g.n += 1;
      g.total += b.total_us;
      keys(b.categories).forEach(function (c) { g.parts[c] = (g.parts[c] || 0) + b.categories[c]; });
      if (g.roles && b.matmul_roles) keys(b.matmul_roles).forEach(function (r) {
        g.roles[r] = (g.roles[r] || 0) + b.matmul_roles[r];
      }); else g.roles = null;
      var e = b.efficiency;
      if (e && e.flops !== null && e.time_us) { g.flops += e.flops; g.bytes += e.bytes || 0; g.timed += e.time_us; }
    });
    out.forEach(function (g) {
      if (g.timed > 0) g.note = (g.flops / g.timed / 1e6).toFixed(1) + " TFLOP/s, " + (g.bytes / g.timed / 1e3).toFixed(0) + " GB/s";
    });
    return out;
  }
  function phaseSuffix(b) { return b.phase && b.phase !== "forward" ? " (" + b.phase + ")" : ""; }

  function blockSection(parent, title, groups, cats, roleKeys) {
    add(parent, el("h2", null, title));
    var sec = add(parent, el("div", {"class": "section", "data-section": title}));
    stackedBars(sec, groups, cats, function (k) { return CAT_COL[k] || "#999"; });
    var withRoles = groups.filter(function (g) { return g.roles && g.parts.matmul > 0; });
    if (withRoles.length && roleKeys.length) {
      add(sec, el("div", {"class": "sub"}, "matmul by role"));
      legend(sec, roleKeys, function (k, i) { return ROLE_COL[i % ROLE_COL.length]; });
      stackedBars(sec, withRoles.map(function (g) {
        return {label: g.label, total: g.parts.matmul, parts: g.roles};
      }), roleKeys, function (k, i) { return ROLE_COL[i % ROLE_COL.length]; }, {height: 10});
    }
  }

  function kernelTable(parent, rows, title) {
    if (!rows.length) return;
    add(parent, el("h2", null, title));
    table(parent, [{name: "kernel / op"}, {name: "category"}, {name: "count", num: true}, {name: "time", num: true}],
          rows.map(function (k) {
            return {cells: [nameCell(k.name), cell(k.category), cell(String(k.count), k.count),
                            cell(fmt(k.total_us), k.total_us)]};
          }));
  }

  function renderAttribution(parent, R, heading) {
    var t = R.totals;
    var cats = keys(t.categories);
    var roleKeys = keys(t.matmul_roles);
    add(parent, el("h1", null, heading));
    var base = 0;
    R.traces.forEach(function (x) { base += x.base_us; });
    add(parent, el("div", {"class": "summary", "data-total-us": t.total_us, "data-blocks": t.blocks},
        t.blocks + " attention blocks, " + fmt(t.total_us) + " busy \u00b7 " + pct(t.attention_share) +
        " of " + (R.time_base === "host" ? "host time" : "device busy time") + " (" + fmt(base) + ")" +
        (t.launch_bound ? " \u00b7 launch-bound: device idle " + pct(t.span_us > 0 ? t.idle_us / t.span_us : 0) +
         " of the blocks' span" : "")));
    R.traces.forEach(function (x) {
      add(parent, el("div", {"class": "sub"}, x.source + ": " + (x.gpus.length ? x.gpus.join(", ") : "no GPU listed") +
          " \u00b7 PyTorch " + (x.pytorch || "n/a") + " \u00b7 " + x.steps.length + " steps \u00b7 " + x.events + " events"));
    });
    (R.warnings || []).forEach(function (w) { add(parent, el("div", {"class": "warn"}, w)); });
    if (!R.blocks.length) {
      add(parent, el("p", null, "No attention blocks found (try --scope REGEX to name your attention modules)."));
      return;
    }
    legend(parent, cats, function (k) { return CAT_COL[k] || "#999"; });
    blockSection(parent, "By block kind", groupBlocks(R.blocks, function (b) { return b.kind + phaseSuffix(b); }),
                 cats, roleKeys);
    blockSection(parent, "By layer", groupBlocks(R.blocks, function (b) { return b.name + phaseSuffix(b); }),
                 cats, roleKeys);
    if (R.timeline) tkTimeline(parent, R.timeline, {el: el, sv: sv, add: add, tip: tip, fmt: fmt, pct: pct,
                                                   legend: legend, CAT_COL: CAT_COL});
    var together = {};  /* hints whose savings count the same kernels: what they save together (the JSON's union) */
    (R.hints || []).forEach(function (h, i) {
      if (!i) add(parent, el("h2", null, "Hints"));
      var ov = h.overlap;
      add(parent, el("div", {"class": "hint"}, "[" + h.rule + "] " + h.message + (ov ? " (overlaps " +
          ov.rules.filter(function (r) { return r !== h.rule; }).join(", ") + ")" : "")));
      if (ov) together[ov.rules.join(" + ")] = ov;
    });
    keys(together).forEach(function (k) {
      var ov = together[k];
      add(parent, el("div", {"class": "hint", "data-overlap": k}, "together: " + k + " save at most " +
          fmt(ov.combined_saving_us) + (ov.combined_saving_pct === null ? "" : " (" + ov.combined_saving_pct + "%)") +
          ", not the sum " + fmt(ov.sum_saving_us) + ": these hints count " + fmt(ov.double_counted_us) +
          " of the same kernels twice"));
    });
    kernelTable(parent, R.top_kernels, R.time_base === "host" ? "Top host ops in blocks (self time)"
                                                              : "Top device kernels in blocks");
  }

  function renderDiff(parent, R) {
    var h = R.headline;
    add(parent, el("h1", null, "diff: " + R.before_source + " \u2192 " + R.after_source));
    var word = h.speedup === null ? "" : (h.speedup >= 1 ? h.speedup.toFixed(2) + "\u00d7 faster"
                                                          : (1 / h.speedup).toFixed(2) + "\u00d7 slower");
    add(parent, el("div", {"class": "summary", "data-delta-us": h.delta_us},
        "attention (" + (R.basis === "median_step" ? "median step" : "total") + "): " + fmt(h.before_us) + " \u2192 " +
        fmt(h.after_us) + " \u00b7 \u0394 " + signed(h.delta_us) +
        (h.delta_pct === null ? "" : " (" + (h.delta_pct > 0 ? "+" : "") + h.delta_pct.toFixed(1) + "%)") +
        (h.no_claim ? " \u00b7 " + h.no_claim : (word ? " \u00b7 " + word : "")) +
        (h.within_noise === null ? "" : h.within_noise ? " \u00b7 within noise" : " \u00b7 beyond noise")));
    add(parent, el("div", {"class": "sub"}, R.basis_note));
    (R.warnings || []).forEach(function (w) { add(parent, el("div", {"class": "warn"}, w)); });
    var cats = keys(R.categories);
    legend(parent, cats, function (k) { return CAT_COL[k] || "#999"; });
    add(parent, el("h2", null, "Before and after, by category"));
    stackedBars(parent, [{label: "before", total: h.before_us, parts: mapCats(R.categories, "before_us")},
                         {label: "after", total: h.after_us, parts: mapCats(R.categories, "after_us")}],
                cats, function (k) { return CAT_COL[k] || "#999"; });
    waterfall(parent, R, cats);
    if (R.matmul_roles) {
      add(parent, el("h2", null, "Matmul by role"));
      table(parent, [{name: "role"}, {name: "before", num: true}, {name: "after", num: true}, {name: "\u0394", num: true}],
            keys(R.matmul_roles).map(function (k) {
              var v = R.matmul_roles[k];
              return {cells: [cell(k), cell(fmt(v.before_us), v.before_us), cell(fmt(v.after_us), v.after_us),
                              cell(signed(v.delta_us), v.delta_us)]};
            }));
    }
    pairedBlocks(parent, R);
    var kc = R.kernels_changed.map(function (k) {
      return {cells: [nameCell(k.name), cell(k.category), cell(k.before.count + "\u00d7 \u2192 " + k.after.count + "\u00d7",
                                                           k.after.count),
                      cell(fmt(k.before.total_us), k.before.total_us), cell(fmt(k.after.total_us), k.after.total_us),
                      cell(signed(k.delta_us), k.delta_us)]};
    });
    if (kc.length) {
      add(parent, el("h2", null, R.noise && R.noise.known === false ? "Kernels on both sides that changed (noise unknown)"
                                                                     : "Kernels on both sides that changed beyond noise"));
      table(parent, [{name: "kernel / op"}, {name: "category"}, {name: "count", num: true}, {name: "before", num: true},
                     {name: "after", num: true}, {name: "\u0394", num: true}], kc);
    }
    kernelTable(parent, R.only_before, "Only before (gone)");
    kernelTable(parent, R.only_after, "Only after (new)");
    (R.conclusions || []).forEach(function (c) { add(parent, el("div", {"class": "hint"}, c)); });
  }
  function mapCats(cats, field) {
    var o = {};
    keys(cats).forEach(function (c) { o[c] = cats[c][field]; });
    return o;
  }

  /* before total, one floating bar per category Δ, after total: the Δs sum to the headline Δ. */
  function waterfall(parent, R, cats) {
    var h = R.headline;
    add(parent, el("h2", null, "Where the change comes from (category \u0394s sum to the total \u0394)"));
    var steps = [{label: "before", from: 0, to: h.before_us, total: true}];
    var level = h.before_us;
    cats.forEach(function (c) {
      var d = R.categories[c].delta_us;
      steps.push({label: c, from: level, to: level + d, delta: d});
      level += d;
    });
    steps.push({label: "after", from: 0, to: h.after_us, total: true});
    var W = 900, H = 260, padL = 76, padB = 40, padT = 16;
    var lo = 0, hi = 0;
    steps.forEach(function (s) { lo = Math.min(lo, s.from, s.to); hi = Math.max(hi, s.from, s.to); });
    if (hi <= lo) hi = lo + 1;
    function y(v) { return padT + (H - padT - padB) * (1 - (v - lo) / (hi - lo)); }
    var svg = add(parent, sv("svg", {"class": "waterfall", viewBox: "0 0 " + W + " " + H, width: W, height: H}));
    add(svg, sv("line", {x1: padL, x2: W - 10, y1: y(0), y2: y(0), stroke: "#999"}));
    [lo, (lo + hi) / 2, hi].forEach(function (v) {
      add(svg, sv("text", {x: padL - 6, y: y(v) + 4, "text-anchor": "end"}, fmt(v)));
    });
    var bw = (W - padL - 10) / steps.length;
    steps.forEach(function (s, i) {
      var top = y(Math.max(s.from, s.to)), bot = y(Math.min(s.from, s.to));
      var fill = s.total ? "#7f8a9c" : (s.delta > 0 ? "#d64545" : "#3c9a5f");
      var attrs = {x: padL + i * bw + bw * 0.15, y: top, width: bw * 0.7, height: Math.max(bot - top, 1), fill: fill,
                   "data-label": s.label};
      if (s.total) attrs["data-us"] = s.to; else attrs["data-delta"] = s.delta;
      tip(add(svg, sv("rect", attrs)), s.label + ": " + (s.total ? fmt(s.to) : signed(s.delta)));
      add(svg, sv("text", {x: padL + i * bw + bw / 2, y: H - padB + 14, "text-anchor": "middle"}, s.label));
      add(svg, sv("text", {x: padL + i * bw + bw / 2, y: H - padB + 28, "text-anchor": "middle"},
                  s.total ? fmt(s.to) : signed(s.delta)));
    });
  }

  function pairedBlocks(parent, R) {
    add(parent, el("h2", null, "Paired blocks (" + R.blocks.length + " pairs; " + R.unmatched_before.length +
        " only before, " + R.unmatched_after.length + " only after)"));
    var groups = [], index = {};
    R.blocks.forEach(function (p) {
      var k = p.before.kind === p.after.kind ? p.before.kind : p.before.kind + " \u2192 " + p.after.kind;
      k += p.phase !== "forward" ? " (" + p.phase + ")" : "";
      var g = index[k];
      if (!g) { g = index[k] = {label: k, n: 0, b: 0, a: 0, cats: {}}; groups.push(g); }
      g.n += 1; g.b += p.before_us; g.a += p.after_us;
      keys(p.categories).forEach(function (c) { g.cats[c] = (g.cats[c] || 0) + p.categories[c].delta_us; });
    });
    [["before", R.unmatched_before], ["after", R.unmatched_after]].forEach(function (side) {
      if (!side[1].length) return;
      var kinds = [], at = {};
      side[1].forEach(function (b) {
        var k = b.kind + (b.phase !== "forward" ? " (" + b.phase + ")" : "");
        if (!at[k]) { at[k] = {label: k, n: 0, us: 0}; kinds.push(at[k]); }
        at[k].n += 1; at[k].us += b.total_us;
      });
      add(parent, el("div", {"class": "sub"}, "blocks only " + side[0] + " (unpaired), all steps"));
      table(parent, [{name: "block kind"}, {name: "n", num: true}, {name: "time", num: true}], kinds.map(function (g) {
        return {attrs: {"data-unpaired": side[0]}, cells: [nameCell(g.label), cell(String(g.n), g.n), cell(fmt(g.us), g.us)]};
      }));
    });
    if (!groups.length) return;
    table(parent, [{name: "blocks (before \u2192 after kind)"}, {name: "n", num: true}, {name: "before", num: true},
                   {name: "after", num: true}, {name: "\u0394", num: true}, {name: "largest change"}],
          groups.map(function (g) {
            var big = null;
            keys(g.cats).forEach(function (c) { if (big === null || Math.abs(g.cats[c]) > Math.abs(g.cats[big])) big = c; });
            var d = g.a - g.b;
            return {cells: [nameCell(g.label), cell(String(g.n), g.n), cell(fmt(g.b), g.b), cell(fmt(g.a), g.a),
                            cell(signed(d), d, {cls: "num" + (Math.abs(d) < 0.05 ? "" : d > 0 ? " pos" : " neg")}),
                            cell(big && Math.abs(g.cats[big]) >= 0.05 ? big + " " + signed(g.cats[big]) : "\u2014")]};
          }));
  }

  /* A folder of runs: a row per run; when names read <impl>_<seq>, charts against sequence length.
     Latency is the one measured outside the profiler (measured.json) where a run has it; otherwise the
     attention blocks' profiled span per step, labelled "profiled"; launch-bound runs are marked everywhere. */
  function renderSweep(parent, R) {
    var runs = R.runs;
    var measured = runs.some(function (r) { return r.run_row.latency_ms !== null; });
    add(parent, el("h1", null, "sweep: " + R.source + " (" + runs.length + " runs)"));
    add(parent, el("div", {"class": "sub"}, (measured
        ? "latency: measured outside the profiler (one forward pass, measured.json); "
        : "latency: no run has a measured latency (measured.json), so the charts show the attention blocks' " +
          "profiled span per step, inflated by the profiler's own launch overhead; ") +
        "busy: device time in the blocks; idle: the share of their span the device waited. " +
        "Hollow points and LB: launch-bound runs (busy time and span are not the latency). Click a run for its report."));
    var parsed = runs.map(function (r) {
      return r.run_row.impl !== null ? {impl: r.run_row.impl, seq: r.run_row.seq, run: r} : null;
    });
    var impls = [], seqs = [];
    parsed.forEach(function (p) {
      if (!p) return;
      if (impls.indexOf(p.impl) < 0) impls.push(p.impl);
      if (seqs.indexOf(p.seq) < 0) seqs.push(p.seq);
    });
    seqs.sort(function (a, b) { return a - b; });
    var ok = impls.length > 0;  /* runs named otherwise stay in the table, out of the charts */
    var baseline = (runs.filter(function (r) { return r.run_row.baseline; })[0] || {run_row: {}}).run_row.baseline;
    var byKey = {};
    parsed.forEach(function (p) { if (p) byKey[p.impl + "\u0000" + p.seq] = p.run; });
    function latency(r) {
      var w = r.run_row;
      if (w.latency_ms !== null) return w.latency_ms * 1000;
      return measured || !w.steps ? null : w.span_us / w.steps;
    }
    function speedText(w) {
      if (w.speedup === null) return "\u2014";
      return w.speedup.toFixed(2) + "\u00d7" + (w.speedup_basis === "measured" ? "" : w.speedup_launch_bound ? " profiled, LB" : " profiled");
    }
    function lb(impl, seq) { var r = byKey[impl + "\u0000" + seq]; return !!(r && r.run_row.launch_bound); }
    var base = baseline ? baseline.replace(/[_-]\d+$/, "") : "\u2014";
    if (ok && seqs.length > 1) {
      var charts = add(parent, el("div", {"class": "charts"}));
      var col = function (impl) { return PALETTE[impls.indexOf(impl) % PALETTE.length]; };
      lineChart(charts, measured ? "latency (measured)" : "attention span per step (profiled)", impls, seqs,
                function (impl, seq) { var r = byKey[impl + "\u0000" + seq]; return r ? latency(r) : null; },
                fmt, col, true, lb);
      lineChart(charts, "speedup over " + base + (measured ? " (measured)" : " (profiled span)"), impls, seqs,
                function (impl, seq) {  /* the baseline's own runs sit at 1× */
                  var r = byKey[impl + "\u0000" + seq];
                  return !r ? null : r.run_row.speedup !== null ? r.run_row.speedup : (impl === base ? 1 : null);
                },
                function (v) { return v.toFixed(2) + "\u00d7"; }, col, true, lb);
      if (runs.some(function (r) { return r.run_row.idle_pct !== null; })) {  /* device runs: a CPU has no idle device */
        lineChart(charts, "idle share of the attention span", impls, seqs, function (impl, seq) {
          var r = byKey[impl + "\u0000" + seq]; return r && r.run_row.idle_pct !== null ? r.run_row.idle_pct / 100 : null;
        }, pct, col, false, lb);
      }
      lineChart(charts, "attention share of device busy time", impls, seqs, function (impl, seq) {
        var r = byKey[impl + "\u0000" + seq]; return r ? r.totals.attention_share : null;
      }, pct, col, false, lb);
      legend(parent, impls, col);
    }
    add(parent, el("h2", null, "Runs"));
    var detail = el("div", {"class": "detail"});
    table(parent, [{name: "run"}, {name: "blocks", num: true}, {name: "latency (measured)", num: true},
                   {name: "speedup over " + base, num: true}, {name: "busy (profiled)", num: true},
                   {name: "span (profiled)", num: true}, {name: "idle", num: true},
                   {name: "attention share", num: true}, {name: "largest category"}],
          runs.map(function (r) {
            var t = r.totals, w = r.run_row, big = null;
            keys(t.categories).forEach(function (c) { if (big === null || t.categories[c] > t.categories[big]) big = c; });
            var lat = w.latency_ms === null ? null : w.latency_ms * 1000;
            return {run: r, attrs: {"data-run": r.name, "data-launch-bound": w.launch_bound ? "1" : "0"},
                    cells: [cell(r.name), cell(String(t.blocks), t.blocks), cell(lat === null ? "\u2014" : fmt(lat), lat),
                            cell(speedText(w), w.speedup), cell(fmt(t.total_us), t.total_us),
                            cell(fmt(t.span_us), t.span_us),
                            cell(w.idle_pct === null ? "\u2014" : pct(w.idle_pct / 100) + (w.launch_bound ? " LB" : ""), w.idle_pct),
                            cell(pct(t.attention_share), t.attention_share),
                            cell(big && t.total_us > 0 ? big + " " + pct(t.categories[big] / t.total_us) : "\u2014")]};
          }),
          function (row) {
            while (detail.firstChild) detail.removeChild(detail.firstChild);
            renderAttribution(detail, row.run, "run: " + row.run.name);
          });
    parent.appendChild(detail);
  }

  /* One line per series over a log2 x axis (sequence length); y linear from 0, or log when asked. */
  function lineChart(parent, title, series, xs, value, fmtY, colour, logY, hollow) {
    if (logY) title += " (log scale)";
    var W = 370, H = 240, padL = 66, padR = 18, padT = 22, padB = 30;
    var box = add(parent, el("div", {"class": "chart", "data-chart": title}));
    var svg = add(box, sv("svg", {viewBox: "0 0 " + W + " " + H, width: W, height: H}));
    add(svg, sv("text", {x: W / 2, y: 14, "text-anchor": "middle", "font-weight": "bold"}, title));
    var vals = [];
    series.forEach(function (s) { xs.forEach(function (x) { var v = value(s, x); if (v !== null && v > 0) vals.push(v); }); });
    if (!vals.length) return;
    var lo = Math.min.apply(null, vals), hi = Math.max.apply(null, vals);
    if (!logY) lo = 0;
    if (hi <= lo) hi = lo * 2 || 1;
    var f = logY ? Math.log : function (v) { return v; };
    function X(i) { return padL + (W - padL - padR) * (xs.length > 1 ? i / (xs.length - 1) : 0.5); }
    function Y(v) { return padT + (H - padT - padB) * (1 - (f(v) - f(lo)) / (f(hi) - f(lo))); }
    add(svg, sv("line", {x1: padL, x2: padL, y1: padT, y2: H - padB, stroke: "#aaa"}));
    add(svg, sv("line", {x1: padL, x2: W - padR, y1: H - padB, y2: H - padB, stroke: "#aaa"}));
    [lo, logY ? Math.sqrt(lo * hi) : (lo + hi) / 2, hi].forEach(function (v) {
      add(svg, sv("text", {x: padL - 4, y: Y(v) + 4, "text-anchor": "end"}, fmtY(v)));
      add(svg, sv("line", {x1: padL, x2: W - padR, y1: Y(v), y2: Y(v), stroke: "#eee"}));
    });
    xs.forEach(function (x, i) { add(svg, sv("text", {x: X(i), y: H - padB + 14, "text-anchor": "middle"}, String(x))); });
    add(svg, sv("text", {x: (W + padL) / 2, y: H - 3, "text-anchor": "middle"}, "sequence length"));
    series.forEach(function (s) {
      var pts = [];
      xs.forEach(function (x, i) {
        var v = value(s, x);
        if (v === null || v <= 0) return;
        pts.push(X(i).toFixed(1) + "," + Y(v).toFixed(1));
        var open = hollow ? hollow(s, x) : false;  /* a launch-bound run: its figure is not the latency */
        tip(add(svg, sv("circle", {cx: X(i), cy: Y(v), r: 3, fill: open ? "#fff" : colour(s), stroke: colour(s),
                                   "data-series": s, "data-x": x, "data-v": v, "data-launch-bound": open ? "1" : "0"})),
            s + " @ " + x + ": " + fmtY(v) + (open ? " (launch-bound)" : ""));
      });
      if (pts.length > 1) add(svg, sv("polyline", {points: pts.join(" "), fill: "none", stroke: colour(s),
                                                    "stroke-width": 1.6}));
    });
  }

  var R = DATA.result;
  var footer = el("div", {"class": "sub", style: "margin-top:24px"}, "made by " + R.tool + " \u00b7 schema " + R.schema_version);
  if (DATA.report === "diff") renderDiff(APP, R);
  else if (DATA.report === "sweep") renderSweep(APP, R);
  else renderAttribution(APP, R, "tracekit report: " + R.source);
  APP.appendChild(footer);
  document.body.setAttribute("data-drawn-ms", performance.now().toFixed(1));  /* since navigation began */
  document.body.setAttribute("data-ready", "1");
})();
