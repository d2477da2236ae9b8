// Draw every .chart from its JSON (figure + data table), with Plotly served from our static files.
(function () {
  function table(holder, t) {
    var html = "<table class='data compact'><thead><tr>" + t.columns.map(function (c) { return "<th>" + esc(c) + "</th>"; }).join("") +
      "</tr></thead><tbody>" + t.rows.slice(0, 500).map(function (r) {
        return "<tr>" + r.map(function (v) { return "<td>" + esc(v === null ? "—" : v) + "</td>"; }).join("") + "</tr>";
      }).join("") + "</tbody></table>" + (t.rows.length > 500 ? "<p>First 500 of " + t.rows.length + " rows; the CSV has all.</p>" : "");
    holder.innerHTML = html;
  }
  function esc(v) { return String(v).replace(/[&<>"]/g, function (c) { return {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;"}[c]; }); }
  function draw(el, url) {
    el.classList.add("loading");
    return fetch(url).then(function (r) { if (!r.ok) throw new Error("HTTP " + r.status); return r.json(); })
      .then(function (fig) {
        el.classList.remove("loading");
        return Plotly.react(el, fig.data, fig.layout, {responsive: true, displaylogo: false}).then(function () {
          var box = el.closest(".chart-box");
          if (box) table(box.querySelector(".table-holder"), fig.table);
          // A figure whose layout.meta.opens names a customdata index: a click opens that address.
          var opens = fig.layout.meta && fig.layout.meta.opens;
          if (opens !== undefined && !el.dataset.opens) {
            el.dataset.opens = "true";
            el.on("plotly_click", function (e) {
              var d = e.points[0] && e.points[0].customdata;
              var url = d && d[opens];
              if (typeof url === "string" && url.charAt(0) === "/") window.location.href = url;
            });
          }
          el.dataset.drawn = "true";
        });
      })
      .catch(function (e) { el.classList.remove("loading"); el.textContent = "Could not load this chart: " + e.message; });
  }
  document.querySelectorAll(".chart").forEach(function (el) {
    var select = el.closest(".chart-box") && el.closest(".chart-box").querySelector(".timeline-level");
    function url() { return el.dataset.url + (select ? "?level=" + select.value : ""); }
    draw(el, url());
    if (select) {
      var csv = el.closest(".chart-box").querySelector("a.csv");
      var base = csv.getAttribute("href");
      select.addEventListener("change", function () { csv.setAttribute("href", base + "?level=" + select.value); draw(el, url()); });
    }
  });
})();
