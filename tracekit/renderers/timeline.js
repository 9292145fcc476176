/* tracekit report: one step in time (R.timeline, built by tracekit.results.timeline as columns of numbers).
   Concatenated before report.js into the page's one script; report.js calls tkTimeline(parent, T, kit, opts).

   Why a canvas: a step can hold tens of thousands of kernels, and a DOM node each would freeze the page. Text
   from the trace reaches the page only through textContent and the canvas's fillText, never as markup.
   The wrapper's data-* attributes say what is drawn (view range, blocks, kernels, gaps in view), so a test reads
   the drawing without reading pixels. */
function tkTimeline(parent, T, kit, opts) {
  "use strict";
  opts = opts || {};
  var el = kit.el, add = kit.add, fmt = kit.fmt, COL = kit.CAT_COL;
  var CATS = T.categories, CAUSES = T.idle_causes;
  var CAUSE_COL = {launch: "#d9a400", sync: "#8e6bbf", elsewhere: "#4a90c8", event_wait: "#c2571a",
                   queued: "#7fae86", host_op: "#d46a9c", other: "#9aa3b2"};
  // plain words for the idle causes (vocab.IdleCause); a cause without one shows its key
  var CAUSE_LABEL = {elsewhere: "device busy elsewhere", event_wait: "event wait", queued: "queued (launch issued)",
                     host_op: "host op, no launch"};
  function causeLabel(c) { return CAUSE_LABEL[c] || c; }
  // the idle causes that took time (values(c): its times), in vocab.IdleCause order: a cause at zero is not listed
  function timed(causes, values) {
    return causes.filter(function (c) { return (values(c) || []).some(function (v) { return v > 0; }); });
  }
  var IDLE_FILL = "#e6e9ee";
  var ROW_H = 20, BLOCK_H = 32, MAX_BLOCK_ROWS = 6, AXIS_H = 22, LABEL_W = 178, PAD_R = 10, MIN_RANGE_US = 0.05;
  var FONT = "11px system-ui,-apple-system,'Segoe UI',sans-serif";
  var full = Math.max(opts.fullUs || 0, T.end_us - T.start_us, MIN_RANGE_US);  /* µs after the step's start */
  var view = {r0: 0, r1: full};
  var rows = buildRows(), H = AXIS_H + 4;
  rows.forEach(function (row) { row.y = H; row.h = row.kind === "blocks" ? BLOCK_H : ROW_H; H += row.h; });

  /* -- rows: one kind of piece each, its pieces sorted by start with a running maximum of ends (for hover) -- */
  function sortedRow(row, starts, ends, keep) {  /* keep: the pieces of this row (default all) */
    var idx = keep, i;
    if (!idx) { idx = new Array(starts.length); for (i = 0; i < starts.length; i++) idx[i] = i; }
    idx.sort(function (a, b) { return starts[a] - starts[b] || a - b; });
    row.idx = idx; row.starts = starts; row.ends = ends; row.pmax = new Float64Array(idx.length);
    var m = -Infinity;
    for (i = 0; i < idx.length; i++) { m = Math.max(m, ends[idx[i]]); row.pmax[i] = m; }
    return row;
  }
  function blockRows() {
    var lastEnd = [], out = [], starts = [], ends = [];
    T.blocks.forEach(function (b, j) {  /* greedy packing: overlapping blocks take another row, up to a few */
      var r = 0;
      while (r < lastEnd.length && lastEnd[r] > b.start_us && r < MAX_BLOCK_ROWS - 1) r++;
      lastEnd[r] = Math.max(lastEnd[r] === undefined ? -Infinity : lastEnd[r], b.end_us);
      if (!out[r]) out[r] = [];
      out[r].push(j);
      starts.push(b.start_us); ends.push(b.end_us);
    });
    return out.map(function (members, r) {
      return sortedRow({kind: "blocks", label: r ? "attention blocks (" + (r + 1) + ")" : "attention blocks"},
                       starts, ends, members);
    });
  }
  function laneRow(kind, lane, cols) {
    var keep = [];
    cols.lane.forEach(function (l, i) { if (l === lane) keep.push(i); });
    return sortedRow({kind: kind, lane: lane, label: T.lanes[lane].label}, cols.start, cols.end, keep);
  }
  function buildRows() {
    var out = blockRows();
    if (T.gaps.start.length) out.push(sortedRow({kind: "gaps", label: "device idle in blocks"}, T.gaps.start, T.gaps.end));
    T.lanes.forEach(function (l, i) {
      if (l.kind !== "host") return;
      out.push(laneRow("host", i, T.host));
      if (T.kernels.lane.indexOf(i) >= 0) {  /* a CPU-only trace: the blocks' ops on this thread */
        var ops = laneRow("kernels", i, T.kernels);
        ops.label = "ops \u00b7 " + l.label;
        out.push(ops);
      }
    });
    T.lanes.forEach(function (l, i) {
      if (l.kind === "stream") out.push(laneRow("kernels", i, T.kernels));
    });
    return out;
  }

  /* -- the page around the canvas -- */
  var wrap = add(parent, el("div", {"class": "timeline", "data-timeline": "drawn", "data-step": T.step === null ? "" : T.step,
                                    "data-blocks": T.blocks.length}));
  add(wrap, el("h2", null, opts.title || "Timeline"));
  add(wrap, el("div", {"class": "sub"}, stepNote()));
  if (T.left_out) add(wrap, el("div", {"class": "warn"}, T.left_out + " kernels past the first " +
                               T.kernels.start.length + " of this step are not drawn (their time is in every figure)."));
  var bar = add(wrap, el("div", {"class": "tl-bar"}));
  function button(text, title, fn) {
    var b = add(bar, el("button", {type: "button", title: title}, text));
    b.addEventListener("click", function () { fn(); canvas.focus(); });
    return b;
  }
  button("\u2212", "zoom out (S)", function () { zoom(1.6, 0.5); });
  button("+", "zoom in (W)", function () { zoom(1 / 1.6, 0.5); });
  button("reset", "the whole step (0)", function () { setView(0, full); });
  var readout = add(bar, el("span", {"class": "sub tl-readout"}));
  var legend = add(wrap, el("div", {"class": "legend"}));
  CATS.forEach(function (c) { key(c, COL[c] || "#999"); });
  timed(CAUSES, function (c) { return T.gaps[c]; }).forEach(function (c) { key("idle: " + causeLabel(c), CAUSE_COL[c] || "#999"); });
  function key(text, colour) {
    var s = add(legend, el("span"));
    add(s, el("i", {style: "background:" + colour}));
    s.appendChild(document.createTextNode(text));
  }
  var box = add(wrap, el("div", {"class": "tl-box"}));
  var canvas = add(box, el("canvas", {tabindex: "0", "aria-label": "timeline of one step; W/S zoom, A/D pan"}));
  var tipBox = add(box, el("div", {"class": "tl-tip", hidden: "hidden"}));
  add(wrap, el("div", {"class": "sub"}, "ctrl+wheel or W/S: zoom \u00b7 drag, shift+wheel or A/D: pan \u00b7 " +
      "click a block: zoom to it \u00b7 0: the whole step. Block bars: the block's window, filled by its category " +
      "split of " + (T.kernel_unit === "op" ? "host time; the ops rows hold the ops that time was counted in (a " +
      "parent op's self time around its children)." : "busy time and its idle share (grey); the stream rows below " +
      "hold the kernels where they ran.")));

  function stepNote() {
    var where = T.trace + " \u00b7 ";
    var unit = T.kernel_unit === "op" ? " ops (self time)" : " kernels";
    var what = T.blocks.length + " blocks, " + T.kernels.start.length + unit + ", " + T.gaps.start.length +
        " idle gaps \u00b7 times from the step's start";
    if (T.chosen === "all") return where + "the trace has no steps: every block \u00b7 " + what;
    var how = T.chosen === "requested" ? "as asked" : T.steps.length === 1 ? "the only step with attention blocks"
        : "the median of " + T.steps.length + " steps by span";
    if (T.requested !== undefined && T.requested !== null && T.chosen !== "requested")
      how = "step " + T.requested + " has no attention blocks, so the median of " + T.steps.length + " steps by span";
    return where + "step " + T.step + " (" + how + "; tracekit report --step N draws another) \u00b7 " + what;
  }

  /* -- geometry -- */
  var W = 0;
  function plotW() { return Math.max(W - LABEL_W - PAD_R, 10); }
  function X(us) { return LABEL_W + (us - T.start_us - view.r0) / (view.r1 - view.r0) * plotW(); }
  function timeAt(x) { return T.start_us + view.r0 + (x - LABEL_W) / plotW() * (view.r1 - view.r0); }

  /* -- drawing -- */
  var pending = false;
  function schedule() {
    if (pending) return;
    pending = true;
    (window.requestAnimationFrame || setTimeout)(function () { pending = false; draw(); });
  }
  function draw() {
    var ratio = window.devicePixelRatio || 1;
    W = Math.max((box.clientWidth || 1100) - 2, 400);  /* less the canvas border */
    if (canvas.width !== Math.round(W * ratio) || canvas.height !== Math.round(H * ratio)) {
      canvas.width = Math.round(W * ratio); canvas.height = Math.round(H * ratio);
      canvas.style.width = W + "px"; canvas.style.height = H + "px";
    }
    var ctx = canvas.getContext("2d");
    ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
    ctx.clearRect(0, 0, W, H);
    ctx.font = FONT;
    ctx.textBaseline = "middle";
    axis(ctx);
    var counts = {blocks: 0, kernels: 0, gaps: 0, host: 0};
    rows.forEach(function (row, r) {
      ctx.fillStyle = r % 2 ? "#fafbfc" : "#f3f5f8";
      ctx.fillRect(LABEL_W, row.y, plotW(), row.h);
      ctx.save();
      ctx.beginPath(); ctx.rect(LABEL_W, row.y, plotW(), row.h); ctx.clip();
      counts[row.kind] += DRAW[row.kind](ctx, row, row.y + 2, row.h - 4);
      ctx.restore();
      ctx.fillStyle = "#3a4252";
      fitText(ctx, row.label, 4, row.y + row.h / 2, LABEL_W - 8);
    });
    wrap.setAttribute("data-view-start-us", (T.start_us + view.r0).toFixed(3));
    wrap.setAttribute("data-view-end-us", (T.start_us + view.r1).toFixed(3));
    wrap.setAttribute("data-blocks-drawn", counts.blocks);
    wrap.setAttribute("data-kernels-drawn", counts.kernels);
    wrap.setAttribute("data-gaps-drawn", counts.gaps);
    wrap.setAttribute("data-host-drawn", counts.host);
    wrap.setAttribute("data-plot", LABEL_W + " " + plotW());  /* the time axis: left edge and width, px */
    wrap.setAttribute("data-rows", rows.map(function (w) { return w.kind + " " + w.y + " " + w.h; }).join(","));
    readout.textContent = "showing " + fmt(view.r0) + " \u2013 " + fmt(view.r1) + " (" + fmt(view.r1 - view.r0) +
        " wide) of " + fmt(full);
  }
  function axis(ctx) {
    var span = view.r1 - view.r0, step = Math.pow(10, Math.floor(Math.log(span / 8) / Math.LN10));
    if (span / step > 40) step *= 5; else if (span / step > 16) step *= 2;
    var room = ctx.measureText(fmt(view.r1 + step)).width + 14, mult = [2, 2.5, 2], m = 0;
    while (step / span * plotW() < room) step *= mult[m++ % 3];  /* 1-2-5 steps wide enough for their labels */
    ctx.strokeStyle = "#d5dae2"; ctx.fillStyle = "#5b6576";
    var used = -Infinity;  /* where the last label ended: a label that would overlap it is left out */
    for (var t = Math.ceil(view.r0 / step) * step; t <= view.r1; t += step) {
      var x = X(T.start_us + t);
      ctx.beginPath(); ctx.moveTo(x + 0.5, AXIS_H - 4); ctx.lineTo(x + 0.5, H); ctx.stroke();
      var label = fmt(Math.abs(t) < step / 1e6 ? 0 : t), lw = ctx.measureText(label).width;
      var at = x + 3 + lw > W ? x - 3 - lw : x + 3;  /* the last tick's label stays inside */
      if (at < used + 6) continue;
      ctx.fillText(label, at, AXIS_H / 2);
      used = at + lw;
    }
  }
  function fitText(ctx, text, x, y, room) {
    if (room < 14) return;
    if (ctx.measureText(text).width > room) {
      var lo = 0, hi = text.length;
      while (lo < hi) {
        var mid = (lo + hi + 1) >> 1;
        if (ctx.measureText(text.slice(0, mid) + "\u2026").width <= room) lo = mid; else hi = mid - 1;
      }
      if (!lo) return;
      text = text.slice(0, lo) + "\u2026";
    }
    ctx.fillText(text, x, y);
  }
  /* The pieces of a row inside the view: calls fn(i, x0, x1) for each, in start order; returns how many. */
  function visible(row, fn) {
    var lo = T.start_us + view.r0, hi = T.start_us + view.r1, n = 0;
    for (var k = 0; k < row.idx.length; k++) {
      var i = row.idx[k];
      if (row.starts[i] > hi) break;
      if (row.ends[i] < lo) continue;
      fn(i, X(row.starts[i]), X(row.ends[i]));
      n++;
    }
    return n;
  }
  function blockLabel(b) {
    var busy = 0, top = null;
    CATS.forEach(function (c) { busy += b.categories[c] || 0; if (top === null || b.categories[c] > b.categories[top]) top = c; });
    return b.name + (busy > 0 ? " \u00b7 " + Math.round(100 * b.categories[top] / busy) + "% " + top : "");
  }
  var DRAW = {
    blocks: function (ctx, row, y, h) {
      return visible(row, function (j, x0, x1) {
        var b = T.blocks[j], span = b.end_us - b.start_us, busy = 0;
        CATS.forEach(function (c) { busy += b.categories[c] || 0; });
        var whole = Math.max(span, busy + (b.idle_us || 0), 1e-9), w = Math.max(x1 - x0, 1), x = x0;
        var bar = Math.round(h * 0.45), top = y + h - bar;  /* the label above, the split below */
        ctx.fillStyle = "#fff"; ctx.fillRect(x0, y, w, h - bar);
        ctx.fillStyle = IDLE_FILL; ctx.fillRect(x0, top, w, bar);
        CATS.forEach(function (c) {
          var part = w * (b.categories[c] || 0) / whole;
          if (part <= 0) return;
          ctx.fillStyle = COL[c] || "#999"; ctx.fillRect(x, top, part, bar); x += part;
        });
        ctx.strokeStyle = "#1d2330"; ctx.lineWidth = 1; ctx.strokeRect(x0 + 0.5, y + 0.5, Math.max(w - 1, 0), h - 1);
        if (w > 30) {
          var left = Math.max(x0, LABEL_W) + 4;
          ctx.fillStyle = "#1d2330"; fitText(ctx, blockLabel(b), left, y + (h - bar) / 2 + 1, Math.min(x1, LABEL_W + plotW()) - left - 4);
        }
      });
    },
    gaps: function (ctx, row, y, h) {
      var G = T.gaps;
      return visible(row, function (i, x0, x1) {
        var c = mainCause(i), w = Math.max(x1 - x0, 1);
        ctx.fillStyle = CAUSE_COL[c] || "#999"; ctx.fillRect(x0, y + 3, w, h - 6);
        if (w > 70) { ctx.fillStyle = "#1d2330"; fitText(ctx, causeLabel(c) + " " + fmt(G.end[i] - G.start[i]), x0 + 3, y + h / 2, w - 6); }
      });
    },
    host: function (ctx, row, y, h) {
      return visible(row, function (i, x0, x1) {
        var w = Math.max(x1 - x0, 1);
        ctx.fillStyle = "#c8d3e6"; ctx.fillRect(x0, y, w, h);
        ctx.strokeStyle = "#6b7a93"; ctx.strokeRect(x0 + 0.5, y + 0.5, Math.max(w - 1, 0), h - 1);
        if (w > 40) { ctx.fillStyle = "#1d2330"; fitText(ctx, T.blocks[T.host.block[i]].name, Math.max(x0, LABEL_W) + 3, y + h / 2, w - 6); }
      });
    },
    kernels: function (ctx, row, y, h) {
      var K = T.kernels, lastX = -1, lastCat = -1;
      return visible(row, function (i, x0, x1) {
        var c = K.cat[i];
        if (x1 - x0 < 1 && Math.floor(x0) === lastX && c === lastCat) return;  /* one pixel holds many kernels */
        lastX = Math.floor(x0); lastCat = c;
        ctx.fillStyle = COL[CATS[c]] || "#999"; ctx.fillRect(x0, y, Math.max(x1 - x0, 1), h);
        if (x1 - x0 > 60) {
          ctx.fillStyle = kit.ink ? kit.ink(COL[CATS[c]]) : "#fff";
          fitText(ctx, kernelLabel(ctx, K.name[i], x1 - x0 - 6), x0 + 3, y + h / 2, x1 - x0 - 6);
        }
      });
    }
  };
  /* A kernel bar's label: its full name when that fits ``room`` px, else the widest of its display names that does
     (T.labels: renderers/names.py label_ladder, widest first: the function's name is kept, template arguments and
     launcher boilerplate go first), else the narrowest, which fitText cuts. Widths are measured once per name. */
  var labelWidths = [];
  function kernelLabel(ctx, n, room) {
    var names = [T.names[n]].concat((T.labels && T.labels[n]) || []), ws = labelWidths[n];
    if (!ws) ws = labelWidths[n] = names.map(function (s) { return ctx.measureText(s).width; });
    for (var k = 0; k < names.length; k++) if (ws[k] <= room) return names[k];
    return names[names.length - 1];
  }
  function mainCause(i) {
    var best = CAUSES[0];
    CAUSES.forEach(function (c) { if (T.gaps[c][i] > T.gaps[best][i]) best = c; });
    return best;
  }

  /* -- the view -- */
  function setView(r0, r1, quiet) {
    var w = Math.min(Math.max(r1 - r0, MIN_RANGE_US), full * 1.2);
    r0 = Math.min(Math.max(r0, -full * 0.1), full * 1.1 - w);
    view.r0 = r0; view.r1 = r0 + w;
    draw();
    if (!quiet && opts.onView) opts.onView(view.r0, view.r1);
  }
  function zoom(factor, at) {  /* at: where in the plot (0..1) stays put */
    var w = view.r1 - view.r0, t = view.r0 + at * w;
    setView(t - at * w * factor, t + (1 - at) * w * factor);
  }
  function pan(frac) { var w = view.r1 - view.r0; setView(view.r0 + frac * w, view.r1 + frac * w); }

  /* -- hover: the piece under the pointer, its full name and figures -- */
  function pick(x, y) {
    var row = null;
    rows.forEach(function (w) { if (y >= w.y && y < w.y + w.h) row = w; });
    if (!row || x < LABEL_W) return null;
    var t = timeAt(x), tol = 3 * (view.r1 - view.r0) / plotW();  /* 3 px: a 1 px kernel can be hovered */
    var lo = 0, hi = row.idx.length - 1, k = -1;
    while (lo <= hi) { var mid = (lo + hi) >> 1; if (row.starts[row.idx[mid]] <= t + tol) { k = mid; lo = mid + 1; } else hi = mid - 1; }
    var best = null, dist = Infinity;
    for (; k >= 0 && row.pmax[k] >= t - tol; k--) {
      var i = row.idx[k], s = row.starts[i], e = row.ends[i];
      if (e < t - tol) continue;
      var d = t < s ? s - t : t > e ? t - e : 0;
      if (d < dist || (d === dist && best !== null && e - s < row.ends[best] - row.starts[best])) { best = i; dist = d; }
    }
    return best === null ? null : {row: row, i: best};
  }
  function describe(p) {
    var i = p.i, lines;
    if (p.row.kind === "blocks") {
      var b = T.blocks[i];
      lines = [b.name, b.kind + " \u00b7 " + b.phase + " \u00b7 " + b.kernels + " kernels",
               "window " + fmt(b.end_us - b.start_us) + " (at +" + fmt(b.start_us - T.start_us) + ")",
               "busy " + fmt(b.busy_us) + " \u00b7 idle " + fmt(b.idle_us) + (b.launch_bound ? " \u00b7 launch-bound" : "")];
      CATS.forEach(function (c) {
        if (b.categories[c]) lines.push(c + " " + fmt(b.categories[c]) + " (" + (100 * b.categories[c] / (b.busy_us || 1)).toFixed(1) + "% of busy)");
      });
      if (b.idle_by_cause && b.idle_us > 0) lines.push("idle by cause: " + timed(CAUSES, function (c) { return [b.idle_by_cause[c + "_us"]]; }).map(function (c) { return causeLabel(c) + " " + fmt(b.idle_by_cause[c + "_us"]); }).join(" \u00b7 "));
    } else if (p.row.kind === "gaps") {
      var G = T.gaps;
      lines = ["device idle " + fmt(G.end[i] - G.start[i]) + " in " + T.blocks[G.block[i]].name,
               timed(CAUSES, function (c) { return [G[c][i]]; }).map(function (c) { return causeLabel(c) + " " + fmt(G[c][i]); }).join(" \u00b7 "),
               "at +" + fmt(G.start[i] - T.start_us)];
    } else if (p.row.kind === "host") {
      lines = ["host op of " + T.blocks[T.host.block[i]].name, fmt(T.host.end[i] - T.host.start[i]) + " at +" +
               fmt(T.host.start[i] - T.start_us), p.row.label];
    } else {
      var K = T.kernels;
      lines = [T.names[K.name[i]], CATS[K.cat[i]] + " \u00b7 " + fmt(K.end[i] - K.start[i]) + " at +" +
               fmt(K.start[i] - T.start_us), "in " + T.blocks[K.block[i]].name + " \u00b7 " + p.row.label];
    }
    return lines;
  }
  function showTip(ev) {
    var rect = canvas.getBoundingClientRect(), x = ev.clientX - rect.left, y = ev.clientY - rect.top;
    var p = pick(x, y);
    if (!p) { tipBox.hidden = true; return; }
    while (tipBox.firstChild) tipBox.removeChild(tipBox.firstChild);
    describe(p).forEach(function (line, n) { add(tipBox, el(n ? "div" : "b", null, line)); });
    tipBox.hidden = false;
    tipBox.style.left = Math.min(x + 14, Math.max(W - 380, 0)) + "px";
    tipBox.style.top = (y + 16) + "px";
  }

  /* -- input: Perfetto's keys (W/S zoom, A/D pan), ctrl+wheel zoom, drag or shift+wheel pan, click a block -- */
  var drag = null;
  canvas.addEventListener("wheel", function (ev) {
    var rect = canvas.getBoundingClientRect(), at = Math.min(Math.max((ev.clientX - rect.left - LABEL_W) / plotW(), 0), 1);
    if (ev.ctrlKey || ev.metaKey) { ev.preventDefault(); zoom(Math.exp(Math.max(Math.min(ev.deltaY, 300), -300) * 0.002), at); }
    else if (ev.shiftKey || Math.abs(ev.deltaX) > Math.abs(ev.deltaY)) { ev.preventDefault(); pan((ev.deltaX || ev.deltaY) / plotW()); }
  }, {passive: false});
  canvas.addEventListener("keydown", function (ev) {
    var k = ev.key;
    if (k === "w" || k === "W" || k === "+" || k === "=") zoom(1 / 1.4, 0.5);
    else if (k === "s" || k === "S" || k === "-") zoom(1.4, 0.5);
    else if (k === "a" || k === "A" || k === "ArrowLeft") pan(-0.2);
    else if (k === "d" || k === "D" || k === "ArrowRight") pan(0.2);
    else if (k === "0" || k === "Home") setView(0, full);
    else return;
    ev.preventDefault();
  });
  canvas.addEventListener("mousedown", function (ev) { drag = {x: ev.clientX, r0: view.r0, r1: view.r1, moved: false}; });
  window.addEventListener("mouseup", function (ev) {
    if (drag && !drag.moved) {
      var rect = canvas.getBoundingClientRect(), p = pick(ev.clientX - rect.left, ev.clientY - rect.top);
      if (p && p.row.kind === "blocks") {
        var b = T.blocks[p.i], pad = (b.end_us - b.start_us) * 0.05;
        setView(b.start_us - T.start_us - pad, b.end_us - T.start_us + pad);
      }
    }
    drag = null;
  });
  canvas.addEventListener("mousemove", function (ev) {
    if (drag) {
      var dx = ev.clientX - drag.x;
      if (Math.abs(dx) > 2) drag.moved = true;
      if (drag.moved) { var s = -dx / plotW() * (drag.r1 - drag.r0); setView(drag.r0 + s, drag.r1 + s); }
    }
    showTip(ev);
  });
  canvas.addEventListener("mouseleave", function () { tipBox.hidden = true; });
  window.addEventListener("resize", schedule);
  draw();
  return {setView: function (r0, r1) { setView(r0, r1, true); }, wrap: wrap};
}
