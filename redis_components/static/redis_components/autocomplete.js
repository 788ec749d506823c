// Autocomplete inputs for redis_components: a WAI-ARIA 1.2 combobox with a listbox popup.
//
// Every <input data-rc-autocomplete="<url>"> on the page is enhanced; without this
// script it stays a plain text input. Configuration comes only from attributes:
//   data-rc-autocomplete  the JSON endpoint; GET <url>?q=<text> answers {"results": [...]}
//   data-rc-debounce      milliseconds to wait after the last keystroke (default 200)
// Keys: Down/Up move through the suggestions (Down opens them), Enter picks the
// highlighted one, Escape closes, Tab leaves without picking. A newer keystroke aborts
// the request of an older one, so answers never arrive out of order.
// Loaded as a module: it runs once per page however often it is included.
// Its texts go through Django's JavaScript catalog (JavaScriptCatalog) when the page
// loads it, and stay English otherwise.

let count = 0;

const gettext = (text) => (window.gettext ? window.gettext(text) : text);
const ngettext = (singular, plural, n) =>
  window.ngettext ? window.ngettext(singular, plural, n) : n === 1 ? singular : plural;

function enhance(input) {
  if (input.getAttribute("role") === "combobox") return;
  count += 1;
  if (!input.id) input.id = `rc-autocomplete-${count}`;
  const url = new URL(input.dataset.rcAutocomplete, document.baseURI);
  const debounce = Number(input.dataset.rcDebounce || 200);

  const listbox = document.createElement("ul");
  listbox.id = `${input.id}-listbox`;
  listbox.className = "rc-autocomplete-listbox";
  listbox.setAttribute("role", "listbox");
  listbox.setAttribute("aria-label", gettext("Suggestions"));
  listbox.hidden = true;
  const status = document.createElement("span");
  status.className = "rc-autocomplete-status";
  status.setAttribute("role", "status");
  input.after(listbox, status);

  input.setAttribute("role", "combobox");
  input.setAttribute("aria-autocomplete", "list");
  input.setAttribute("aria-controls", listbox.id);
  input.setAttribute("aria-expanded", "false");
  input.setAttribute("autocomplete", "off");

  let timer = null;
  let request = null;
  let active = -1;

  const options = () => Array.from(listbox.children);

  function close() {
    listbox.hidden = true;
    input.setAttribute("aria-expanded", "false");
    input.removeAttribute("aria-activedescendant");
    active = -1;
  }

  function open() {
    if (!listbox.children.length) return;
    listbox.hidden = false;
    input.setAttribute("aria-expanded", "true");
  }

  function highlight(index) {
    const items = options();
    active = index;
    items.forEach((item, i) => item.setAttribute("aria-selected", String(i === index)));
    if (index < 0) {
      input.removeAttribute("aria-activedescendant");
      return;
    }
    input.setAttribute("aria-activedescendant", items[index].id);
    items[index].scrollIntoView({ block: "nearest" });
  }

  function pick(index) {
    input.value = options()[index].textContent;
    close();
    input.dispatchEvent(new Event("change", { bubbles: true }));
  }

  function show(results) {
    listbox.replaceChildren(
      ...results.map((text, i) => {
        const item = document.createElement("li");
        item.id = `${listbox.id}-${i}`;
        item.setAttribute("role", "option");
        item.setAttribute("aria-selected", "false");
        item.textContent = text;
        return item;
      }),
    );
    active = -1;
    input.removeAttribute("aria-activedescendant");
    status.textContent = results.length
      ? ngettext("%s suggestion", "%s suggestions", results.length).replace("%s", results.length)
      : "";
    // An answer that arrives after the user has moved on does not pop up.
    if (results.length && document.activeElement === input) open();
    else close();
  }

  async function fetchSuggestions() {
    request = new AbortController();
    const query = new URL(url);
    query.searchParams.set("q", input.value);
    try {
      const response = await fetch(query, {
        signal: request.signal,
        headers: { Accept: "application/json" },
        credentials: "same-origin",
      });
      show(response.ok ? (await response.json()).results : []);
    } catch (error) {
      if (error.name !== "AbortError") show([]);
    }
  }

  input.addEventListener("input", () => {
    clearTimeout(timer);
    if (request) request.abort();
    if (input.value) timer = setTimeout(fetchSuggestions, debounce);
    else show([]);
  });

  input.addEventListener("keydown", (event) => {
    const items = options();
    switch (event.key) {
      case "ArrowDown":
      case "ArrowUp": {
        if (!items.length) return;
        event.preventDefault();
        const down = event.key === "ArrowDown";
        if (listbox.hidden || active < 0) {
          open();
          highlight(down ? 0 : items.length - 1);
          return;
        }
        highlight((active + (down ? 1 : -1) + items.length) % items.length);
        return;
      }
      case "Enter":
        if (!listbox.hidden && active >= 0) {
          event.preventDefault();
          pick(active);
        }
        return;
      case "Escape":
        if (!listbox.hidden) {
          event.preventDefault();
          close();
        }
        return;
      case "Tab":
        close();
        return;
      default:
    }
  });

  // Keep the focus in the input when an option is clicked, so blur does not close first.
  listbox.addEventListener("mousedown", (event) => event.preventDefault());
  listbox.addEventListener("click", (event) => {
    const item = event.target.closest("[role=option]");
    if (item) pick(options().indexOf(item));
  });
  input.addEventListener("blur", close);
}

document.querySelectorAll("input[data-rc-autocomplete]").forEach(enhance);
