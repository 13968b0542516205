// Loaded first on every page: records script errors on <html data-js-errors="...">, so a
// headless browser's --dump-dom (the console's tests) can read them back; shown to a person too.
(function () {
  "use strict";
  var errors = [];
  function note(text) {
    errors.push(String(text));
    document.documentElement.setAttribute("data-js-errors", errors.join(" | "));
    var box = document.getElementById("js-errors");
    if (box) { box.textContent = errors.join("\n"); box.hidden = false; }
  }
  window.addEventListener("error", function (e) {
    note((e.message || "error") + " at " + (e.filename || "?") + ":" + (e.lineno || "?"));
  });
  window.addEventListener("unhandledrejection", function (e) {
    note("unhandled rejection: " + (e.reason && e.reason.message ? e.reason.message : e.reason));
  });
  document.documentElement.setAttribute("data-js-errors", "");
  window.raftkaConsoleError = note;
})();
