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
  // The new region keeps what the reader had set in the old one: where each scrolled box
  // was scrolled to (the graph a phone scrolls sideways, to a tapped failed node) and
  // which "as a table" sections were open. A swap must not move or fold what is read.
  function scrollKey(box) {
    var inner = box.firstElementChild;
    return inner ? inner.tagName + " " + (inner.getAttribute("class") || "") : "";
  }
  function detailsKey(section) {
    var summary = section.querySelector("summary");
    return summary ? summary.textContent : "";
  }
  function kept(selector, key, read) {
    var found = {};
    Array.prototype.forEach.call(live.querySelectorAll(selector), function (element) {
      found[key(element)] = read(element);
    });
    return found;
  }
  function restore(selector, key, found, write) {
    Array.prototype.forEach.call(live.querySelectorAll(selector), function (element) {
      var was = found[key(element)];
      if (was !== undefined) { write(element, was); }
    });
  }
  function swap(html) {
    var scrolled = kept(".scroll", scrollKey, function (box) { return [box.scrollLeft, box.scrollTop]; });
    var opened = kept("details", detailsKey, function (section) { return section.open; });
    live.innerHTML = html;
    restore(".scroll", scrollKey, scrolled, function (box, at) {
      box.scrollLeft = at[0]; box.scrollTop = at[1];
    });
    restore("details", detailsKey, opened, function (section, open) { section.open = open; });
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
