/* parkgate inbox: live updates over SSE (progressive enhancement; the page
   works without this script). When the set of waiting calls changes, fetch
   the list again and swap it in, keeping any item the approver is typing in. */
(function () {
  "use strict";
  var root = document.getElementById("inbox");
  var live = document.getElementById("live");
  if (!root || !window.EventSource || !window.fetch) { return; }
  var shown = root.getAttribute("data-sig");

  function busy(node) {
    return node.contains(document.activeElement) || node.getAttribute("data-dirty") === "1" ||
      node.querySelector("details[open]") !== null;
  }

  root.addEventListener("input", function (ev) {
    var item = ev.target.closest && ev.target.closest(".item");
    if (item) { item.setAttribute("data-dirty", "1"); }
  });

  function swap(html) {
    var holder = document.createElement("div");
    holder.innerHTML = html;
    var fresh = holder.querySelector("#items");
    var current = document.getElementById("items");
    if (!fresh || !current) { return; }
    var old = {};
    current.querySelectorAll(".item").forEach(function (n) { old[n.getAttribute("data-rid")] = n; });
    fresh.querySelectorAll(".item").forEach(function (n) {
      var mine = old[n.getAttribute("data-rid")];
      if (mine && busy(mine)) { n.replaceWith(mine); }
      delete old[n.getAttribute("data-rid")];
    });
    Object.keys(old).forEach(function (rid) {
      var n = old[rid];
      if (!busy(n)) { return; }
      n.classList.add("gone");
      n.querySelectorAll("button").forEach(function (b) { b.disabled = true; });
      var note = document.createElement("p");
      note.className = "error";
      note.setAttribute("data-testid", "gone");
      note.textContent = "No longer waiting: decided elsewhere, cancelled or expired.";
      n.insertBefore(note, n.firstChild);
      fresh.appendChild(n);
    });
    current.replaceWith(fresh);
    shown = fresh.getAttribute("data-sig");
    var count = parseInt(fresh.getAttribute("data-count"), 10) || 0;
    document.title = (count ? "(" + count + ") " : "") + "Inbox · parkgate";
  }

  function refresh() {
    fetch(root.getAttribute("data-list"), { credentials: "same-origin", cache: "no-store" })
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (html) { if (html) { swap(html); } })
      .catch(function () { /* the next event retries */ });
  }

  var source = new EventSource(root.getAttribute("data-stream"));
  source.addEventListener("inbox", function (ev) {
    var data = JSON.parse(ev.data);
    live.textContent = "Live: updates as calls park and are decided.";
    live.setAttribute("data-state", "live");
    if (data.sig !== shown) { refresh(); }
  });
  source.onerror = function () {
    live.textContent = "Reconnecting…";
    live.setAttribute("data-state", "down");
  };
})();
