// The run form shows only the fields of the chosen load mode and, in the modes that send at a
// rate (the form's data-rate-modes), only those of the chosen arrivals (data-arrivals).
(function () {
  var radios = document.querySelectorAll("input[name=load_mode]");
  var arrivals = document.querySelector("select[name=arrivals]");
  var form = document.querySelector("form[data-rate-modes]");
  var rateModes = form ? form.dataset.rateModes.split(" ") : [];  // the modes that send at rates
  function show() {
    var checked = document.querySelector("input[name=load_mode]:checked");
    if (!checked) return;
    var kind = arrivals ? arrivals.value : "";
    document.querySelectorAll("[data-load-mode]").forEach(function (field) {
      var modes = field.dataset.loadMode.split(" ");
      var kinds = field.dataset.arrivals ? field.dataset.arrivals.split(" ") : null;
      field.hidden = modes.indexOf(checked.value) < 0 ||
        (rateModes.indexOf(checked.value) >= 0 && kinds !== null && kinds.indexOf(kind) < 0);
    });
  }
  radios.forEach(function (r) { r.addEventListener("change", show); });
  if (arrivals) arrivals.addEventListener("change", show);
  show();
})();
