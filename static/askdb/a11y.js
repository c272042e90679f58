// Keyboard reach for boxes that scroll (SQL blocks, wide tables, long JSON): a box that scrolls
// only for a mouse locks keyboard users out of what is past its edge (WCAG 2.1.1). Whether a box
// scrolls depends on the screen width and on what htmx swapped in, so this is decided in the
// browser, again after each swap and resize: a box that scrolls is made a labelled, focusable
// region (tabindex=0, role=region, aria-label); one that no longer scrolls is given back.
(function () {
  const BOXES = "pre, pre > code, .scroll, .candidate-preview, .cm-scroller";
  function scrolls(el) {
    const style = getComputedStyle(el);
    const x = /(auto|scroll)/.test(style.overflowX) && el.scrollWidth > el.clientWidth + 1;
    const y = /(auto|scroll)/.test(style.overflowY) && el.scrollHeight > el.clientHeight + 1;
    return x || y;
  }
  function labelFor(el) {
    const table = el.querySelector("table");
    if (el.matches("code.language-sql") || el.querySelector("code.language-sql") || el.classList.contains("cm-scroller")) return "SQL";
    if (el.classList.contains("diff")) return el.getAttribute("aria-label") || "SQL diff";
    if (table) {
      const caption = table.querySelector("caption");
      if (caption && caption.textContent.trim()) return caption.textContent.trim();
      if (table.getAttribute("aria-label")) return table.getAttribute("aria-label");
    }
    // The nearest heading before the box names what it holds.
    let node = el;
    while (node && node !== document.body) {
      let prev = node.previousElementSibling;
      while (prev) {
        const h = prev.matches("h1, h2, h3, h4, summary") ? prev : prev.querySelector("h1, h2, h3, h4");
        if (h && h.textContent.trim()) return h.textContent.trim().replace(/\s+/g, " ").slice(0, 80);
        prev = prev.previousElementSibling;
      }
      node = node.parentElement;
    }
    return table ? "Table" : "Text";
  }
  function reach(root) {
    // CodeMirror's editable area is the textbox a screen reader lands on: it takes the editor's name.
    document.querySelectorAll(".cm-editor .cm-content:not([aria-label])").forEach((el) => {
      el.setAttribute("aria-label", el.closest(".cm-editor").getAttribute("aria-label") || "SQL");
    });
    (root || document).querySelectorAll(BOXES).forEach((el) => {
      const ours = el.dataset.reach === "1";
      if (scrolls(el)) {
        if (ours || el.hasAttribute("tabindex")) return;
        el.dataset.reach = "1";
        el.tabIndex = 0;
        if (!el.getAttribute("role")) el.setAttribute("role", "region");
        if (!el.getAttribute("aria-label")) el.setAttribute("aria-label", labelFor(el) + " (scrolls)");
      } else if (ours) {
        delete el.dataset.reach;
        el.removeAttribute("tabindex");
        if (el.getAttribute("role") === "region") el.removeAttribute("role");
        if ((el.getAttribute("aria-label") || "").endsWith(" (scrolls)")) el.removeAttribute("aria-label");
      }
    });
  }
  let pending = null;
  const soon = () => {
    clearTimeout(pending);
    pending = setTimeout(() => { pending = null; reach(document); }, 100);
  };
  document.addEventListener("DOMContentLoaded", () => reach(document));
  window.addEventListener("load", () => reach(document)); // after the deferred scripts drew their boxes
  document.addEventListener("htmx:afterSettle", soon);
  document.addEventListener("toggle", soon, true); // a <details> opened: its boxes now have a size
  window.addEventListener("resize", soon);
  window.askdbReach = reach; // for pages that draw boxes themselves
  window.askdbReachPending = () => pending !== null; // a deferred pass is still to run (tests wait for it)
})();
// The main menu on a phone: one "Menu" button instead of three rows of links above every page.
(function () {
  document.addEventListener("DOMContentLoaded", () => {
    const button = document.querySelector(".menu-toggle");
    const nav = document.getElementById("main-nav");
    if (!button || !nav) return;
    button.addEventListener("click", () => {
      const open = nav.classList.toggle("open");
      button.setAttribute("aria-expanded", String(open));
    });
    document.addEventListener("keydown", (e) => {
      if (e.key === "Escape" && nav.classList.contains("open")) {
        nav.classList.remove("open");
        button.setAttribute("aria-expanded", "false");
        button.focus();
      }
    });
  });
})();
