// The job page's live log, the only script on the site. The event stream (same origin,
// signed in by the session cookie) says when something happened; the new log lines come
// from the server, rendered and escaped exactly as on the page. When the job changes
// state the page reloads, so the server shows the new outcome.
"use strict";
(function () {
  const log = document.getElementById("frames");
  if (!log || !log.dataset.events) {
    return;
  }
  let after = log.dataset.after;
  let busy = false;
  let again = false;
  const source = new EventSource(log.dataset.events + "?after=" + encodeURIComponent(after));

  function reload() {
    source.close();
    window.location.reload();
  }

  function paused() {
    const last = log.lastElementChild;
    return last !== null && last.classList.contains("frame-done");
  }

  // Fetch the lines after the last one shown; one fetch at a time, another if frames came
  // meanwhile. A parked job writes no frame when it starts waiting, so once the run paused
  // this keeps asking (once a second) until the server says the state moved.
  async function refresh() {
    if (busy) {
      again = true;
      return;
    }
    busy = true;
    try {
      const reply = await fetch(log.dataset.log + "?after=" + encodeURIComponent(after));
      if (!reply.ok) {
        return;
      }
      const fresh = new DOMParser()
        .parseFromString(await reply.text(), "text/html")
        .getElementById("frames");
      after = fresh.dataset.after;
      log.append(...fresh.children);
      if (fresh.dataset.state !== log.dataset.state) {
        reload();
      } else if (log.dataset.state === "running" && paused()) {
        again = true;
        await new Promise((resolve) => setTimeout(resolve, 1000));
      }
    } finally {
      busy = false;
      if (again) {
        again = false;
        refresh();
      }
    }
  }

  source.addEventListener("frame", refresh);
  source.addEventListener("end", reload);
})();
