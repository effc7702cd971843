// Relayer console: reload the page every data-refresh seconds, unless the
// reader is busy (typing, a box ticked, text selected, or paused), and ask
// before destructive actions.
(function () {
  "use strict";
  var seconds = parseInt(document.body.getAttribute("data-refresh"), 10) || 0;
  // The outcome of an action comes in the address (did, n) once: drop it, so
  // that a reload or a refresh does not announce it again.
  if (window.history && window.history.replaceState && window.URLSearchParams) {
    var params = new URLSearchParams(window.location.search);
    if (params.has("did") || params.has("n")) {
      params.delete("did");
      params.delete("n");
      var rest = params.toString();
      window.history.replaceState(null, "", window.location.pathname + (rest ? "?" + rest : "") + window.location.hash);
    }
  }
  var paused = false;
  var pause = document.getElementById("pause");
  if (pause) {
    pause.addEventListener("click", function () {
      paused = !paused;
      pause.textContent = paused ? "resume" : "pause";
    });
  }
  function busy() {
    var a = document.activeElement;
    if (a && (a.tagName === "INPUT" || a.tagName === "TEXTAREA" || a.tagName === "SELECT")) return true;
    if (document.querySelector("input[type=checkbox]:checked")) return true;
    var s = window.getSelection && window.getSelection();
    return !!(s && String(s).length > 0);
  }
  if (seconds > 0) {
    setInterval(function () {
      if (!paused && !busy() && document.visibilityState === "visible") window.location.reload();
    }, seconds * 1000);
  }
  var all = document.getElementById("select-all");
  if (all) {
    all.addEventListener("change", function () {
      document.querySelectorAll("input[name=id]").forEach(function (b) { b.checked = all.checked; });
    });
  }
  document.querySelectorAll("form[data-confirm], button[data-confirm]").forEach(function (el) {
    var form = el.tagName === "FORM" ? el : el.form;
    var question = el.getAttribute("data-confirm");
    if (el.tagName === "FORM") {
      form.addEventListener("submit", function (e) { if (!window.confirm(question)) e.preventDefault(); });
    } else {
      el.addEventListener("click", function (e) { if (!window.confirm(question)) e.preventDefault(); });
    }
  });
})();
