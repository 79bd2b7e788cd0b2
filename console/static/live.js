// Every 2 s, each element with data-live="<url>" is replaced by what that URL returns (the same
// element rendered again, same id). Every page works without this script.
(() => {
  const EVERY_MS = 2000;
  const busy = new Set();

  async function refresh(element) {
    if (busy.has(element.id)) return; // the last request is still out
    busy.add(element.id);
    try {
      const response = await fetch(element.dataset.live, { credentials: "same-origin" });
      if (!response.ok) return; // the next beat tries again
      const template = document.createElement("template");
      template.innerHTML = (await response.text()).trim();
      const fresh = template.content.firstElementChild;
      if (fresh && fresh.id === element.id && element.isConnected) element.replaceWith(fresh);
    } catch {
      // unreachable for now: the next beat tries again
    } finally {
      busy.delete(element.id);
    }
  }

  setInterval(() => {
    if (!document.hidden) document.querySelectorAll("[data-live]").forEach(refresh);
  }, EVERY_MS);
})();
