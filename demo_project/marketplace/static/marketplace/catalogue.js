// The catalogue page: publishes the seller's catalogue (without leaving the page) and
// shows the sender's and each reader's progress, polling the JSON view named by
// [data-catalogue-progress] four times a second while the page is visible. No globals.
(function () {
  "use strict";
  const box = document.querySelector("[data-catalogue-progress]");
  if (!box) return;
  const form = box.querySelector("form");
  const csrf = form.querySelector("[name=csrfmiddlewaretoken]").value;
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

  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const response = await fetch(box.dataset.cataloguePublish, {
      method: "POST",
      headers: {"Accept": "application/json", "X-CSRFToken": csrf},
      body: new FormData(form),
      credentials: "same-origin",
    });
    if (!response.ok) {
      const data = await response.json().catch(() => ({}));
      window.alert(data.error || response.statusText);
    }
  });

  async function poll() {
    if (!document.hidden) {
      try {
        const response = await fetch(box.dataset.catalogueProgress, {credentials: "same-origin"});
        if (response.ok) show(await response.json());
      } catch (error) {
        // The server is restarting or Redis is away: the next poll tries again.
      }
    }
    setTimeout(poll, EVERY);
  }

  setTimeout(poll, EVERY);
})();
