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
  // The new region keeps where each of its scrolled boxes was scrolled to (the graph a
  // phone scrolls sideways, a tapped failed node): a swap must not move what is read.
  function swap(html) {
    var kept = Array.prototype.map.call(live.querySelectorAll(".scroll"), function (box) {
      return [box.scrollLeft, box.scrollTop];
    });
    live.innerHTML = html;
    var boxes = live.querySelectorAll(".scroll");
    kept.forEach(function (at, index) {
      if (boxes[index]) { boxes[index].scrollLeft = at[0]; boxes[index].scrollTop = at[1]; }
    });
  }
  function refresh() {
    if (busy || typing()) { pending = true; return; }
    busy = true; pending = false;
    fetch(fragmentUrl(), { credentials: "same-origin", headers: { "Accept": "text/html" } })
      .then(function (response) { return response.ok ? response.text() : null; })
      .then(function (html) {
        if (html !== null) { swap(html); live.dataset.refreshed = String(Date.now()); }
      })
      .finally(function () { busy = false; if (pending) { refresh(); } });
  }
  document.addEventListener("focusout", function () { if (pending) { setTimeout(refresh, 0); } });
  var source = new EventSource(live.dataset.events, { withCredentials: true });
  source.addEventListener("change", refresh);
  source.addEventListener("end", function () { source.close(); refresh(); });
})();
