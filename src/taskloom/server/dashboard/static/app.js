// Live pages: on each Server-Sent "change" event, fetch this page's live region again
// and swap it in (not while a form inside it has the focus). Without JS, pages still read.
(function () {
  "use strict";
  var live = document.getElementById("live");
  if (!live || !window.EventSource) { return; }
  var pending = false, busy = false, reconnecting = false;
  var RETRY_MS = 2000, SEEN_HEADER = "X-Taskloom-Seen";
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
      .then(function (response) {
        if (!response.ok) { return null; }
        return response.text().then(function (html) {
          return { html: html, seen: response.headers.get(SEEN_HEADER) };
        });
      })
      .then(function (got) {
        if (got === null) { return; }
        swap(got.html);
        showing(got.seen);
        live.dataset.refreshed = String(Date.now());
      })
      .catch(function () { return null; })  // no server now: the next change refreshes
      .finally(function () {
        busy = false;
        if (reconnecting) { reconnecting = false; connect(); }
        if (pending) { refresh(); }
      });
  }
  // The stream compares what it reads with what this page shows: the events URL's
  // "seen", the digest of the region as rendered or last swapped in (a fragment's
  // response names its own). It sends "change" at once if they differ, so a change made
  // while the page loaded, or while the stream was down, is not missed. An EventSource
  // reconnects to the URL it was opened with, so the browser's own reconnect would name
  // what the page showed when it first loaded: this script reconnects itself instead,
  // after the stream's "retry" (2 s), with the URL of what the page shows then (once a
  // swap under way is in). An open stream is not reopened after a swap: it follows the
  // page already (each "change" it sent moved its baseline), and reopening would cost a
  // request and a read at every change.
  function showing(seen) {
    if (!seen) { return; }
    var url = new URL(live.dataset.events, window.location.href);
    url.searchParams.set("seen", seen);
    live.dataset.events = url.pathname + url.search;
  }
  function connect() {
    if (busy) { reconnecting = true; return; }
    var source = new EventSource(live.dataset.events, { withCredentials: true });
    source.addEventListener("change", refresh);
    source.addEventListener("end", function () { source.close(); refresh(); });
    // The server stops: connect again (a restarted one compares with what is shown).
    source.addEventListener("stopping", function () {
      source.close();
      setTimeout(connect, RETRY_MS);
    });
    source.addEventListener("error", function () {
      // Refused (429, 503, signed out): the browser gives up (CLOSED), and so does this.
      if (source.readyState !== EventSource.CONNECTING) { return; }
      source.close();
      setTimeout(connect, RETRY_MS);
    });
  }
  document.addEventListener("focusout", function () { if (pending) { setTimeout(refresh, 0); } });
  connect();
})();
