// askdb's pages: highlight SQL, draw the chart, copy buttons, keyboard submit, busy buttons.
// Re-run after each htmx swap.
(function () {
  let chart = null;
  function enhance(root) {
    if (window.hljs) root.querySelectorAll("pre code.language-sql").forEach((el) => { if (!el.dataset.highlighted) window.hljs.highlightElement(el); });
    root.querySelectorAll("button.copy").forEach((btn) => {
      btn.onclick = () => {
        const code = document.getElementById(btn.dataset.copy);
        navigator.clipboard.writeText(code.innerText).then(() => { btn.textContent = "Copied"; setTimeout(() => (btn.textContent = "Copy"), 1500); });
      };
    });
    const data = document.getElementById("chart-data");
    const canvas = document.getElementById("chart");
    if (data && canvas && window.Chart && !canvas.dataset.drawn) {
      const spec = JSON.parse(data.textContent);
      if (chart) chart.destroy();
      // Long category names read better as horizontal bars than as tilted labels.
      const sideways = spec.type === "bar" && Math.max(...spec.labels.map((l) => l.length)) > 12;
      const box = canvas.parentElement;
      box.style.height = sideways ? Math.max(160, 30 * spec.labels.length + 60) + "px" : "";
      // On a phone the category names get the room the axis title would take (it clipped them),
      // also when the window narrows after drawing.
      let cut = 28;
      const fit = (c, width) => { const narrow = width < 500; cut = narrow ? 18 : 28; if (sideways) c.options.scales.y.title.display = !narrow; };
      const axes = { x: { title: { display: true, text: sideways ? spec.y : spec.x } }, y: { title: { display: true, text: sideways ? spec.x : spec.y } } };
      if (sideways) axes.y.ticks = { callback(v) { const l = this.getLabelForValue(v); return l.length > cut ? l.slice(0, cut - 1) + "…" : l; } };
      chart = new window.Chart(canvas, {
        type: spec.type,
        data: { labels: spec.labels, datasets: [{ label: spec.y, data: spec.values, backgroundColor: "#0b5cad", borderColor: "#0b5cad", spanGaps: false }] },
        options: { animation: false, maintainAspectRatio: false, indexAxis: sideways ? "y" : "x", plugins: { legend: { display: false } }, scales: axes,
          onResize: (c, size) => fit(c, size.width) },
      });
      fit(chart, box.clientWidth);
      chart.update();
      canvas.dataset.drawn = "1";
    }
  }
  // Every button that starts work says so at once and cannot be pressed twice.
  document.addEventListener("submit", (e) => {
    const form = e.target;
    const button = e.submitter || form.querySelector("button[type=submit], button:not([type])");
    if (!button || form.dataset.submitted) { if (form.dataset.submitted) e.preventDefault(); return; }
    form.dataset.submitted = "1";
    button.setAttribute("aria-busy", "true");
    const busy = button.dataset.busy || form.dataset.busy;
    if (busy && !button.classList.contains("link")) button.textContent = busy;
    setTimeout(() => { button.disabled = true; }, 0); // after the browser has taken the button's value
  });
  // The question box: Enter or Ctrl/Cmd+Enter asks, Shift+Enter is a new line.
  document.addEventListener("keydown", (e) => {
    const box = e.target;
    if (!(box instanceof HTMLTextAreaElement) || box.id !== "question" || e.key !== "Enter" || e.shiftKey || e.isComposing) return;
    e.preventDefault();
    if (box.value.trim()) box.form.requestSubmit();
  });
  window.addEventListener("pageshow", (e) => { // back button: the page comes from the cache with busy buttons
    if (e.persisted) document.querySelectorAll("form[data-submitted]").forEach((f) => {
      delete f.dataset.submitted;
      f.querySelectorAll("button[aria-busy]").forEach((b) => { b.disabled = false; b.removeAttribute("aria-busy"); });
    });
  });
  document.addEventListener("DOMContentLoaded", () => enhance(document));
  document.addEventListener("htmx:afterSettle", () => enhance(document));
})();
