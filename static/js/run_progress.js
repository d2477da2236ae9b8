// Live progress on the run page: poll progress.json, move the bar, reload when a level lands
// or the run finishes so that its results appear.
(function () {
  var box = document.getElementById("progress");
  if (!box || box.dataset.finished === "true") return;
  var levels = parseInt(box.dataset.levels, 10);
  function tick() {
    fetch(box.dataset.url, {headers: {"Accept": "application/json"}})
      .then(function (r) { return r.json(); })
      .then(function (p) {
        // A finished run (or a new level) is shown by the page the server renders, never by this
        // script: a terminal status on screen then always comes with its results, and no reload
        // is still pending once a reader (or a browser test) sees it.
        if (p.finished || p.levels !== levels) { window.location.reload(); return; }
        box.querySelector(".fill").style.width = p.percent + "%";
        document.getElementById("progress-done").textContent = p.done;
        document.getElementById("progress-total").textContent = p.total;
        document.getElementById("progress-percent").textContent = p.percent;
        document.getElementById("progress-note").textContent = p.note;
        document.getElementById("progress-eta").textContent = p.eta;
        var status = document.getElementById("run-status");
        status.textContent = p.status;
        status.className = "status " + p.status;
        var queued = document.getElementById("queued-banner");
        if (queued && p.status !== "queued") queued.remove();
        setTimeout(tick, 1000);
      })
      .catch(function () { setTimeout(tick, 3000); });
  }
  setTimeout(tick, 1000);
})();
