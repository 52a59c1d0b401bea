// The running turn of the session shown, as the broker streams it (server-sent events).
"use strict";
(function () {
  const live = document.getElementById("live");
  if (!live || typeof EventSource === "undefined") return;
  const text = document.getElementById("live-text");
  const state = document.getElementById("live-state");
  const source = new EventSource("/stream?s=" + encodeURIComponent(live.dataset.session));
  let turn = null;
  source.addEventListener("delta", function (event) {
    const data = JSON.parse(event.data);
    if (data.turn !== turn) {
      turn = data.turn;
      text.textContent = "";
      state.textContent = "Turn " + turn + " is streaming.";
    }
    text.textContent += data.text;
  });
  source.addEventListener("turn", function (event) {
    const data = JSON.parse(event.data);
    state.textContent = "Turn " + data.turn + " ended (" + data.status + "). ";
    const again = document.createElement("a");
    again.href = window.location.pathname + window.location.search;
    again.textContent = "Reload to see it in the tree.";
    state.appendChild(again);
  });
  window.addEventListener("pagehide", function () { source.close(); });
})();
