// pagedkv book, every page: what scrolls sideways in its own box (a wide table, printed
// output, display math: see pagedkv-book.css) can be scrolled from the keyboard. Such a box
// gets a tab stop and a name while it is wider than the screen (WCAG 2.1.1; axe-core's
// scrollable-region-focusable), and loses them when a wider window shows it whole. Checked
// again once MathJax has typeset, when a hidden cell opens and when the window changes size.
// It also tells sticky content how tall the theme's sticky header is (--pkv-sticky-top), and
// puts the sidebar's book title in a landmark.
(function () {
  "use strict";
  const BOXES = ".bd-article table, .bd-article pre, .bd-article mjx-container[display=true], " +
    ".bd-article .cell_output .output.text_html";
  const NAMES = { TABLE: "table", PRE: "printed output", "MJX-CONTAINER": "equation" };

  function mark() {
    const counts = {};
    for (const box of document.querySelectorAll(BOXES)) {
      // Numbered in page order, so each region's name is its own ("equation 2, scrolls sideways").
      const kind = NAMES[box.tagName] || "output";
      counts[kind] = (counts[kind] || 0) + 1;
      const wide = box.scrollWidth > box.clientWidth + 1 &&
        getComputedStyle(box).overflowX !== "visible";
      if (wide && !box.hasAttribute("tabindex")) {
        box.tabIndex = 0;
        box.dataset.pkvScroll = "1";
        // A table keeps its role (its name is its own); anything else becomes a named region.
        if (box.tagName !== "TABLE") box.setAttribute("role", "region");
        if (!box.hasAttribute("aria-label") && !box.hasAttribute("aria-labelledby")) {
          box.setAttribute("aria-label", `${kind} ${counts[kind]}, scrolls sideways`);
        }
      } else if (!wide && box.dataset.pkvScroll) {
        box.removeAttribute("tabindex");
        if (box.tagName !== "TABLE") box.removeAttribute("role");
        box.removeAttribute("aria-label");
        delete box.dataset.pkvScroll;
      }
    }
  }

  // Where sticky content may stick: under the theme's sticky article header (the memory
  // visualizer's controls use it, visualizer.css).
  function stickyTop() {
    const header = document.querySelector(".bd-header-article");
    const sticky = header && getComputedStyle(header).position === "sticky";
    document.documentElement.style.setProperty("--pkv-sticky-top", `${sticky ? header.offsetHeight : 0}px`);
  }

  // The theme puts the book's title (a link home) in the sidebar outside every landmark
  // (axe-core: region): its item becomes a named navigation landmark.
  function landmarkTitle() {
    const brand = document.querySelector(".sidebar-primary-item .navbar-brand")?.closest(".sidebar-primary-item");
    if (brand && !brand.parentElement.closest("nav, aside, header, main, footer, [role]")) {
      brand.setAttribute("role", "navigation");
      brand.setAttribute("aria-label", "Book title");
    }
  }

  function start() {
    mark();
    stickyTop();
    landmarkTitle();
    // MathJax (deferred) typesets after the page's load event; opening a hidden code cell
    // shows its source.
    window.addEventListener("load", () => window.MathJax?.startup?.promise?.then(mark));
    document.addEventListener("toggle", mark, true);
    let pending = null;
    window.addEventListener("resize", () => {
      clearTimeout(pending);
      pending = setTimeout(() => { mark(); stickyTop(); }, 150);
    });
  }

  window.pagedkvBook = { markScrollable: mark };
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
