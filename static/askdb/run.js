// The run page: highlight SQL, draw the chart, copy buttons. Re-run after each htmx swap.
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
      chart = new window.Chart(canvas, {
        type: spec.type,
        data: { labels: spec.labels, datasets: [{ label: spec.y, data: spec.values, backgroundColor: "#0b5cad", borderColor: "#0b5cad" }] },
        options: { animation: false, plugins: { legend: { display: false } }, scales: { x: { title: { display: true, text: spec.x } }, y: { title: { display: true, text: spec.y } } } },
      });
      canvas.dataset.drawn = "1";
    }
  }
  document.addEventListener("DOMContentLoaded", () => enhance(document));
  document.addEventListener("htmx:afterSettle", (e) => enhance(document));
})();
