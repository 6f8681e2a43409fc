// wedgewatch view: the live page's few lines of its own.
// htmx's SSE extension opens a new connection from the element's sse-connect attribute (without
// Last-Event-ID), so the attribute is kept at the last batch's position (the batch's SSE id);
// the connection's state is shown; and a page whose server-sent events keep failing (a proxy in
// between that buffers them) falls back to polling, which the server answers with an ETag.
(function () {
  var errors = 0;
  function show(state) {
    var c = document.getElementById("conn");
    if (c) { c.textContent = state; c.dataset.state = state; }
  }
  document.addEventListener("htmx:sseOpen", function () { show("live"); });
  document.addEventListener("htmx:sseMessage", function (e) {
    errors = 0;
    show("live");
    var live = document.getElementById("live");
    var id = e.detail && e.detail.lastEventId;
    if (!live || !id || !live.getAttribute("sse-connect")) return;
    var url = new URL(live.getAttribute("sse-connect"), location.href);
    url.searchParams.set("c", id);
    live.setAttribute("sse-connect", url.pathname + url.search);
  });
  document.addEventListener("htmx:sseError", function () {
    errors += 1;
    show("reconnecting");
    if (errors >= 5) {
      var u = new URL(location.href);
      u.searchParams.set("live", "poll");
      location.replace(u.toString());
    }
  });
})();
