// The checkouts page: starts a load of checkouts (without leaving the page) and shows the
// semaphore's slots held now, polling the JSON view named by [data-checkout-slots] four
// times a second while the page is visible (live.js).
(function () {
  "use strict";
  const box = document.querySelector("[data-checkout-slots]");
  if (!box) return;
  const slots = Array.from(box.querySelectorAll("ol.slots li"));
  const form = box.querySelector("form");
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

  demoLive.submitInPlace(form, box.dataset.checkoutLoad);
  demoLive.poll(box.dataset.checkoutSlots, EVERY, show);
})();
