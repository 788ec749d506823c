// The checkouts page: starts a load of checkouts (without leaving the page) and shows the
// semaphore's slots held now, polling the JSON view named by [data-checkout-slots] four
// times a second while the page is visible. No globals.
(function () {
  "use strict";
  const box = document.querySelector("[data-checkout-slots]");
  if (!box) return;
  const slots = Array.from(box.querySelectorAll("ol.slots li"));
  const form = box.querySelector("form");
  const csrf = form.querySelector("[name=csrfmiddlewaretoken]").value;
  const EVERY = 250; // ms between polls

  function show(data) {
    slots.forEach((slot, n) => {
      const held = n < data.held;
      slot.classList.toggle("held", held);
      slot.textContent = held ? "held" : "free";
    });
    for (const field of ["held", "waiting", "done", "started", "gave_up", "peak"]) {
      const shown = box.querySelector('[data-slot="' + field + '"]');
      if (shown) shown.textContent = String(data[field]);
    }
    form.querySelector("button").disabled = data.running;
  }

  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const response = await fetch(box.dataset.checkoutLoad, {
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
        const response = await fetch(box.dataset.checkoutSlots, {credentials: "same-origin"});
        if (response.ok) show(await response.json());
      } catch (error) {
        // The server is restarting or Redis is away: the next poll tries again.
      }
    }
    setTimeout(poll, EVERY);
  }

  setTimeout(poll, EVERY);
})();
