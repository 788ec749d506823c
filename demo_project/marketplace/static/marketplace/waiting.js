// The notices page: follows the sold emails waiting in the email queue (queued, or set
// aside on the mail relay's rate until their turn), polling the JSON view named by
// [data-waiting-emails] twice a second while the page is visible (live.js).
(function () {
  "use strict";
  const box = document.querySelector("[data-waiting-emails]");
  if (!box) return;
  const list = box.querySelector("ul.waiting");
  const EVERY = 500; // ms between polls

  function describe(email) {
    let text = (email.item || email.task_id) + ": ";
    if (email.waits_for === "rate") text += "waits on the rate " + email.waits_on;
    else if (email.waits_for === "concurrency") text += "waits for a permit of " + email.waits_on;
    else text += "waits for " + (email.waits_for || "its time");
    if (email.due_in !== null) text += ", due in " + email.due_in + " s";
    return text;
  }

  function show(data) {
    for (const state of ["ready", "delayed", "on_limits"]) {
      const count = box.querySelector('[data-count="' + state + '"]');
      if (count) count.textContent = String(data[state]);
    }
    list.replaceChildren(...data.emails.map((email) => {
      const item = document.createElement("li");
      item.textContent = describe(email);
      return item;
    }));
  }

  demoLive.poll(box.dataset.waitingEmails, EVERY, show);
})();
