// The task queues' admin pages: while a page is visible, fetch it again every few seconds
// and swap in its live part. Without JavaScript the pages work the same; reload them.
(function () {
  "use strict";
  const live = document.getElementById("rc-live");
  if (!live || !live.dataset.refresh) {
    return;
  }
  const showJsOnly = () => {
    document.querySelectorAll(".rc-js-only").forEach((element) => {
      element.hidden = false;
    });
  };
  const refresh = async () => {
    if (document.hidden) {
      return;
    }
    try {
      const response = await fetch(window.location.href, { credentials: "same-origin" });
      if (!response.ok) {
        return; // Redis down or signed out: keep what is shown, try again later
      }
      const page = new DOMParser().parseFromString(await response.text(), "text/html");
      const fresh = page.getElementById("rc-live");
      if (fresh) {
        live.innerHTML = fresh.innerHTML;
        showJsOnly();
      }
    } catch (error) {
      // Offline for a moment: the next tick tries again.
    }
  };
  showJsOnly();
  window.setInterval(refresh, Number(live.dataset.refresh) * 1000);
})();
