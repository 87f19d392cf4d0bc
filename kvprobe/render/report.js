// kvprobe HTML report: progressive enhancement only. The page (chart included) reads without this script.
// Never builds HTML from data: text goes through textContent, so trace content cannot inject markup.
(function () {
  "use strict";
  var doc = document;
  var tip = doc.getElementById("kv-tip");
  var bars = Array.prototype.slice.call(doc.querySelectorAll("svg.kv-chart g.req"));  // every chart's
  var firstChart = doc.querySelector("svg.kv-chart");
  var drawnBars = firstChart ? Array.prototype.slice.call(firstChart.querySelectorAll("g.req")) : [];
  var table = doc.getElementById("kv-requests");
  var rows = table ? Array.prototype.slice.call(table.tBodies[0].rows) : [];
  var selected = null;  // [row, bar] currently highlighted

  function byId(id) { return id ? doc.getElementById(id) : null; }
  // A row's bar in each chart: the tokens chart's id, and the dollars chart's with "-usd" after it.
  function barsOf(tr) { return [byId(tr.dataset.bar), byId(tr.dataset.bar + "-usd")].filter(Boolean); }
  function shown(el) { return el && el.getClientRects().length > 0; }

  // Select a row and its bars together (rows carry data-bar, bars data-row); scroll the other one into view.
  function select(tr, gs, scrollTo) {
    (selected || []).forEach(function (el) { if (el) el.classList.remove("sel"); });
    selected = [tr].concat(gs);
    selected.forEach(function (el) { if (el) el.classList.add("sel"); });
    if (scrollTo && scrollTo.scrollIntoView) scrollTo.scrollIntoView({ block: "center", behavior: "smooth" });
  }

  // Chart: a styled tooltip replaces the native <title> one; a click selects the table row.
  bars.forEach(function (g) {
    var title = g.querySelector("title");
    g.dataset.tip = title ? title.textContent : "";
    if (title) title.remove();
    g.addEventListener("mousemove", function (ev) {
      tip.textContent = g.dataset.tip;
      tip.hidden = false;
      var x = Math.min(ev.pageX + 14, window.scrollX + window.innerWidth - tip.offsetWidth - 8);
      tip.style.left = x + "px";
      tip.style.top = (ev.pageY + 16) + "px";
    });
    g.addEventListener("mouseleave", function () { tip.hidden = true; });
    g.addEventListener("click", function () {
      var tr = byId(g.dataset.row);
      select(tr, tr ? barsOf(tr) : [g], tr);
    });
  });
  rows.forEach(function (tr) {
    tr.addEventListener("click", function () {
      var gs = barsOf(tr);
      select(tr, gs, gs.filter(shown)[0] || gs[0]);
    });
  });

  // Table: click a header to sort (numbers by their raw value), type to filter rows and dim their bars.
  if (table) {
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th, col) {
      th.addEventListener("click", function () {
        var numeric = th.dataset.type === "num";
        var dir = th.dataset.dir === "desc" ? 1 : -1;
        Array.prototype.forEach.call(table.tHead.rows[0].cells, function (c) { delete c.dataset.dir; });
        th.dataset.dir = dir === 1 ? "asc" : "desc";
        var body = table.tBodies[0];
        var sorted = Array.prototype.slice.call(body.rows).sort(function (a, b) {
          var va = a.cells[col].dataset.v, vb = b.cells[col].dataset.v;
          if (numeric) { va = parseFloat(va); vb = parseFloat(vb); va = isNaN(va) ? -Infinity : va; vb = isNaN(vb) ? -Infinity : vb; }
          return va < vb ? -dir : va > vb ? dir : 0;
        });
        sorted.forEach(function (tr) { body.appendChild(tr); });
      });
    });
  }
  var filter = doc.getElementById("kv-filter");
  if (filter) {
    filter.addEventListener("input", function () {
      var q = filter.value.toLowerCase();
      rows.forEach(function (tr) {
        var hide = q !== "" && tr.textContent.toLowerCase().indexOf(q) < 0;
        tr.hidden = hide;
        barsOf(tr).forEach(function (g) { g.classList.toggle("dim", hide); });
      });
    });
  }

  // What the script saw, in words (and a marker tests use to know it ran).
  var drawn = drawnBars.reduce(function (n, g) { return n + (parseInt(g.dataset.count, 10) || 1); }, 0);
  var marked = drawnBars.filter(function (g) { return g.dataset.kinds !== ""; }).length;
  var summary = doc.getElementById("kv-js-summary");
  if (summary) {
    summary.textContent = drawn + " requests drawn" + (drawn !== drawnBars.length ? " in " + drawnBars.length + " bars" : "") +
      ", " + marked + " with a miss cause. Hover a bar for details; click it to find its row.";
  }
  doc.documentElement.dataset.ready = "1";
})();
