// Live pages: on each Server-Sent "change" event, fetch this page's live region again
// and swap it in (not while a form inside it has the focus). Without JS, pages still read.
(function () {
  "use strict";
  var live = document.getElementById("live");
  if (!live || !window.EventSource) { return; }
  var pending = false, busy = false;
  function fragmentUrl() {
    var url = new URL(window.location.href);
    url.searchParams.set("fragment", "1");
    url.searchParams.delete("notice");
    return url.toString();
  }
  function typing() {
    var active = document.activeElement;
    return active && live.contains(active) && active.form;
  }
  function refresh() {
    if (busy || typing()) { pending = true; return; }
    busy = true; pending = false;
    fetch(fragmentUrl(), { credentials: "same-origin", headers: { "Accept": "text/html" } })
      .then(function (response) { return response.ok ? response.text() : null; })
      .then(function (html) {
        if (html !== null) { live.innerHTML = html; live.dataset.refreshed = String(Date.now()); }
      })
      .finally(function () { busy = false; if (pending) { refresh(); } });
  }
  document.addEventListener("focusout", function () { if (pending) { setTimeout(refresh, 0); } });
  var source = new EventSource(live.dataset.events, { withCredentials: true });
  source.addEventListener("change", refresh);
  source.addEventListener("end", function () { source.close(); refresh(); });
})();
