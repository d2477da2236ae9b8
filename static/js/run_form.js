// The run form shows only the fields of the chosen load mode (concurrency sweep or request rate).
(function () {
  var radios = document.querySelectorAll("input[name=load_mode]");
  function show() {
    var checked = document.querySelector("input[name=load_mode]:checked");
    if (!checked) return;
    document.querySelectorAll("[data-load-mode]").forEach(function (field) {
      field.hidden = field.dataset.loadMode !== checked.value;
    });
  }
  radios.forEach(function (r) { r.addEventListener("change", show); });
  show();
})();
