// What the demo's live pages share (notices, checkouts, catalogue): polling a JSON view
// while the page is visible, and posting a form without leaving the page. One global,
// demoLive, which their scripts use.
window.demoLive = (function () {
  "use strict";

  // Call show(data) with the JSON of url every `every` ms while the page is visible.
  function poll(url, every, show) {
    async function once() {
      if (!document.hidden) {
        try {
          const response = await fetch(url, {credentials: "same-origin"});
          if (response.ok) show(await response.json());
        } catch (error) {
          // The server is restarting or Redis is away: the next poll tries again.
        }
      }
      setTimeout(once, every);
    }
    setTimeout(once, every);
  }

  // Post `form` to url on submit, staying on the page; a refusal's error in an alert.
  function submitInPlace(form, url) {
    const csrf = form.querySelector("[name=csrfmiddlewaretoken]").value;
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      const response = await fetch(url, {
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
  }

  return {poll, submitInPlace};
})();
