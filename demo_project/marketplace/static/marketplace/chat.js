// The chat page: shows one chat, sends to it, and long-polls the user's pending messages.
// Configured by the data-* attributes of [data-chat-app]; no globals.
(function () {
  "use strict";
  const app = document.querySelector("[data-chat-app]");
  if (!app) return;
  const me = app.dataset.me;
  const current = app.dataset.current;
  const storeKey = "chat-messages:" + me;
  const csrf = (document.cookie.match(/(?:^|; )csrftoken=([^;]*)/) || [])[1] || "";

  // Messages this tab has received, per chat (fetching pending marks them read on the server).
  const store = JSON.parse(sessionStorage.getItem(storeKey) || "{}");
  const save = () => sessionStorage.setItem(storeKey, JSON.stringify(store));

  function url(template, id) {
    return template.replace("/0/", "/" + encodeURIComponent(id) + "/");
  }

  async function call(method, address, body) {
    const response = await fetch(address, {
      method: method,
      headers: {"Content-Type": "application/json", "X-CSRFToken": decodeURIComponent(csrf)},
      body: body === undefined ? undefined : JSON.stringify(body),
      credentials: "same-origin",
    });
    const data = await response.json().catch(() => ({}));
    if (!response.ok) throw new Error(data.error || response.statusText);
    return data;
  }

  function remember(chatId, messages) {
    const known = store[chatId] || [];
    const seen = new Set(known.map((m) => m.id));
    for (const message of messages) if (!seen.has(message.id)) known.push(message);
    known.sort((a, b) => a.id - b.id);
    store[chatId] = known.slice(-200);
    save();
  }

  const log = app.querySelector("[data-log]");
  function render() {
    if (!log) return;
    log.replaceChildren();
    for (const message of store[current] || []) {
      const item = document.createElement("li");
      item.className = message.sender === me ? "mine" : "";
      const who = document.createElement("strong");
      who.textContent = message.sender;
      const when = document.createElement("time");
      when.textContent = new Date(message.ts * 1000).toLocaleTimeString();
      const body = document.createElement("span");
      body.textContent = message.message;
      item.append(who, " ", when, " ", body);
      log.append(item);
    }
    log.scrollTop = log.scrollHeight;
  }

  function bump(chatId, count) {
    const badge = app.querySelector('[data-unread="' + chatId + '"]');
    if (!badge) return;
    badge.textContent = String(Number(badge.textContent || 0) + count);
    badge.hidden = false;
  }

  async function poll() {
    for (;;) {
      try {
        const data = await call("POST", app.dataset.pendingUrl, {wait: 25});
        for (const chat of data.chats) {
          remember(chat.id, chat.messages);
          if (chat.id !== current) bump(chat.id, chat.messages.length);
        }
        render();
      } catch (error) {
        await new Promise((resolve) => setTimeout(resolve, 3000));
      }
    }
  }

  async function start() {
    if (current) {
      const address = url(app.dataset.messagesUrl, current) + "?limit=100";
      const data = await call("GET", address).catch(() => ({messages: []}));
      remember(current, data.messages);
      const badge = app.querySelector('[data-unread="' + current + '"]');
      if (badge) badge.hidden = true;
      render();
    }
    poll();
  }

  const send = app.querySelector("[data-send]");
  if (send) {
    send.addEventListener("submit", async (event) => {
      event.preventDefault();
      const input = send.elements.message;
      const error = app.querySelector("[data-send-error]");
      try {
        await call("POST", url(app.dataset.messagesUrl, current), {message: input.value});
        input.value = "";
        error.hidden = true;
      } catch (problem) {
        error.textContent = problem.message;
        error.hidden = false;
      }
    });
  }

  const create = app.querySelector("[data-new-chat]");
  create.addEventListener("submit", async (event) => {
    event.preventDefault();
    const recipients = create.elements.recipients.value.split(",").map((s) => s.trim()).filter(Boolean);
    const error = app.querySelector("[data-new-chat-error]");
    try {
      const data = await call("POST", app.dataset.createUrl, {recipients: recipients, message: create.elements.message.value});
      window.location.assign(url(app.dataset.pageUrl, data.id));
    } catch (problem) {
      error.textContent = problem.message;
      error.hidden = false;
    }
  });

  start();
})();
