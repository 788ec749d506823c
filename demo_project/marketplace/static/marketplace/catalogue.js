// The catalogue page: publishes the seller's catalogue (without leaving the page) and
// shows the sender's and each reader's progress, polling the JSON view named by
// [data-catalogue-progress] four times a second while the page is visible (live.js).
(function () {
  "use strict";
  const box = document.querySelector("[data-catalogue-progress]");
  if (!box) return;
  const form = box.querySelector("form");
  const download = box.querySelector("[data-download]");
  const EVERY = 250; // ms between polls

  function row(who, data, state) {
    const tr = box.querySelector('tr[data-who="' + who + '"]');
    if (!tr) return;
    const bar = tr.querySelector("progress");
    bar.max = Math.max(1, box.dataset.total || 1);
    bar.value = data.bytes;
    tr.querySelector('[data-field="bytes"]').textContent = String(data.bytes);
    tr.querySelector('[data-field="blocks"]').textContent = String(data.blocks);
    tr.querySelector('[data-field="state"]').textContent = state;
  }

  function show(data) {
    box.dataset.total = String(data.bytes_total);
    for (const field of ["file", "bytes_total", "blocks_total", "block", "error"]) {
      const shown = box.querySelector('[data-run="' + field + '"]');
      if (shown) shown.textContent = data[field] === null ? (field === "file" ? "none yet" : "") : String(data[field]);
    }
    const sender = data.sender;
    row("sender", sender, sender.done ? "done" : sender.waiting ? "waiting for readers" : data.running ? "sending" : "idle");
    for (const reader of data.readers) {
      row(reader.reader, reader, reader.done ? "done" : data.running ? "reading" : "idle");
    }
    download.hidden = !data.download;
    form.querySelector("button").disabled = data.running;
  }

  demoLive.submitInPlace(form, box.dataset.cataloguePublish);
  demoLive.poll(box.dataset.catalogueProgress, EVERY, show);
})();
