// Copy buttons ("Copy link", "Copy sha256"): data-copy names the input holding the text.
(function () {
  document.querySelectorAll("[data-copy]").forEach(function (button) {
    var label = button.textContent;
    button.addEventListener("click", function () {
      var input = document.getElementById(button.dataset.copy);
      function done() { button.textContent = "Copied"; setTimeout(function () { button.textContent = label; }, 1500); }
      if (navigator.clipboard && window.isSecureContext) {
        navigator.clipboard.writeText(input.value).then(done, function () { input.select(); document.execCommand("copy"); done(); });
      } else { input.select(); document.execCommand("copy"); done(); }
    });
  });
})();
