// The problems table: filter, sort and page through rows embedded as JSON. Vanilla JS; text only
// ever goes into the page through textContent, never as HTML.
(function () {
  "use strict";
  var source = document.getElementById("problems-data");
  if (!source) { return; }
  var data = JSON.parse(source.textContent);
  var cols = data.columns, rows = data.rows;
  var C = {};
  cols.forEach(function (c, i) { C[c] = i; });
  var PAGE = 50;
  var state = { q: "", status: "", reason: "", kind: "", sort: -1, dir: 1, page: 0 };
  var shown = rows;
  var $ = function (id) { return document.getElementById(id); };
  var body = $("problems-body"), info = $("problems-info");

  function human(n) {
    if (n === null || n === undefined) { return ""; }
    var units = ["B", "KB", "MB", "GB", "TB"], i = 0;
    while (Math.abs(n) >= 1000 && i < units.length - 1) { n /= 1000; i++; }
    return (i === 0 || n >= 100 ? Math.round(n) : n.toFixed(1)) + " " + units[i];
  }

  function matches(r, q) {
    if (state.status && r[C.status] !== state.status) { return false; }
    if (state.reason && r[C.reason] !== state.reason) { return false; }
    if (state.kind && r[C.kind] !== state.kind) { return false; }
    if (!q) { return true; }
    return String(r[C.path]).toLowerCase().indexOf(q) >= 0 ||
      String(r[C.reason]).toLowerCase().indexOf(q) >= 0 ||
      String(r[C.detail]).toLowerCase().indexOf(q) >= 0;
  }

  function compare(a, b) {
    var x = a[state.sort], y = b[state.sort];
    if (x === y) { return 0; }
    if (x === null || x === undefined || x === "") { return 1; }
    if (y === null || y === undefined || y === "") { return -1; }
    return (x < y ? -1 : 1) * state.dir;
  }

  function apply() {
    var q = state.q.trim().toLowerCase();
    shown = rows.filter(function (r) { return matches(r, q); });
    if (state.sort >= 0) { shown.sort(compare); }
    state.page = 0;
    render();
  }

  function cell(tr, text, cls) {
    var td = document.createElement("td");
    td.textContent = text;
    if (cls) { td.className = cls; }
    tr.appendChild(td);
  }

  function render() {
    var pages = Math.max(1, Math.ceil(shown.length / PAGE));
    state.page = Math.min(state.page, pages - 1);
    var start = state.page * PAGE, end = Math.min(shown.length, start + PAGE);
    var frag = document.createDocumentFragment();
    for (var i = start; i < end; i++) {
      var r = shown[i], tr = document.createElement("tr");
      cols.forEach(function (c, j) {
        if (c === "size") { cell(tr, human(r[j]), "size"); }
        else if (c === "status") { cell(tr, r[j], "status-" + r[j]); }
        else { cell(tr, r[j] === null ? "" : String(r[j]), c === "path" || c === "detail" ? c : ""); }
      });
      frag.appendChild(tr);
    }
    if (!shown.length) {
      var tr = document.createElement("tr");
      cell(tr, "No problem matches this filter.", "empty");
      tr.firstChild.colSpan = cols.length;
      frag.appendChild(tr);
    }
    body.replaceChildren(frag);
    var of = shown.length === rows.length ? "" : " (filtered from " + rows.length.toLocaleString("en") + ")";
    info.textContent = shown.length ? (start + 1).toLocaleString("en") + "–" + end.toLocaleString("en") + " of " +
      shown.length.toLocaleString("en") + of : "0 rows" + of;
    $("page-prev").disabled = state.page === 0;
    $("page-next").disabled = state.page >= pages - 1;
    $("page-no").textContent = "page " + (state.page + 1) + " of " + pages;
  }

  var timer = null;
  $("f-q").addEventListener("input", function (e) {
    state.q = e.target.value;
    clearTimeout(timer);
    timer = setTimeout(apply, 120);
  });
  ["status", "reason", "kind"].forEach(function (k) {
    $("f-" + k).addEventListener("change", function (e) { state[k] = e.target.value; apply(); });
  });
  $("f-clear").addEventListener("click", function () {
    state.q = state.status = state.reason = state.kind = "";
    $("f-q").value = ""; $("f-status").value = ""; $("f-reason").value = ""; $("f-kind").value = "";
    apply();
  });
  $("page-prev").addEventListener("click", function () { state.page--; render(); });
  $("page-next").addEventListener("click", function () { state.page++; render(); });
  Array.prototype.forEach.call(document.querySelectorAll("#problems th button"), function (b) {
    b.addEventListener("click", function () {
      var col = C[b.getAttribute("data-col")];
      state.dir = state.sort === col ? -state.dir : 1;
      state.sort = col;
      Array.prototype.forEach.call(document.querySelectorAll("#problems th button"), function (o) { o.removeAttribute("data-dir"); });
      b.setAttribute("data-dir", String(state.dir));
      shown.sort(compare);
      state.page = 0;
      render();
    });
  });
  // "show all in the table" buttons under capped galleries
  Array.prototype.forEach.call(document.querySelectorAll("button[data-show-status]"), function (b) {
    b.addEventListener("click", function () {
      state.q = ""; $("f-q").value = "";
      state.kind = ""; $("f-kind").value = "";
      state.status = b.getAttribute("data-show-status"); $("f-status").value = state.status;
      state.reason = b.getAttribute("data-show-reason"); $("f-reason").value = state.reason;
      apply();
      $("problems").scrollIntoView();
    });
  });
  render();
})();
