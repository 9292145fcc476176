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
    return d;
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

  /* Text printed on a fill: dark on light fills, white on dark ones. */
  function ink(fill) {
    var m = /^#([0-9a-f]{2})([0-9a-f]{2})([0-9a-f]{2})$/i.exec(fill || "");
    if (!m) return "#1d2330";
    var l = (0.299 * parseInt(m[1], 16) + 0.587 * parseInt(m[2], 16) + 0.114 * parseInt(m[3], 16)) / 255;
    return l > 0.6 ? "#1d2330" : "#fff";
  }
  /* About how wide a label is at a font size (px): one sample measured per size, scaled by length; generous,
     so that a printed value never spills out of its segment. Measuring each label would lay the page out once
     per segment. */
  var CHAR_W = {};
  function textWidth(svg, text, size) {
    if (!CHAR_W[size]) {
      var sample = "88.88 ms idle", t = add(svg, sv("text", {"font-size": size}, sample));
      var w = t.getComputedTextLength ? t.getComputedTextLength() : 0;
      svg.removeChild(t);
      if (w > 0) CHAR_W[size] = w / sample.length; else return size * 0.62 * text.length * 1.15;
    }
    return CHAR_W[size] * text.length * 1.15;
  }
  /* The idle segments' fill: light grey with a hatch, one pattern for the page. */
  var HATCH = "tk-idle-hatch";
  function ensureHatch() {
    if (document.getElementById(HATCH)) return;
    var s = document.body.insertBefore(sv("svg", {"class": "defs", width: 0, height: 0, "aria-hidden": "true"}),
                                       document.body.firstChild);
    var p = add(add(s, sv("defs")), sv("pattern", {id: HATCH, patternUnits: "userSpaceOnUse", width: 6, height: 6,
                                                   patternTransform: "rotate(45)"}));
    add(p, sv("rect", {x: 0, y: 0, width: 6, height: 6, fill: "#eceef2"}));
    add(p, sv("line", {x1: 0, y1: 0, x2: 0, y2: 6, stroke: "#b3bac6", "stroke-width": 2}));
  }

  /* One segment of a bar, placed in % of the bar (the page may reflow); its value printed inside when it
     fits (px: the bar's width in pixels), else only on hover. Idle is a hatched line, not a rect: the rects
     of a bar are its busy time. */
  function segment(s, seg) {
    var x = 100 * seg.from / seg.max, w = 100 * seg.v / seg.max, h = seg.h;
    var attrs = {"data-key": seg.key, "data-us": seg.v};
    var node;
    if (seg.idle) {
      attrs["class"] = "idle";
      attrs["data-idle-us"] = seg.v;
      attrs.x1 = x + "%"; attrs.x2 = (x + w) + "%"; attrs.y1 = attrs.y2 = h / 2;
      attrs.stroke = "url(#" + HATCH + ")"; attrs["stroke-width"] = h;
      node = add(s, sv("line", attrs));
    } else {
      attrs.x = x + "%"; attrs.y = 0; attrs.width = Math.max(w, 0.08) + "%"; attrs.height = h; attrs.fill = seg.fill;
      node = add(s, sv("rect", attrs));
    }
    tip(node, seg.hover);
    var size = h >= 16 ? 10.5 : 9;
    var texts = seg.idle ? ["idle " + fmt(seg.v), "idle"] : [fmt(seg.v)];
    for (var i = 0; i < texts.length; i++) {
      if (h >= 11 && seg.px * w / 100 >= textWidth(s, texts[i], size) + 6) {
        add(s, sv("text", {x: (x + w / 2) + "%", y: h / 2, "text-anchor": "middle", "dominant-baseline": "central",
                           "font-size": size, fill: seg.idle ? "#1d2330" : ink(seg.fill), "class": "val",
                           "data-key": seg.key, "data-us": seg.v}, texts[i]));
        break;
      }
    }
  }

  /* Stacked horizontal bars: one row per group; each segment one category (or role), width by time, then the
     group's idle (g.idle, when known) hatched. All rows share one scale, opts.max when given (the role bars
     take their block bars'), else the longest row; returns that scale. A segment's share of its bar is the
     group's own (g.shares, Python's); only the diff's before/after bars, which Python does not split in
     shares, have theirs taken here. */
  function stackedBars(parent, groups, segKeys, colour, opts) {
    opts = opts || {};
    var box = add(parent, el("div", {"class": "bars"}));
    var max = opts.max || 0;
    if (!max) groups.forEach(function (g) { max = Math.max(max, g.total + (g.idle || 0)); });
    if (groups.some(function (g) { return g.idle; })) ensureHatch();
    var px = 0, h = opts.height || 18;
    groups.forEach(function (g) {
      var row = add(box, el("div", {"class": "row", "data-label": g.label, "data-us": g.total,
                                    "data-idle-us": g.idle === null || g.idle === undefined ? null : g.idle}));
      add(row, el("div", {"class": "lab", title: g.label}, g.label));
      var s = add(row, sv("svg", {width: "100%", height: h}));
      if (!px) px = s.getBoundingClientRect().width || 600;  /* one layout per chart: every row is as wide */
      var x = 0;
      segKeys.forEach(function (k, i) {
        var v = g.parts[k] || 0;
        if (v <= 0 || max <= 0) return;
        segment(s, {from: x, v: v, max: max, h: h, px: px, key: k, fill: colour(k, i),
                    hover: g.label + " \u2014 " + k + ": " + fmt(v) + " (" + pct(share(g, k, v)) + ")"});
        x += v;
      });
      if (g.idle > 0 && max > 0) segment(s, {from: x, v: g.idle, max: max, h: h, px: px, key: "idle", idle: true,
                                             hover: idleHover(g)});
      var tot = g.idle === null || g.idle === undefined ? fmt(g.total) : "busy " + fmt(g.total) + " + idle " + fmt(g.idle);
      add(row, el("div", {"class": "tot num", title: g.note || null}, tot + (g.note ? " \u00b7 " + g.note : "")));
    });
    return max;
  }
  function share(g, k, v) {
    if (g.shares) return g.shares[k];
    return g.total > 0 ? v / g.total : 0;
  }
  function idleHover(g) {
    /* only the causes that took time, in vocab.IdleCause order (the JSON's key order), as the terminal names them */
    var causes = keys(g.causes).filter(function (c) { return g.causes[c] > 0; }).map(function (c) {
      return c.replace(/_us$/, "").replace(/_/g, " ") + " " + fmt(g.causes[c]);
    });
    return g.label + " \u2014 idle: " + fmt(g.idle) + " (" + pct(g.idleShare) + " of the span" +
           (causes.length ? "; " + causes.join(", ") : "") + ")";
  }

  /* One of Python's group rows (tracekit.renderers.html.group_dict: tracekit.results.rows.group_rows) as a bar:
     its sums, shares, idle (null: no device block, nothing could idle) and efficiency, as Python computed them. */
  function barGroup(row) {
    var e = row.efficiency;
    return {label: (row.layer ? "\u2514 " : "") + row.label + phaseSuffix(row), total: row.total_us,
            parts: row.categories, shares: row.shares,
            roles: row.matmul_roles, roleShares: row.role_shares, idle: row.idle_us, idleShare: row.idle_share,
            causes: row.idle_by_cause || {}, row: row,
            note: e.tflops_per_s === null ? null
                                          : rangeTexts(e).rate + " TFLOP/s, " + e.gb_per_s.toFixed(0) + " GB/s"};
  }
  function phaseSuffix(b) { return b.phase && b.phase !== "forward" ? " (" + b.phase + ")" : ""; }

  function blockSection(parent, title, groups, cats, roleKeys) {
    add(parent, el("h2", null, title));
    var sec = add(parent, el("div", {"class": "section", "data-section": title}));
    var max = stackedBars(sec, groups, cats, function (k) { return CAT_COL[k] || "#999"; });
    var withRoles = groups.filter(function (g) { return g.roles && g.parts.matmul > 0; });
    if (withRoles.length && roleKeys.length) {
      add(sec, el("div", {"class": "sub"}, "matmul by role (on the scale of the bars above)"));
      legend(sec, roleKeys, function (k, i) { return ROLE_COL[i % ROLE_COL.length]; });
      var roles = add(sec, el("div", {"class": "roles"}));
      stackedBars(roles, withRoles.map(function (g) {
        return {label: g.label, total: g.parts.matmul, parts: g.roles, shares: g.roleShares};
      }), roleKeys, function (k, i) { return ROLE_COL[i % ROLE_COL.length]; }, {height: 14, max: max});
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

  function fmtFlops(x) {
    var units = [["P", 1e15], ["T", 1e12], ["G", 1e9], ["M", 1e6]];
    for (var i = 0; i < units.length; i++) if (x >= units[i][1]) return (x / units[i][1]).toFixed(2) + " " + units[i][0];
    return x.toFixed(0);
  }
  /* Per block kind: achieved TFLOP/s and GB/s over the kernels with FLOP counts, their % of the roofline and
     the bound (tracekit.flops; the terminal's efficiency table): each kind's efficiency summed by Python
     (group_rows), then all blocks' (the totals). Drawn only when some block has FLOPs. */
  function roofTable(parent, R, groups) {
    var all = R.groups.all;
    if (R.time_base === "host" || all.efficiency.flops === null) return;
    add(parent, el("h2", null, "Roofline by block kind (kernels with recorded shapes)"));
    var d = R.device, pk = d && d.peaks;
    add(parent, el("div", {"class": "sub", "data-roof": pk ? pk.model : ""}, pk
        ? "roof: " + d.name + " \u2192 " + pk.model + ": bf16 " + pk.bf16 + " TFLOP/s, fp32 " + pk.fp32 + " TFLOP/s, " +
          pk.mem_gb_per_s.toFixed(0) + " GB/s (dense peaks). % of roof: the time the roofline needs for this work " +
          "(compute or memory, whichever is slower at peak) over the time measured; timed: the share of busy time " +
          "in kernels whose FLOPs and bytes are counted."
        : "no device peaks: " + (d && d.reason ? d.reason : "the device is not known")));
    var rows = groups.map(function (g) { return roofRow(nameCell(g.label), g.row, {"data-kind": g.label}); });
    if (groups.length > 1) rows.push(roofRow(cell(all.label), all, {"data-all": "1"}));
    table(parent, [{name: "block kind"}, {name: "n", num: true}, {name: "FLOPs", num: true}, {name: "TFLOP/s", num: true},
                   {name: "GB/s", num: true}, {name: "% of roof", num: true}, {name: "bound"}, {name: "timed", num: true}],
          rows);
  }
  function roofRow(name, row, attrs) {
    var e = row.efficiency, n = cell(String(row.blocks), row.blocks);
    if (e.flops === null || e.tflops_per_s === null) {
      return {attrs: attrs, cells: [name, n, cell("n/a", null, {title: e.reason}),
                                    cell("", null), cell("", null), cell("", null), cell(""), cell("", null)]};
    }
    var r = rangeTexts(e);
    return {attrs: attrs, cells: [name, n, cell(r.flops, e.flops, r.title),
      cell(r.rate, e.tflops_per_s, r.title), cell(e.gb_per_s.toFixed(0), e.gb_per_s),
      cell(r.roof, e.roof_pct, r.title), cell(e.bound || "n/a"),
      cell(pct(row.timed_share), row.timed_share)]};
  }
  /* Issue 44: FLOPs counted as bounds (varlen, paged) show as low–high, the roof's high end never above 100%
     (Python cuts it: results.efficiency.flops_range); the reason goes in the cells' title. */
  function rangeTexts(e) {
    var roof = e.roof_pct === null ? "n/a" : e.roof_pct.toFixed(1) + "%";
    var out = {flops: fmtFlops(e.flops), rate: e.tflops_per_s.toFixed(1), roof: roof, title: null};
    if (e.flops_kind !== "bounds") return out;
    out.flops += "\u2013" + fmtFlops(e.flops_max);
    if (e.tflops_per_s_max !== null) out.rate += "\u2013" + e.tflops_per_s_max.toFixed(1);
    if (e.roof_pct !== null && e.roof_pct_max !== null) out.roof = e.roof_pct.toFixed(1) + "\u2013" + e.roof_pct_max.toFixed(1) + "%";
    out.title = {title: "FLOPs counted as bounds: " + e.flops_reason};
    return out;
  }

  /* Each hint, and under it what it saves (the terminal's saving line): an upper bound or a labelled estimate,
     as a share of the hinted blocks' busy time (launch-bound: of their span); then what overlapping hints save
     together (the JSON's union, not the sum). */
  function hintSection(parent, hints) {
    var together = {};
    hints.forEach(function (h, i) {
      if (!i) add(parent, el("h2", null, "Hints"));
      var ov = h.overlap;
      var box = add(parent, el("div", {"class": "hint", "data-rule": h.rule}));
      add(box, el("div", {"class": "msg"}, "[" + h.rule + "] " + h.message + (ov ? " (overlaps " +
          ov.rules.filter(function (r) { return r !== h.rule; }).join(", ") + ")" : "")));
      add(box, savingLine(h));
      if (ov) together[ov.rules.join(" + ")] = ov;
    });
    keys(together).forEach(function (k) {
      var ov = together[k];
      add(parent, el("div", {"class": "hint", "data-overlap": k}, "together: " + k + " save at most " +
          (ov.combined_saving_per_step_us === null || ov.combined_saving_per_step_us === undefined ? "" :
           fmt(ov.combined_saving_per_step_us) + " per step, ") + fmt(ov.combined_saving_us) + " in all" + (ov.combined_saving_pct === null ? "" : " (" + ov.combined_saving_pct + "%)") +
          ", not the sum " + fmt(ov.sum_saving_us) + ": these hints count " + fmt(ov.double_counted_us) +
          " of the same kernels twice"));
    });
  }
  /* The headline: the saving per step, its basis and its bound (one step's attention time). */
  /* A trace that recorded no step (results.hints.NO_STEPS_BASIS): its figures are the whole trace's, so worded. */
  var NO_STEPS = "whole trace (no steps recorded)";
  function perStep(h) {
    if (h.saving_per_step_us === null || h.saving_per_step_us === undefined) return "";
    var none = h.per_step_basis === NO_STEPS;
    return fmt(h.saving_per_step_us) + (none ? " (" : " per step (") + h.per_step_basis +
           (none ? "; the trace's attention " : "; a step's attention ") +
           (h.rule === "launch-bound" ? "span" : "busy time") + " is " + fmt(h.step_attention_us) + "), ";
  }
  function savingLine(h) {
    if (h.saving_us === null || h.saving_us === undefined) {
      return el("div", {"class": "saving", "data-saving-us": ""}, "saving: not estimated; " + h.saving_basis);
    }
    var upper = /^upper bound/.test(h.saving_basis || "");
    var of = (h.rule === "launch-bound" || /of their span/.test(h.saving_basis || "") ? "the span" : "the busy time") +
             " of " + h.blocks.join(", ");
    var line = el("div", {"class": "saving", "data-saving-us": h.saving_us,
                          "data-saving-per-step-us": h.saving_per_step_us === null ? "" : h.saving_per_step_us,
                          "data-saving-pct": h.saving_pct === null ? "" : h.saving_pct, title: h.saving_basis},
                  (upper ? "saves at most " : "saves about ") + perStep(h) + fmt(h.saving_us) +
                  (h.per_step_basis === NO_STEPS ? " in all" : " over " + h.steps + (h.steps === 1 ? " step" : " steps")) +
                  (h.saving_pct === null ? "" : " (" + h.saving_pct.toFixed(1) + "% of " + of + ")") +
                  (h.reaches_latency === false ? "; busy time only: will not reach latency (launch-bound)" : ""));
    add(line, el("span", {"class": "basis"}, " \u00b7 " + h.saving_basis));
    return line;
  }

  /* "What if" (issue 39): tracekit whatif's prediction per block kind, laid out as Python made it
     (tracekit.renderers.html.whatif_data): the headline per step, one row per kind, the notes; or the one line
     that says why nothing was predicted. Predicted figures are labelled as such, each row with its stated error. */
  function whatifSection(parent, W) {
    if (!W) return;
    var sec = add(parent, el("div", {"class": "whatif", "data-section": "What if"}));
    add(sec, el("h2", null, "What if: one fused attention kernel (predicted)"));
    if (W.reason) {
      add(sec, el("div", {"class": "whatif-none", "data-reason": W.reason}, W.reason));
      return;
    }
    add(sec, el("div", {"class": "whatif-lead", "data-basis": W.basis}, W.headline));
    add(sec, el("div", {"class": "sub"}, "device " + (W.device || "unknown") + " \u00b7 backend " + W.backend +
        " \u00b7 mask " + W.mask_option + " \u00b7 predicted, per call unless marked"));
    table(sec, [{name: "block kind"}, {name: "n", num: true}, {name: "shape"}, {name: "eager core", num: true},
                {name: "\u2192 " + W.backend, num: true}, {name: "block", num: true}, {name: "\u2192 fused block", num: true},
                {name: "saving / step", num: true}, {name: "confidence"}, {name: "launch"}],
          W.rows.map(function (r) { return whatifRow(r); }));
    if (W.per_step.length > 1) {
      table(sec, [{name: "step"}, {name: "attention blocks", num: true}, {name: "predicted", num: true},
                  {name: "saving", num: true}], W.per_step.map(function (s) {
        return {attrs: {"data-step": s.step === null ? "" : s.step},
                cells: [cell(s.step === null ? "outside steps" : String(s.step), s.step), cell(fmt(s.eager_us), s.eager_us),
                        cell(fmt(s.fused_us), s.fused_us), cell(fmt(s.saving_us), s.saving_us)]};
      }));
    }
    W.notes.forEach(function (n) { add(sec, el("div", {"class": "sub whatif-note"}, n)); });
  }
  function whatifRow(r) {
    var label = nameCell(r.label), attrs = {"data-whatif-kind": r.label, "data-confidence": r.confidence};
    var head = [label, cell(String(r.n), r.n), cell(r.shape), cell(fmt(r.eager_core_us), r.eager_core_us)];
    if (r.fused_us === null) {
      return {attrs: attrs, cells: head.concat([cell("\u2014", null, {title: r.reason}), cell(fmt(r.block_us), r.block_us),
        cell("\u2014", null), cell("\u2014", null), cell("no prediction: " + (r.reason || "")), cell("")])};
    }
    return {attrs: attrs, cells: head.concat([cell(fmt(r.fused_us), r.fused_us), cell(fmt(r.block_us), r.block_us),
      cell(fmt(r.fused_block_us), r.fused_block_us), cell(fmt(r.saving_per_step_us), r.saving_per_step_us),
      cell(r.confidence + " (" + r.error_text + ")", r.confidence, {title: r.reason}),
      cell(r.launch_bound_predicted ? "launch-bound" : "", r.launch_bound_predicted ? 1 : 0,
           {title: r.launch_bound_predicted ? "the host takes longer per call than the predicted fused block: the " +
            "latency saving will be smaller (CUDA graphs or torch.compile collect it)" : null})])};
  }

  /* "per step (median of 2): attention … · busy … · span … · idle …", or "whole trace (why): …" (issue 37). */
  function perStepLine(ps) {
    if (ps.span_us === null) return "whole trace (" + ps.note + "): attention " + fmt(ps.attention_us) +
      " \u00b7 busy " + fmt(ps.busy_us);
    return (ps.steps === 1 ? "per step (1 step)" : "per step (median of " + ps.steps + ")") + ": attention " +
      fmt(ps.attention_us) + " \u00b7 busy " + fmt(ps.busy_us) + " \u00b7 span " + fmt(ps.span_us) +
      " \u00b7 idle " + fmt(ps.idle_us);
  }

  /* Serving stages (issue 44): prefill, decode, mixed and outside, as Python worded each cell
     (tracekit.renderers.stagetable.stage_table_data / stage_diff_data); no section on other traces. */
  function stageSection(parent, S) {
    if (!S) return;
    var sec = add(parent, el("div", {"class": "stages", "data-section": "Serving stages"}));
    add(sec, el("h2", null, "Serving stages"));
    add(sec, el("div", {"class": "sub"}, S.title));
    if (S.rows.length) table(sec, S.head.map(function (h, i) { return {name: h, num: i > 0}; }),
                             S.rows.map(function (r, k) {
                               return {cells: r.map(function (c) { return cell(c); }),
                                       attrs: {"data-stage": S.stages[k]}};
                             }));
    (S.notes || []).forEach(function (n) { add(sec, el("div", {"class": "sub"}, n)); });
  }

  function renderAttribution(parent, R, heading) {
    var t = R.totals, G = R.groups;
    var cats = keys(t.categories);
    var roleKeys = keys(t.matmul_roles);
    add(parent, el("h1", null, heading));
    var ps = t.per_step;  /* issue 37: the median step leads; the totals below are over all steps, labelled */
    if (ps) add(parent, el("div", {"class": "lead", "data-basis": ps.basis}, perStepLine(ps)));
    add(parent, el("div", {"class": "summary", "data-total-us": t.total_us, "data-blocks": t.blocks},
        (ps && ps.span_us !== null ? "totals over all " + ps.steps + " step" + (ps.steps === 1 ? "" : "s") + ": " : "") +
        t.blocks + " attention blocks, " + fmt(t.total_us) + " busy \u00b7 " + pct(t.attention_share) +
        " of " + (R.time_base === "host" ? "host time" : "device busy time") + " (" + fmt(G.base_us) + ")" +
        (t.launch_bound ? " \u00b7 launch-bound: device idle " + pct(G.idle_share) +
         " of the blocks' span" : "")));
    R.traces.forEach(function (x) {
      add(parent, el("div", {"class": "sub"}, x.source + ": " + (x.gpus.length ? x.gpus.join(", ") : "no GPU listed") +
          " \u00b7 PyTorch " + (x.pytorch || "n/a") + " \u00b7 " + x.steps.length + " steps \u00b7 " + x.events + " events"));
    });
    (R.warnings || []).forEach(function (w) { add(parent, el("div", {"class": "warn"}, w)); });
    if (!R.blocks.length) {
      add(parent, el("p", null, "No attention blocks found (try --scope REGEX to name your attention modules)."));
      restSection(parent, R.rest);  /* the step is still worth a page: where its time went (the terminal's too) */
      blocklessSection(parent, R.rest);
      stageSection(parent, R.stage_table);
      whatifSection(parent, R.whatif);
      return;
    }
    var lg = legend(parent, cats, function (k) { return CAT_COL[k] || "#999"; });
    if (t.launch_bound !== null && t.launch_bound !== undefined) {  /* some block ran on a device */
      var s = add(lg, el("span", {title: "the device idle inside the blocks' span (their span less their busy time)"}));
      add(s, el("i", {"class": "idle-key"}));
      s.appendChild(document.createTextNode("idle (device waiting)"));
    }
    var kinds = G.kind.map(barGroup);
    /* each kind, then its attention layer's row (Python's layer_rows; older payloads have none) */
    blockSection(parent, "By block kind", (G.kind_layers || G.kind).map(barGroup), cats, roleKeys);
    roofTable(parent, R, kinds);
    blockSection(parent, "By layer", G.layer.map(barGroup), cats, roleKeys);
    restSection(parent, R.rest);
    stageSection(parent, R.stage_table);
    if (R.timeline) tkTimeline(parent, R.timeline, KIT);
    hintSection(parent, R.hints || []);
    whatifSection(parent, R.whatif);
    kernelTable(parent, R.top_kernels, R.time_base === "host" ? "Top host ops in blocks (self time)"
                                                              : "Top device kernels in blocks");
  }

  /* The diff's lead (issue 37): the whole step or the measured latency on its named basis; attention comes second. */
  function leadLine(L) {
    if (!L || L.basis === null) return "whole step: not compared (" + ((L && L.note) || "no basis") + ")";
    var n = Math.max(L.steps_before, L.steps_after);
    var label = L.basis === "latency" ? "latency (measured)"
      : L.basis + " (" + (n === 1 ? "per step" : "per step, median of " + n) + (L.note ? "; " + L.note : "") + ")";
    var w = L.basis === "step span" ? ["shorter", "longer"] : ["faster", "slower"];  /* a span is not a latency */
    var s = L.speedup === null ? "" : " \u00b7 " + (L.speedup >= 1 ? L.speedup.toFixed(2) + "\u00d7 " + w[0]
                                                               : (1 / L.speedup).toFixed(2) + "\u00d7 " + w[1]);
    return label + ": " + fmt(L.before_us) + " \u2192 " + fmt(L.after_us) +
      (L.delta_pct === null ? "" : " \u00b7 (" + (L.delta_pct > 0 ? "+" : "") + L.delta_pct.toFixed(1) + "%)") + s;
  }

  function renderDiff(parent, R) {
    var h = R.attention;
    add(parent, el("h1", null, "diff: " + R.before_source + " \u2192 " + R.after_source));
    add(parent, el("div", {"class": "lead", "data-basis": R.headline.basis, "data-speedup": R.headline.speedup},
        leadLine(R.headline)));
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
    runPairs(parent, R);
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
    diffTimelines(parent, R.timelines);
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
    restDiffSection(parent, R.rest);
    stageSection(parent, R.stage_diff);
    (R.conclusions || []).forEach(function (c) { add(parent, el("div", {"class": "hint"}, c)); });
  }

  /* The rest of the step (issue 37): what each trace's median step spends outside attention, as Python chose and
     worded it (tracekit.renderers.html.rest_data; the terminal's lines): a row per category and top-level module,
     and the top-level host ops where the step is launch-bound. */
  var REST_TITLE = "Outside attention (the rest of the step)";
  function restSection(parent, D) {
    if (!D) return;
    add(parent, el("h2", null, REST_TITLE));
    var sec = add(parent, el("div", {"class": "section", "data-section": "rest"}));
    if (D.note) add(sec, el("div", {"class": "sub", "data-rest-note": "1"}, D.note));
    D.traces.forEach(function (T) {
      var box = add(sec, el("div", {"data-rest-step": T.step, "data-rest-trace": T.label}));
      add(box, el("div", {"class": "sub"}, (T.label === null ? "" : T.label + ": ") + T.words + ": " +
          fmt(T.outside_us) + " busy outside attention" + (T.host ? " \u00b7 " + T.host : "")));
      table(box, [{name: "by"}, {name: "name"}, {name: "time", num: true}], T.rows.map(function (x) {
        return {attrs: {"data-rest-by": x.by}, cells: [cell(x.by), nameCell(x.name), cell(fmt(x.us), x.us)]};
      }));
      var more = keys(T.more).map(function (by) { return T.more[by] + " more by " + by; });
      if (more.length) add(box, el("div", {"class": "sub"}, "not listed: " + more.join(", ") + " (--format json)"));
    });
  }
  /* A trace with no attention blocks (issue 42): each shown step's idle by cause (Python's words) and its top
     device events (tracekit.renderers.html._blockless_dict; absent for a trace with blocks). */
  function blocklessSection(parent, D) {
    var shown = D ? D.traces.filter(function (T) { return T.idle_words !== undefined; }) : [];
    if (!shown.length) return;
    add(parent, el("h2", null, "Idle and top device events (no attention blocks)"));
    var sec = add(parent, el("div", {"class": "section", "data-section": "blockless"}));
    shown.forEach(function (T) {
      var box = add(sec, el("div", {"data-blockless-step": T.step}));
      add(box, el("div", {"class": "sub", "data-idle-words": "1"},
                  (T.label === null ? "" : T.label + ": ") + "step " + T.step + ": " + T.idle_words));
      table(box, [{name: "device event"}, {name: "category"}, {name: "calls", num: true}, {name: "time", num: true}],
            T.top_kernels.map(function (k) {
              return {attrs: {"data-top-kernel": "1"},
                      cells: [nameCell(k.name), cell(k.category), cell(String(k.count), k.count), cell(fmt(k.us), k.us)]};
            }));
    });
  }
  function restDiffSection(parent, D) {
    if (!D) return;
    add(parent, el("h2", null, REST_TITLE));
    var sec = add(parent, el("div", {"class": "section", "data-section": "rest"}));
    if (D.note) { add(sec, el("div", {"class": "sub", "data-rest-note": "1"}, D.note)); return; }
    add(sec, el("div", {"class": "sub"}, D.words + (D.host ? " \u00b7 " + D.host : "")));
    table(sec, [{name: "by"}, {name: "name"}, {name: "before", num: true}, {name: "after", num: true},
                {name: "\u0394", num: true}], D.rows.map(function (x) {
      var d = x.delta_us;
      return {attrs: {"data-rest-by": x.by},
              cells: [cell(x.by), nameCell(x.name), cell(fmt(x.before_us), x.before_us), cell(fmt(x.after_us), x.after_us),
                      cell(signed(d), d, {cls: "num" + (Math.abs(d) < 0.05 ? "" : d > 0 ? " pos" : " neg")})]};
    }));
  }
  /* Two folders of runs: a row per run on both sides (its own headline, on the basis it names: the whole step as a
     single diff leads, else its attention; and its verdict), then the runs on one side only. Nothing otherwise. */
  function runPairs(parent, R) {
    if (!R.run_pairs) return;
    add(parent, el("h2", null, "Runs paired by name"));
    table(parent, [{name: "run"}, {name: "basis"}, {name: "before", num: true}, {name: "after", num: true},
                   {name: "change", num: true}, {name: "verdict"}],
          R.run_pairs.map(function (p) {
            var h = p.headline;
            return {cells: [cell(p.run), cell(h.basis), cell(fmt(h.before_us), h.before_us),
                            cell(fmt(h.after_us), h.after_us), cell(pairChange(h), h.delta_pct), cell(pairVerdict(p))]};
          }));
    [["before", R.runs_only_before], ["after", R.runs_only_after]].forEach(function (s) {
      if (s[1].length) add(parent, el("div", {"class": "sub"}, "runs only " + s[0] + ": " + s[1].join(", ")));
    });
  }
  /* A run pair's change: ``+80.0% (1.80× slower)``; a step span reads shorter or longer (a span is not a latency),
     and an attention figure that claims no speedup shows only its percentage. */
  function pairChange(h) {
    var pct = h.delta_pct === null ? "" : (h.delta_pct > 0 ? "+" : "") + h.delta_pct.toFixed(1) + "%";
    var span = h.basis === "step span";
    if (h.speedup === null || !(h.before_us > 0) || !(h.claims_speedup || span)) return pct;
    var w = span ? ["shorter", "longer"] : ["faster", "slower"];
    return pct + (h.speedup >= 1 ? " (" + h.speedup.toFixed(2) + "\u00d7 " + w[0] + ")"
                                 : " (" + (1 / h.speedup).toFixed(2) + "\u00d7 " + w[1] + ")");
  }
  /* The verdict, with the gate's basis where it decided on another figure than the row's headline. */
  function pairVerdict(p) {
    var on = p.verdict_basis;
    return on === null || on === undefined || on === p.headline.basis ? p.verdict
                                                                      : p.verdict + " on " + on.split(" (")[0];
  }
  function mapCats(cats, field) {
    var o = {};
    keys(cats).forEach(function (c) { o[c] = cats[c][field]; });
    return o;
  }

  /* A value axis for levels in [low, top] (µs): nice ticks (1, 2, 5 × 10^k) in one unit, chosen from the axis's
     range, every tick printed in it. Starts at 0 unless every level is far above 0; then it starts a little
     below the lowest (a broken axis), so that a change reads against the span it moves in, not against 0. */
  function waterAxis(low, top) {
    if (!(top > 0)) top = 1;
    if (!(low >= 0)) low = 0;
    var broken = low > 0.3 * top;
    var span = broken ? top - low : top;
    if (span <= top * 1e-3) span = top * 0.1;  /* no change: a tenth of the level */
    var step = niceStep(span / 4), lo = 0;
    if (broken) {
      lo = Math.floor((low - 0.15 * span) / step) * step;
      if (lo <= 0) { broken = false; lo = 0; step = niceStep(top / 4); }
    }
    var hi = Math.ceil(top / step - 1e-9) * step;
    if (hi <= lo) hi = lo + step;
    var unit = hi >= 1e6 ? ["s", 1e6] : hi >= 1e3 ? ["ms", 1e3] : ["\u00b5s", 1];
    var dec = Math.max(0, -Math.floor(Math.log(step / unit[1]) / Math.LN10 + 1e-9));
    var ticks = [];
    for (var k = 0; lo + k * step <= hi + step * 1e-6; k++) ticks.push(lo + k * step);
    return {lo: lo, hi: hi, broken: broken, ticks: ticks,
            text: function (v) { return (v / unit[1]).toFixed(dec) + " " + unit[0]; }};
  }
  function niceStep(raw) {
    var p = Math.pow(10, Math.floor(Math.log(raw) / Math.LN10)), m = raw / p;
    return (m <= 1 ? 1 : m <= 2 ? 2 : m <= 5 ? 5 : 10) * p;
  }

  /* before total, one floating bar per category Δ, after total: the Δs sum to the headline Δ. A category's bar
     keeps its legend colour; its sign is its direction (▲/▼) and its outline. */
  function waterfall(parent, R, cats) {
    var h = R.attention;
    add(parent, el("h2", null, "Where the change comes from (category \u0394s sum to the total \u0394)"));
    var steps = [{label: "before", from: 0, to: h.before_us, total: true}];
    var level = h.before_us, low = Math.min(h.before_us, h.after_us), top = Math.max(h.before_us, h.after_us);
    cats.forEach(function (c) {
      var d = R.categories[c].delta_us;
      steps.push({label: c, from: level, to: level + d, delta: d});
      level += d;
      low = Math.min(low, level); top = Math.max(top, level);
    });
    steps.push({label: "after", from: 0, to: h.after_us, total: true});
    var ax = waterAxis(low, top);
    var W = 900, H = 290, padT = 30, padB = 40;
    var svg = add(parent, sv("svg", {"class": "waterfall", viewBox: "0 0 " + W + " " + H, width: W, height: H,
                                     "data-axis-lo": ax.lo, "data-axis-hi": ax.hi, "data-broken": ax.broken ? "1" : "0"}));
    var labels = ax.ticks.map(function (v) { return add(svg, sv("text", {"class": "tick", "text-anchor": "end",
                                                                          "data-tick": v}, ax.text(v))); });
    var widest = 0;  /* the left padding fits the widest tick label: the top one is never cut */
    labels.forEach(function (t) { widest = Math.max(widest, t.getComputedTextLength ? t.getComputedTextLength() : 0); });
    var padL = Math.max(48, Math.ceil(widest) + 16);
    function y(v) { return padT + (H - padT - padB) * (1 - (v - ax.lo) / (ax.hi - ax.lo)); }
    labels.forEach(function (t, i) {
      var v = ax.ticks[i];
      t.setAttribute("x", padL - 6); t.setAttribute("y", y(v) + 4);
      svg.insertBefore(sv("line", {x1: padL, x2: W - 10, y1: y(v), y2: y(v), stroke: "#eef1f5"}), svg.firstChild);
    });
    add(svg, sv("line", {x1: padL, x2: padL, y1: padT - 4, y2: H - padB, stroke: "#999"}));
    add(svg, sv("line", {x1: padL, x2: W - 10, y1: H - padB, y2: H - padB, stroke: "#999"}));
    if (ax.broken) {
      add(svg, sv("text", {x: 4, y: 14, "class": "axis-note", "data-axis-note": "1"},
                  "axis starts at " + ax.text(ax.lo) + " (broken), not 0"));
      zigzag(svg, padL - 5, padL + 5, H - padB - 8);
    }
    var bw = (W - padL - 10) / steps.length;
    steps.forEach(function (s, i) { waterBar(svg, s, padL + i * bw, bw, y, ax, H - padB); });
    add(parent, el("div", {"class": "sub caption"}, "Each category's bar in its legend colour; \u25b2 with a solid " +
        "dark-red outline: it grew, \u25bc with a dashed dark-green outline: it shrank; grey: the totals" +
        (ax.broken ? "; the axis starts at " + ax.text(ax.lo) + ", so the totals' bars are cut (zigzag)." : ".")));
  }
  function waterBar(svg, s, x0, bw, y, ax, base) {
    var top = y(Math.max(s.from, s.to)), bot = s.total ? base : y(Math.min(s.from, s.to));
    var sign = s.total ? null : Math.abs(s.delta) < 0.05 ? 0 : s.delta > 0 ? 1 : -1;
    var attrs = {x: x0 + bw * 0.15, y: top, width: bw * 0.7, height: Math.max(bot - top, 1),
                 fill: s.total ? "#7f8a9c" : CAT_COL[s.label] || "#999", "data-label": s.label};
    if (s.total) {
      attrs["data-us"] = s.to;
      if (ax.broken) attrs["data-broken"] = "1";
    } else {
      attrs["data-delta"] = s.delta;
      attrs["data-sign"] = sign > 0 ? "+" : sign < 0 ? "-" : "0";
      if (sign) {
        attrs.stroke = sign > 0 ? "#8b1a1a" : "#1e6b34";
        attrs["stroke-width"] = 2;
        if (sign < 0) attrs["stroke-dasharray"] = "5 3";
      }
    }
    var arrow = sign > 0 ? "\u25b2 " : sign < 0 ? "\u25bc " : "";
    var value = s.total ? fmt(s.to) : arrow + signed(s.delta);
    tip(add(svg, sv("rect", attrs)), s.label + ": " + value);
    if (s.total && ax.broken) zigzag(svg, attrs.x - 2, attrs.x + attrs.width + 2, base - 8);
    add(svg, sv("text", {x: x0 + bw / 2, y: base + 14, "text-anchor": "middle"}, s.label));
    add(svg, sv("text", {x: x0 + bw / 2, y: base + 28, "text-anchor": "middle", "class": "wf-value",
                         "data-label": s.label}, value));
  }
  /* The cut in a broken bar or axis: a white band with zigzag edges across [x1, x2] at height yc. */
  function zigzag(svg, x1, x2, yc) {
    var pts = [], n = Math.max(2, Math.round((x2 - x1) / 6));
    for (var i = 0; i <= n; i++) pts.push((x1 + (x2 - x1) * i / n).toFixed(1) + "," + (yc + (i % 2 ? -2.5 : 2.5)));
    add(svg, sv("polyline", {points: pts.join(" "), fill: "none", stroke: "#fff", "stroke-width": 6, "class": "zigzag"}));
    add(svg, sv("polyline", {points: pts.join(" "), fill: "none", stroke: "#5b6576", "stroke-width": 1,
                             "class": "zigzag", transform: "translate(0,-3)"}));
    add(svg, sv("polyline", {points: pts.join(" "), fill: "none", stroke: "#5b6576", "stroke-width": 1,
                             "class": "zigzag", transform: "translate(0,3)"}));
  }

  /* Paired blocks by kind and unpaired ones by kind: Python's rows (tracekit.renderers.html.pair_groups_data). */
  function pairedBlocks(parent, R) {
    add(parent, el("h2", null, "Paired blocks (" + R.blocks.length + " pairs; " + R.unmatched_before.length +
        " only before, " + R.unmatched_after.length + " only after)"));
    var P = R.pair_groups;
    ["before", "after"].forEach(function (side) {
      if (!P[side].length) return;
      add(parent, el("div", {"class": "sub"}, "blocks only " + side + " (unpaired), all steps"));
      var heads = [{name: "block kind"}, {name: "n", num: true}, {name: "time", num: true}];
      table(parent, heads, P[side].map(function (g) {
        return {attrs: {"data-unpaired": side}, cells: [nameCell(g.label + phaseSuffix(g)), cell(String(g.n), g.n),
                                                        cell(fmt(g.total_us), g.total_us)]};
      }));
    });
    if (!P.pairs.length) return;
    table(parent, [{name: "blocks (before \u2192 after kind)"}, {name: "n", num: true}, {name: "before", num: true},
                   {name: "after", num: true}, {name: "\u0394", num: true}, {name: "largest change"}],
          P.pairs.map(function (g) {
            var d = g.delta_us;
            return {cells: [nameCell(g.label + phaseSuffix(g)), cell(String(g.n), g.n),
                            cell(fmt(g.before_us), g.before_us), cell(fmt(g.after_us), g.after_us),
                            cell(signed(d), d, {cls: "num" + (Math.abs(d) < 0.05 ? "" : d > 0 ? " pos" : " neg")}),
                            cell(g.largest_change)]};
          }));
  }

  /* A folder of runs: a row per run; when names read <impl>_<seq>, charts against sequence length.
     Latency is the one measured outside the profiler (measured.json) where a run has it; otherwise the
     attention blocks' profiled span per step, labelled "profiled"; launch-bound runs are marked everywhere. */
  function renderSweep(parent, R) {
    var runs = R.runs;
    var measured = runs.some(function (r) { return r.run_row.latency_ms !== null; });
    add(parent, el("h1", null, "tracekit report: " + R.source + " (" + runs.length + " runs)"));
    add(parent, el("div", {"class": "sub"}, (measured
        ? "latency: measured outside the profiler (one forward pass, measured.json); "
        : "latency: no run has a measured latency (measured.json), so the charts show the attention blocks' " +
          "profiled span per step, inflated by the profiler's own launch overhead; ") +
        "busy and span: the blocks' device time and extent per step (a run's totals over its steps, divided by " +
        "them); idle: the share of their span the device waited. " +
        "Hollow points and LB: launch-bound runs (busy time and span are not the latency). Click a run for its report."));
    (R.warnings || []).forEach(function (w) { add(parent, el("div", {"class": "warn"}, w)); });
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
      return measured ? null : w.span_per_step_us;
    }
    /* The three speedups kept apart (issue 37): measured latency, profiled step busy, profiled attention busy. */
    function speedText(w, which) {
      var x = w[which];
      if (x === null || x === undefined) return "\u2014";
      if (which === "latency_speedup") return x.toFixed(2) + "\u00d7";
      return x.toFixed(2) + "\u00d7" + (w[which + "_launch_bound"] ? " profiled, LB" : " profiled");
    }
    var lat = runs.some(function (r) { return r.run_row.latency_speedup !== null; });
    var plotted = lat ? "latency_speedup" : "step_speedup";
    function speedLB(impl, seq) {  /* a launch-bound profiled figure is hollow: not the latency */
      var r = byKey[impl + "\u0000" + seq];
      return !!(r && !lat && r.run_row.step_speedup_launch_bound);
    }
    function lb(impl, seq) { var r = byKey[impl + "\u0000" + seq]; return !!(r && r.run_row.launch_bound); }
    var base = baseline ? baseline.replace(/[_-]\d+$/, "") : "\u2014";
    if (ok && seqs.length > 1) {
      var charts = add(parent, el("div", {"class": "charts"}));
      var col = function (impl) { return SERIES_COL[impls.indexOf(impl) % SERIES_COL.length]; };
      lineChart(charts, measured ? "latency (measured)" : "attention span per step (profiled)", impls, seqs,
                function (impl, seq) { var r = byKey[impl + "\u0000" + seq]; return r ? latency(r) : null; },
                fmt, col, true, lb, {tick: timeTick});
      lineChart(charts, lat ? "latency speedup over " + base + " (measured)"
                            : "step speedup over " + base + " (profiled step busy)",
                impls, seqs,
                function (impl, seq) {  /* the baseline's own runs sit at 1× */
                  var r = byKey[impl + "\u0000" + seq];
                  return !r ? null : r.run_row[plotted] !== null ? r.run_row[plotted] : (impl === base ? 1 : null);
                },
                function (v) { return v.toFixed(2) + "\u00d7"; }, col, true, speedLB,
                {tick: speedTick, ref: {v: 1, label: "1\u00d7 = " + base}});
      if (runs.some(function (r) { return r.run_row.idle_pct !== null; })) {  /* device runs: a CPU has no idle device */
        lineChart(charts, "idle share of the attention span", impls, seqs, function (impl, seq) {
          var r = byKey[impl + "\u0000" + seq]; return r && r.run_row.idle_pct !== null ? r.run_row.idle_pct / 100 : null;
        }, pct, col, false, lb, {tick: pctTick});
      }
      lineChart(charts, "attention share of device busy time", impls, seqs, function (impl, seq) {
        var r = byKey[impl + "\u0000" + seq]; return r ? r.totals.attention_share : null;
      }, pct, col, false, lb, {tick: pctTick});
      unchartedNote(parent, runs);
    }
    add(parent, el("h2", null, "Runs"));
    var detail = el("div", {"class": "detail"});
    /* Eleven columns: headers wrap and the table scrolls inside its box, so a 1280 px page never scrolls sideways
       (issue 42; report.css, .table-scroll). */
    var runsBox = add(parent, el("div", {"class": "table-scroll"}));
    table(runsBox, [{name: "run"}, {name: "blocks", num: true}, {name: "latency (measured)", num: true},
                   {name: "latency speedup over " + base + " (measured)", num: true},
                   {name: "step speedup (profiled)", num: true}, {name: "attention speedup (profiled)", num: true},
                   {name: "busy per step (profiled)", num: true},
                   {name: "span per step (profiled)", num: true}, {name: "idle", num: true},
                   {name: "attention share", num: true}, {name: "largest category"}],
          runs.map(function (r) {
            var t = r.totals, w = r.run_row, big = null;
            keys(t.categories).forEach(function (c) { if (big === null || t.categories[c] > t.categories[big]) big = c; });
            var lat = w.latency_ms === null ? null : w.latency_ms * 1000;
            return {run: r, attrs: {"data-run": r.name, "data-launch-bound": w.launch_bound ? "1" : "0"},
                    cells: [cell(r.name), cell(String(t.blocks), t.blocks), cell(lat === null ? "\u2014" : fmt(lat), lat),
                            cell(speedText(w, "latency_speedup"), w.latency_speedup),
                            cell(speedText(w, "step_speedup"), w.step_speedup),
                            cell(speedText(w, "attention_speedup"), w.attention_speedup),
                            perStepCell(w.busy_per_step_us, t.total_us, w.steps),
                            perStepCell(w.span_per_step_us, t.span_us, w.steps),
                            cell(w.idle_pct === null ? "\u2014" : pct(w.idle_pct / 100) + (w.launch_bound ? " LB" : ""), w.idle_pct),
                            cell(pct(t.attention_share), t.attention_share),
                            cell(big && t.total_us > 0 ? big + " " + pct(t.categories[big] / t.total_us) : "\u2014")]};
          }),
          function (row) {
            while (detail.firstChild) detail.removeChild(detail.firstChild);
            renderAttribution(detail, row.run, "run: " + row.run.name);
          }).classList.add("wrap-heads");
    parent.appendChild(detail);
  }

  /* A run's busy or span per step (the charts' time base; Python divided the totals by the run's steps), its
     total over the steps on hover. */
  function perStepCell(us, total, steps) {
    return cell(fmt(us), us, {title: fmt(total) + " over " + steps + (steps === 1 ? " step" : " steps")});
  }

  /* One line per series over a log2 x axis (sequence length); y linear from 0, or log when asked. Round ticks
     (1, 2, 5 × 10^k on a log axis; niceStep's on a linear one, from 0), a reference line where opts.ref asks
     (the speedup chart's 1×), and each series labelled at its line's end (directLabels): a colour-blind-safe
     colour, a marker shape and a dash of its own, so that two series drawn on top of each other still show. */
  function lineChart(parent, title, series, xs, value, fmtY, colour, logY, hollow, opts) {
    opts = opts || {};
    if (logY) title += " (log scale)";
    var W = 470, H = 250, padL = 58, padR = 112, padT = 22, padB = 30;
    var box = add(parent, el("div", {"class": "chart", "data-chart": title}));
    var svg = add(box, sv("svg", {viewBox: "0 0 " + W + " " + H, width: W, height: H}));
    add(svg, sv("text", {x: (W - padR + padL) / 2, y: 14, "text-anchor": "middle", "font-weight": "bold",
                         "class": "chart-title"}, title));
    var vals = [];
    series.forEach(function (s) { xs.forEach(function (x) { var v = value(s, x); if (v !== null && v > 0) vals.push(v); }); });
    if (!vals.length) return;
    if (opts.ref) vals.push(opts.ref.v);
    var ax = logY ? logTicks(Math.min.apply(null, vals), Math.max.apply(null, vals))
                  : linTicks(Math.max.apply(null, vals));
    var f = logY ? Math.log : function (v) { return v; };
    function X(i) { return padL + (W - padL - padR) * (xs.length > 1 ? i / (xs.length - 1) : 0.5); }
    function Y(v) { return padT + (H - padT - padB) * (1 - (f(v) - f(ax.lo)) / (f(ax.hi) - f(ax.lo))); }
    var tickText = opts.tick || fmtY;
    ax.ticks.forEach(function (v) {
      add(svg, sv("line", {x1: padL, x2: W - padR, y1: Y(v), y2: Y(v), stroke: "#eee"}));
      add(svg, sv("text", {x: padL - 4, y: Y(v) + 4, "text-anchor": "end", "class": "tick", "data-tick": v},
                  tickText(v)));
    });
    add(svg, sv("line", {x1: padL, x2: padL, y1: padT, y2: H - padB, stroke: "#aaa"}));
    add(svg, sv("line", {x1: padL, x2: W - padR, y1: H - padB, y2: H - padB, stroke: "#aaa"}));
    if (opts.ref) refLine(svg, Y(opts.ref.v), padL, W - padR, (X(0) + X(Math.min(1, xs.length - 1))) / 2, opts.ref);
    xs.forEach(function (x, i) { add(svg, sv("text", {x: X(i), y: H - padB + 14, "text-anchor": "middle"}, String(x))); });
    add(svg, sv("text", {x: (W - padR + padL) / 2, y: H - 3, "text-anchor": "middle"}, "sequence length"));
    var ends = [];
    series.forEach(function (s, k) {
      var st = seriesStyle(k, colour(s)), pts = [], last = null;
      xs.forEach(function (x, i) {
        var v = value(s, x);
        if (v === null || v <= 0) return;
        pts.push(X(i).toFixed(1) + "," + Y(v).toFixed(1));
        last = {x: X(i), y: Y(v)};
      });
      if (pts.length > 1) add(svg, sv("polyline", {points: pts.join(" "), fill: "none", stroke: st.colour,
                                                    "stroke-width": 1.8, "stroke-dasharray": st.dash,
                                                    "data-series": s, "class": "series-line"}));
      xs.forEach(function (x, i) {
        var v = value(s, x);
        if (v === null || v <= 0) return;
        var open = hollow ? hollow(s, x) : false;  /* a launch-bound run: its figure is not the latency */
        tip(marker(svg, st, X(i), Y(v), open, {"class": "pt", "data-series": s, "data-x": x, "data-v": v,
                                               "data-launch-bound": open ? "1" : "0"}),
            s + " @ " + x + ": " + fmtY(v) + (open ? " (launch-bound)" : ""));
      });
      if (last) ends.push({series: s, style: st, x: last.x, y: last.y});
    });
    directLabels(svg, ends, W - padR + 6, padT, H - padB);
  }

  /* Okabe and Ito's 8 colours, told apart with the common colour-vision deficiencies (black first: the baseline
     is the first series when it is eager); each series also gets a marker shape and a dash (seriesStyle). */
  var SERIES_COL = ["#000000", "#E69F00", "#56B4E9", "#009E73", "#0072B2", "#D55E00", "#CC79A7", "#F0E442"];
  var SHAPES = ["circle", "square", "triangle", "diamond", "triangle-down"];
  var DASHES = ["", "6 3", "2 2.5"];
  /* Series k's look: 5 shapes × 3 dashes never repeat within 15 series, and two series of one colour (past 8)
     differ in shape or dash. */
  function seriesStyle(k, colour) {
    return {colour: colour, shape: SHAPES[k % SHAPES.length], dash: DASHES[k % DASHES.length]};
  }
  /* The corners of each marker but the circle, in units of its radius around its centre. */
  var SHAPE_PTS = {square: [[-0.85, -0.85], [0.85, -0.85], [0.85, 0.85], [-0.85, 0.85]],
                   triangle: [[0, -1.1], [1, 0.8], [-1, 0.8]], diamond: [[0, -1.2], [1, 0], [0, 1.2], [-1, 0]],
                   "triangle-down": [[0, 1.1], [1, -0.8], [-1, -0.8]]};
  function marker(svg, st, x, y, open, attrs) {
    var r = 3.6, d;
    if (st.shape === "circle") {
      d = "M" + (x - r) + "," + y + "a" + r + "," + r + " 0 1,0 " + 2 * r + ",0a" + r + "," + r + " 0 1,0 " +
          -2 * r + ",0Z";
    } else {
      d = "M" + SHAPE_PTS[st.shape].map(function (p) { return (x + p[0] * r) + "," + (y + p[1] * r); }).join("L") + "Z";
    }
    var a = {d: d, fill: open ? "#fff" : st.colour, stroke: st.colour, "stroke-width": 1.3, "data-shape": st.shape};
    for (var k in attrs) a[k] = attrs[k];
    return add(svg, sv("path", a));
  }

  /* Each series' name at its line's end, in the plot's right margin: a key (its dash and marker) then the name,
     moved apart where ends crowd (a leader line joins a moved label to its end), so that series which end on
     the same point (sdpa and sdpa-cudnn) are each named. */
  function directLabels(svg, ends, x0, top, bottom) {
    var gap = 13;  /* a 10 px label's line box */
    ends.sort(function (a, b) { return a.y - b.y; });
    var ys = ends.map(function (e) { return e.y; });
    for (var i = 1; i < ys.length; i++) ys[i] = Math.max(ys[i], ys[i - 1] + gap);
    if (ys.length && ys[ys.length - 1] > bottom + 4) {  /* pushed below the plot: move the crowd up */
      ys[ys.length - 1] = bottom + 4;
      for (var j = ys.length - 2; j >= 0; j--) ys[j] = Math.min(ys[j], ys[j + 1] - gap);
    }
    ends.forEach(function (e, k) {
      var y = ys[k], g = add(svg, sv("g", {"class": "end-label", "data-series": e.series, "data-y": y.toFixed(1)}));
      if (Math.abs(y - e.y) > 1) add(g, sv("line", {x1: e.x + 4, y1: e.y, x2: x0 - 1, y2: y, stroke: e.style.colour,
                                                    "stroke-width": 0.8, "class": "leader"}));
      add(g, sv("line", {x1: x0, x2: x0 + 16, y1: y, y2: y, stroke: e.style.colour, "stroke-width": 1.8,
                         "stroke-dasharray": e.style.dash}));
      marker(g, e.style, x0 + 8, y, false, {});
      add(g, sv("text", {x: x0 + 20, y: y + 3.5, "font-size": 10, "class": "end-name"}, e.series));
    });
  }

  /* A reference level across the plot (the speedup chart's 1×: the baseline), labelled above it at labelX (between
     two sequence lengths' markers: the baseline's own line lies on it). */
  function refLine(svg, y, x1, x2, labelX, ref) {
    add(svg, sv("line", {x1: x1, x2: x2, y1: y, y2: y, stroke: "#5b6576", "stroke-width": 1.2,
                         "stroke-dasharray": "4 3", "class": "ref", "data-v": ref.v}));
    add(svg, sv("text", {x: labelX, y: y - 4, "font-size": 10, "text-anchor": "middle", "class": "ref-label"},
                ref.label));
  }

  /* A log axis over [lo, hi]: it widens to the nearest 1, 2 or 5 × 10^k outside the data (to the next one up
     where lo = hi), and ticks at each such value inside (only the powers of ten when that makes more than 7). */
  function logTicks(lo, hi) {
    var all = [];
    for (var k = Math.floor(Math.log(lo) / Math.LN10) - 1; k <= Math.ceil(Math.log(hi) / Math.LN10) + 1; k++) {
      [1, 2, 5].forEach(function (m) { all.push(round125(m, k)); });
    }
    var a = all.filter(function (v) { return v <= lo * (1 + 1e-9); }).pop();
    var b = all.filter(function (v) { return v >= hi * (1 - 1e-9); })[0];
    if (b <= a) b = all[all.indexOf(a) + 1];  /* one level (every run at 1×): the axis still has a height */
    var ticks = all.filter(function (v) { return v >= a && v <= b; });
    if (ticks.length > 7) {
      var tens = ticks.filter(function (v) {
        var e = Math.log(v) / Math.LN10;
        return Math.abs(e - Math.round(e)) < 1e-9;
      });
      if (tens.length >= 2) ticks = tens;
    }
    return {lo: a, hi: b, ticks: ticks};
  }
  /* m × 10^k without the float noise of Math.pow (0.1 * 2 = 0.2, never 0.20000000000000004). */
  function round125(m, k) { return k >= 0 ? m * Math.pow(10, k) : m / Math.pow(10, -k); }
  /* A linear axis from 0 to a round top, ticks niceStep apart. */
  function linTicks(hi) {
    var step = niceStep(hi / 5), top = Math.ceil(hi / step - 1e-9) * step, ticks = [];
    for (var k = 0; k * step <= top + step * 1e-6; k++) ticks.push(Number((k * step).toPrecision(12)));
    return {lo: 0, hi: top, ticks: ticks};
  }
  /* Tick labels on round values: "500 µs", "2 ms", "0.5×", "40%": no digits beyond the tick's own. */
  function timeTick(us) {
    var u = us >= 1e6 ? ["s", 1e6] : us >= 1e3 ? ["ms", 1e3] : ["\u00b5s", 1];
    return Number((us / u[1]).toPrecision(6)) + " " + u[0];
  }
  function speedTick(x) { return Number(x.toPrecision(6)) + "\u00d7"; }
  function pctTick(x) { return Number((100 * x).toPrecision(6)) + "%"; }

  /* Runs whose names do not read <impl>_<seq> stay in the table but have no place on a chart: named under them. */
  function unchartedNote(parent, runs) {
    var names = runs.filter(function (r) { return r.run_row.impl === null; }).map(function (r) { return r.name; });
    if (!names.length) return;
    add(parent, el("div", {"class": "sub uncharted", "data-uncharted": names.length},
                   "not charted: " + names.join(", ") + " (not named <impl>_<seq>)"));
  }

  /* What timeline.js (tkTimeline) borrows from this page. */
  var KIT = {el: el, add: add, fmt: fmt, ink: ink, CAT_COL: CAT_COL};

  /* Before and after, one step each, on one time scale (each from its own step's start); zoom and pan move both. */
  function diffTimelines(parent, TL) {
    if (!TL || !TL.before || !TL.after) return;
    var fullUs = Math.max(TL.before.end_us - TL.before.start_us, TL.after.end_us - TL.after.start_us);
    var views = [];
    function link(k) { return function (r0, r1) { views.forEach(function (v, j) { if (j !== k) v.setView(r0, r1); }); }; }
    views.push(tkTimeline(parent, TL.before, KIT, {title: "Timeline: before", fullUs: fullUs, onView: link(0)}));
    views.push(tkTimeline(parent, TL.after, KIT, {title: "Timeline: after (same time scale)", fullUs: fullUs, onView: link(1)}));
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
