/* tracekit report: the timeline of one step (R.timeline, built by tracekit.results.timeline). Concatenated
   before report.js into the page's one script; report.js calls tkTimeline(parent, T, kit). */
function tkTimeline(parent, T, kit) {
  "use strict";
  parent.appendChild(kit.el("div", {"class": "sub", "data-timeline": "pending"}, "timeline: not drawn yet"));
}
