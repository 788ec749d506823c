// The chat page: shows the open chat's history and follows it live, sends to it, and keeps
// the unread counts of every chat current. Configured by the data-* attributes of
// [data-chat-app]; no globals.
//
// Two long polls, neither of which marks anything read, so that every open tab of every
// member sees every message: one follows the open chat (messages after the last one
// shown), the other the unread counts (answered when they differ from those shown).
// Seeing a message in the open chat marks the chat read.
(function () {
  "use strict";
  const app = document.querySelector("[data-chat-app]");
  if (!app) return;
  const me = app.dataset.me;
  const current = app.dataset.current;
  const csrf = (document.cookie.match(/(?:^|; )csrftoken=([^;]*)/) || [])[1] || "";
  const WAIT = 25; // seconds a long poll waits; under common proxy timeouts

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

  const pause = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

  // The open chat's messages, by id: history and live ones may overlap, each shows once.
  const shown = new Map();
  let lastId = 0;
  const log = app.querySelector("[data-log]");

  function show(messages) {
    for (const message of messages) {
      shown.set(message.id, message);
      lastId = Math.max(lastId, message.id);
    }
    if (!log) return;
    log.replaceChildren();
    for (const message of [...shown.values()].sort((a, b) => a.id - b.id)) {
      const item = document.createElement("li");
      item.className = message.sender === me ? "mine" : "";
      item.dataset.id = String(message.id);
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

  function showCounts(chats) {
    for (const chat of chats) {
      const badge = app.querySelector('[data-unread="' + chat.id + '"]');
      if (!badge) continue; // a chat new since the page loaded: the next load lists it
      badge.textContent = String(chat.unread);
      badge.hidden = chat.unread === 0;
    }
  }

  async function followOpenChat() {
    const messagesUrl = url(app.dataset.messagesUrl, current);
    const history = await call("GET", messagesUrl + "?limit=100").catch(() => ({messages: []}));
    show(history.messages);
    for (;;) {
      try {
        await call("POST", url(app.dataset.readUrl, current));
        const data = await call("GET", messagesUrl + "?after=" + lastId + "&wait=" + WAIT);
        show(data.messages);
      } catch (error) {
        await pause(3000); // Redis or the network is away for a moment
      }
    }
  }

  async function followCounts() {
    let query = "?wait=0";
    for (;;) {
      try {
        const data = await call("GET", app.dataset.chatsUrl + query);
        showCounts(data.chats);
        query = "?wait=" + WAIT + "&shown=" + encodeURIComponent(data.mark);
      } catch (error) {
        await pause(3000);
      }
    }
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
      const data = await call("POST", app.dataset.chatsUrl, {recipients: recipients, message: create.elements.message.value});
      window.location.assign(url(app.dataset.pageUrl, data.id));
    } catch (problem) {
      error.textContent = problem.message;
      error.hidden = false;
    }
  });

  if (current) followOpenChat();
  followCounts();
})();
