// specfleet serve: live progress of running matrices without a page reload.
// Polls /api/matrices/ID/progress every 2 s for each element marked data-matrix whose
// status is "running", and updates its counts, bar and status in place (textContent only).
(function () {
  "use strict";
  var PERIOD_MS = 2000, MAX_POLLS = 5400;  // stop after 3 hours on one open page
  var TIMEOUT_MS = 10000;  // a progress request unanswered this long is given up
  var STATUSES = ["done", "running", "failed", "interrupted", "pending"];

  function update(el, p) {
    var status = el.querySelector('[data-field="status"]');
    if (status) status.textContent = p.status;
    var finished = el.querySelector('[data-field="finished_at"]');
    // data-suffix: " UTC" where the time stands alone (a list's header says it instead)
    if (finished) finished.textContent = p.finished_at ?
      p.finished_at + (finished.getAttribute("data-suffix") || "") : "\u2013";
    el.setAttribute("data-status", p.status);
    var x = 0;
    STATUSES.forEach(function (s) {
      var count = el.querySelector('[data-count="' + s + '"]');
      if (count) count.textContent = String(p[s]);
      var seg = el.querySelector('[data-seg="' + s + '"]');
      if (seg) {
        var w = p.total ? 160 * p[s] / p.total : 0;
        seg.setAttribute("x", x.toFixed(1));
        seg.setAttribute("width", w.toFixed(1));
        x += w;
      }
    });
  }

  function running() {
    return Array.prototype.slice.call(document.querySelectorAll('[data-matrix][data-status="running"]'));
  }

  function poll(count) {
    var els = running();
    var note = document.querySelector(".live-note");
    if (note) note.hidden = els.length === 0;
    if (!els.length || count > MAX_POLLS) return;
    var pending = els.map(function (el) {
      var id = el.getAttribute("data-matrix");
      // A request that never answers (a server stalled mid-reply) must not stop the polling.
      var abort = new AbortController();
      var timer = setTimeout(function () { abort.abort(); }, TIMEOUT_MS);
      return fetch("/api/matrices/" + encodeURIComponent(id) + "/progress",
                   {cache: "no-store", signal: abort.signal})
        .then(function (r) { return r.ok ? r.json() : null; })
        .then(function (p) { if (p) update(el, p); })
        .catch(function () { /* server gone for a moment: try again next period */ })
        .then(function () { clearTimeout(timer); });
    });
    Promise.all(pending).then(function () {
      setTimeout(function () { poll(count + 1); }, PERIOD_MS);
    });
  }

  document.addEventListener("DOMContentLoaded", function () { poll(0); });
})();
