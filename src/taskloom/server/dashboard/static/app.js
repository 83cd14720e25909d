// Live pages: on each Server-Sent "change" event, fetch this page's live region again
// and swap it in (not while a form inside it has the focus). Without JS, pages still read.
(function () {
  "use strict";
  var live = document.getElementById("live");
  if (!live || !window.fetch || !window.AbortController || !window.ReadableStream) { return; }
  var SEEN_HEADER = "X-Taskloom-Seen";
  var FIRST_RETRY_MS = 1000, LAST_RETRY_MS = 30000;  // doubled at each failure, jittered
  var ANSWER_MS = 10000;  // a fragment, or a stream's first answer, takes at most this
  // A redraw without a sign-in is sent to the sign-in page: a redirect, not followed (the
  // sign-in page would be drawn in the live region). The stream's request follows it and
  // reads the sign-in page's refusal.
  var SIGNED_OUT = "signed out";
  var SILENT_MS = 45000;  // an open stream says at least ": keepalive" every 15 s
  // A stream has proved itself once it reads something (an event, a keepalive) at least
  // this long after it opened: only then does the doubling start over (ADR 0069). One
  // that answers and closes at once is a failure like any other.
  var PROVEN_MS = 10000;
  var pending = false, busy = false, reconnecting = false;
  var stream = null, halted = false, retryMs = FIRST_RETRY_MS, failures = 0;
  // The line that says when the page is not live (and why): outside the swapped region.
  var status = document.createElement("p");
  status.id = "live-status";
  status.className = "live-status";
  status.setAttribute("role", "status");
  status.hidden = true;
  status.dataset.state = "connecting";
  live.parentNode.insertBefore(status, live);
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
  // An AbortController that aborts itself after *ms* (``renew`` sets a new one).
  function bounded(ms) {
    var control = new AbortController(), timer = 0;
    control.renew = function (next) {
      clearTimeout(timer);
      timer = setTimeout(function () { control.abort(); }, next);
    };
    control.done = function () { clearTimeout(timer); };
    control.renew(ms);
    return control;
  }
  // What a refusal means. 429, 408 and 5xx pass (too many requests or live pages, a
  // server stopping, a database away): try again. Any other (signed out, a token
  // revoked, no such task) stands until the page is reloaded.
  function verdict(response) {
    return response.text().then(function (text) {
      var code = response.status;
      var after = parseInt(response.headers.get("Retry-After") || "", 10);
      return {
        passes: code === 429 || code === 408 || code >= 500,
        why: reason(response, text),
        afterMs: isNaN(after) ? 0 : after * 1000
      };
    });
  }
  // Why the server refused: its page's alert, its JSON error's message, or the status.
  function reason(response, text) {
    var why = "";
    try {
      if ((response.headers.get("Content-Type") || "").indexOf("json") >= 0) {
        why = JSON.parse(text).error.message;
      } else {
        var found = new DOMParser().parseFromString(text, "text/html");
        var alert = found.querySelector("[role=alert]") || found.querySelector("h1");
        why = alert ? alert.textContent : "";
      }
    } catch (ignored) { why = ""; }
    why = String(why || "").trim().replace(/[.\s]+$/, "");
    return why || "HTTP " + response.status;
  }
  function refresh() {
    if (halted) { return; }
    if (busy || typing()) { pending = true; return; }
    busy = true; pending = false;
    var control = bounded(ANSWER_MS);  // a hung fetch ends too, and the page goes on
    var failed = { why: "the page could not be redrawn", afterMs: 0 };
    fetch(fragmentUrl(), {
      credentials: "same-origin", headers: { "Accept": "text/html" }, signal: control.signal,
      redirect: "manual"
    })
      .then(function (response) {
        if (response.type === "opaqueredirect") { halt(SIGNED_OUT); failed = null; return; }
        if (!response.ok) {
          return verdict(response).then(function (found) {
            if (!found.passes) { halt(found.why); }
            failed = found;
          });
        }
        return response.text().then(function (html) {
          swap(html);
          showing(response.headers.get(SEEN_HEADER));
          failed = null;
          live.dataset.refreshed = String(Date.now());
        });
      })
      .catch(function () { return null; })
      .finally(function () {
        control.done();
        busy = false;
        if (reconnecting) { reconnecting = false; connect(); }
        // Not redrawn: the open stream takes the page to show what it read. Drop it:
        // the next one compares with what the page shows.
        else if (failed) { drop(failed.why, failed.afterMs); }
        if (pending) { refresh(); }
      });
  }
  // The stream compares what it reads with what this page shows: the events URL's
  // "seen", the digest of the region as rendered or last swapped in (a fragment's
  // response names its own). It sends "change" at once if they differ, so a change made
  // while the page loaded, or while the stream was down, is not missed. Each connection
  // names what the page shows then (once a swap under way is in). An open stream is not
  // reopened after a swap: it follows the page already (each "change" it sent moved its
  // baseline), and reopening would cost a request and a read at every change.
  function showing(seen) {
    if (!seen) { return; }
    var url = new URL(live.dataset.events, window.location.href);
    url.searchParams.set("seen", seen);
    live.dataset.events = url.pathname + url.search;
  }
  // What the page says of its stream: nothing while it is live (or ended with its
  // task); "paused ... reconnecting" while it tries again; "stopped" once refused for good.
  function say(state, text, reload) {
    status.dataset.state = state;
    status.dataset.attempts = String(failures);
    status.textContent = text;
    if (reload) {
      var link = document.createElement("a");
      link.href = window.location.href;
      link.textContent = "Reload";
      status.appendChild(document.createTextNode(" "));
      status.appendChild(link);
      status.appendChild(document.createTextNode(" to try again."));
    }
    status.hidden = !text;
  }
  // The stream is lost, or refused for a while: connect again after a wait that doubles
  // from 1 s up to 30 s (half of it random, so pages do not all come back at once), or
  // after the server's Retry-After if that is longer. A stream that proved itself (see
  // PROVEN_MS) starts it over; one that only opened does not.
  function again(why, afterMs) {
    if (halted) { return; }
    failures += 1;
    var waitMs = Math.round(Math.max(retryMs * (0.5 + Math.random() / 2), afterMs || 0));
    retryMs = Math.min(retryMs * 2, LAST_RETRY_MS);
    status.dataset.retryMs = String(waitMs);
    say("retrying", "Live updates paused: " + why + "; reconnecting\u2026");
    setTimeout(connect, waitMs);
  }
  function proven() {
    retryMs = FIRST_RETRY_MS; failures = 0;
    status.dataset.attempts = "0";
  }
  function drop(why, afterMs) {
    if (stream) { stream.why = { why: why, afterMs: afterMs }; stream.abort(); }
  }
  function halt(why) {
    halted = true;
    say("stopped", "Live updates stopped: " + why + ".", true);
    if (stream) { stream.abort(); }
  }
  // The events of an open stream, read until it ends: "end" (the task can change no
  // more, or the grant ended), "stopping" (the server stops), "" (the connection closed).
  // Each read starts the next from its callback, not by returning it: a chain of
  // promises returned one from another would be kept until the stream ends. The first
  // read PROVEN_MS or more after the answer came (a monotonic clock) proves the stream.
  function follow(response, control) {
    var reader = response.body.getReader(), decoder = new TextDecoder();
    var buffer = "", name = "", opened = performance.now(), unproven = true;
    return new Promise(function (resolve, reject) {
      function read(chunk) {
        if (chunk.done) { resolve(""); return; }
        control.renew(SILENT_MS);
        if (unproven && performance.now() - opened >= PROVEN_MS) { unproven = false; proven(); }
        buffer += decoder.decode(chunk.value, { stream: true });
        var lines = buffer.split(/\r\n|\r|\n/);
        buffer = lines.pop();
        for (var index = 0; index < lines.length; index += 1) {
          var line = lines[index];
          if (line === "") {
            if (name === "change") { refresh(); }
            if (name === "end" || name === "stopping") { resolve(name); return; }
            name = "";
          } else if (line.indexOf("event:") === 0) {
            name = line.slice(6).trim();
          }
        }
        reader.read().then(read, reject);
      }
      reader.read().then(read, reject);
    });
  }
  function connect() {
    if (halted) { return; }
    if (busy) { reconnecting = true; return; }
    var control = bounded(ANSWER_MS);
    stream = control;
    function closed() {
      if (stream === control) { stream = null; }
      control.done();
    }
    fetch(live.dataset.events, {
      credentials: "same-origin", cache: "no-store",
      headers: { "Accept": "text/event-stream" }, signal: control.signal
    })
      .then(function (response) {
        if (!response.ok) {
          return verdict(response).then(function (found) {
            closed();
            if (found.passes) { again(found.why, found.afterMs); } else { halt(found.why); }
          });
        }
        say("live", "");  // live, but the failures in a row stand until it proves itself
        control.renew(SILENT_MS);
        return follow(response, control).then(function (last) {
          closed();
          control.abort();  // the connection goes with it
          if (last === "end") { say("ended", ""); refresh(); return; }
          again(last === "stopping" ? "the server stopped" : "the connection closed");
        });
      })
      .catch(function () {
        closed();
        var lost = control.why || { why: "no answer from the server", afterMs: 0 };
        again(lost.why, lost.afterMs);
      });
  }
  document.addEventListener("focusout", function () { if (pending) { setTimeout(refresh, 0); } });
  connect();
})();
