// The decision pages. On the form: the stated-GPU fields are greyed out while a registered host
// is picked (the host's inventory is used then). On a decision: "Copy link" copies the permalink
// with the Clipboard API, or, where that is unavailable (plain http, older browsers), selects
// the link and uses execCommand("copy"), or at least leaves it selected for Ctrl+C.
(function () {
  var host = document.getElementById("id_host");
  var stated = document.getElementById("fieldset-stated-gpu");
  if (host && stated) {
    var sync = function () { stated.classList.toggle("ignored", host.value !== ""); };
    host.addEventListener("change", sync);
    sync();
  }

  var button = document.getElementById("copy-link");
  if (!button) return;
  var input = document.getElementById(button.dataset.copyTarget);
  var status = document.getElementById("copy-status");
  function say(text) { status.textContent = text; setTimeout(function () { status.textContent = ""; }, 2500); }
  function fallback() {
    input.focus();
    input.select();
    var ok = false;
    try { ok = document.execCommand("copy"); } catch (e) { ok = false; }
    say(ok ? "Link copied." : "Link selected: press Ctrl+C (⌘C) to copy it.");
  }
  button.addEventListener("click", function () {
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(input.value).then(function () { say("Link copied."); }, fallback);
    } else {
      fallback();
    }
  });
})();
