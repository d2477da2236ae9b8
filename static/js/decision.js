// The decision pages. On the form: the stated-GPU fields are greyed out while a registered host
// is picked (the host's inventory is used then). On a decision: "Copy link" and "Copy command"
// copy with the Clipboard API, or, where that is unavailable (plain http, older browsers), select
// the text and use execCommand("copy"), or at least leave it selected for Ctrl+C.
(function () {
  var host = document.getElementById("id_host");
  var stated = document.getElementById("fieldset-stated-gpu");
  if (host && stated) {
    var sync = function () { stated.classList.toggle("ignored", host.value !== ""); };
    host.addEventListener("change", sync);
    sync();
  }

  // Every copy button: its data-copy-target is an input (the permalink) or a <pre> (a command);
  // what it says goes to the status beside it.
  document.querySelectorAll("button[data-copy-target]").forEach(function (button) {
    var target = document.getElementById(button.dataset.copyTarget);
    var status = button.nextElementSibling && button.nextElementSibling.classList.contains("copy-status")
      ? button.nextElementSibling : document.getElementById("copy-status");
    if (!target || !status) return;
    var isInput = target.tagName === "INPUT";
    var text = function () { return isInput ? target.value : target.textContent; };
    var what = isInput ? "Link" : "Command";
    function say(words) { status.textContent = words; setTimeout(function () { status.textContent = ""; }, 2500); }
    function fallback() {
      var ok = false;
      if (isInput) { target.focus(); target.select(); } else {
        var range = document.createRange(); range.selectNodeContents(target);
        var sel = window.getSelection(); sel.removeAllRanges(); sel.addRange(range);
      }
      try { ok = document.execCommand("copy"); } catch (e) { ok = false; }
      say(ok ? what + " copied." : what + " selected: press Ctrl+C (⌘C) to copy it.");
    }
    button.addEventListener("click", function () {
      if (navigator.clipboard && window.isSecureContext) {
        navigator.clipboard.writeText(text()).then(function () { say(what + " copied."); }, fallback);
      } else {
        fallback();
      }
    });
  });
})();
