// The inventory page's bulk listing: starts it without leaving the page, and shows its
// task's progress (done of total, the item in hand), polling the JSON view named by
// [data-bulk-progress] twice a second while the page is visible (live.js); the page
// reloads when it ends, to show the items it listed.
(function () {
  "use strict";
  const box = document.querySelector("[data-bulk-progress]");
  if (!box) return;
  const form = box.querySelector("form");
  const panel = box.querySelector(".bulk-progress");
  const bar = panel.querySelector("progress");
  const EVERY = 500; // ms between polls
  let running = false;

  function show(data) {
    panel.hidden = false;
    bar.max = data.total || 1;
    bar.value = data.done;
    for (const field of ["done", "total", "note", "status", "started_by"]) {
      const shown = box.querySelector('[data-bulk="' + field + '"]');
      if (shown) shown.textContent = data[field] === null ? "?" : String(data[field]);
    }
    form.querySelector("button").disabled = !data.finished;
    if (running && data.finished) window.location.reload(); // the items moved: show them
    running = !data.finished;
  }

  demoLive.submitInPlace(form, box.dataset.bulkList);
  demoLive.poll(box.dataset.bulkProgress, EVERY, show);
})();
