// The console's live parts, without a library: every 2 s, each element with data-live="<url>" is
// replaced by what that URL returns (the server renders the same element again, same id). Every
// page works without this script; it only keeps the counts, the workers and the jobs they hold fresh.
(() => {
  const EVERY_MS = 2000;
  const busy = new Set();

  async function refresh(element) {
    if (busy.has(element.id)) return; // the last request is still out: skip a beat
    busy.add(element.id);
    try {
      const response = await fetch(element.dataset.live, { credentials: "same-origin" });
      if (!response.ok) return; // Redis down, a restart: the next beat tries again
      const template = document.createElement("template");
      template.innerHTML = (await response.text()).trim();
      const fresh = template.content.firstElementChild;
      if (fresh && fresh.id === element.id && element.isConnected) element.replaceWith(fresh);
    } catch {
      // the console is unreachable for now: the next beat tries again
    } finally {
      busy.delete(element.id);
    }
  }

  setInterval(() => {
    if (!document.hidden) document.querySelectorAll("[data-live]").forEach(refresh);
  }, EVERY_MS);
})();
