// WCAG contrast of every text item on the page, as the reader sees it (run in the browser
// by tests/book/test_book_browser.py). Returns {checked, worst, bad}: how many items were
// measured, the lowest ratio, and the items below `min` as [{text, ratio, fg, bg, where}].
//
// HTML text: its colour (with the opacity of its ancestors) against the stack of ancestor
// backgrounds. SVG text (Plotly's figures, the visualizer): its fill against, in order of
// preference, its own halo (a stroke painted under the fill, at least 2 px wide), else every
// shape painted before it whose box holds the text's centre (colour, fill-opacity and
// opacity composited bottom-up onto the HTML background under the SVG); a pattern fill
// counts as each of its colours, and the worst one is taken. Inert content (the
// visualizer's greyed-out views), disabled controls and text clipped to a pixel (screen-
// reader-only text) are exempt, as WCAG exempts inactive components and invisible text.
(min) => {
  const parse = (css) => {
    const m = /rgba?\(([^)]+)\)/.exec(css || "");
    if (!m) return null;
    const [r, g, b, a = 1] = m[1].split(/[\s,/]+/).filter(Boolean).map(Number);
    return [r, g, b, a];
  };
  const over = (top, bottom) => [0, 1, 2].map((i) => top[i] * top[3] + bottom[i] * (1 - top[3])).concat([1]);
  const lum = (c) => {
    const f = (v) => ((v /= 255) <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4);
    return 0.2126 * f(c[0]) + 0.7152 * f(c[1]) + 0.0722 * f(c[2]);
  };
  const ratio = (a, b) => {
    const [x, y] = [lum(a), lum(b)].sort((p, q) => q - p);
    return (x + 0.05) / (y + 0.05);
  };
  const opacityOf = (el) => {
    let o = 1;
    for (let n = el; n && n.nodeType === 1; n = n.parentElement) o *= Number(getComputedStyle(n).opacity);
    return o;
  };
  const exempt = (el) => Boolean(el.closest("[inert], button:disabled, select:disabled, input:disabled, [aria-hidden=true]"));
  const shown = (el) => {
    if (!el.checkVisibility({ visibilityProperty: true, opacityProperty: true })) return false;
    const r = el.getBoundingClientRect();
    return r.width > 1.5 && r.height > 1.5;
  };

  // The HTML background behind an element: ancestor backgrounds composited onto the page's.
  function htmlBackground(el) {
    const layers = [];
    for (let n = el; n && n.nodeType === 1; n = n.parentElement) {
      const c = parse(getComputedStyle(n).backgroundColor);
      if (c && c[3] > 0) {
        layers.push(c);
        if (c[3] >= 1) break;
      }
    }
    let bg = [255, 255, 255, 1];
    for (const c of layers.reverse()) bg = over(c, bg);
    return bg;
  }

  // Colours a shape paints with: its fill, or each colour of a pattern fill.
  function fills(shape) {
    const style = getComputedStyle(shape);
    const alpha = Number(style.fillOpacity) * opacityOf(shape);
    const url = /url\("?#([^")]+)"?\)/.exec(style.fill);
    if (url) {
      const pattern = document.getElementById(url[1]);
      if (!pattern) return [];
      return [...pattern.querySelectorAll("*")].flatMap((n) => {
        const s = getComputedStyle(n);
        return [parse(s.fill), parse(s.stroke)].filter((c) => c && c[3] > 0);
      }).map((c) => [c[0], c[1], c[2], c[3] * alpha]);
    }
    const c = parse(style.fill);
    return c && c[3] * alpha > 0 ? [[c[0], c[1], c[2], c[3] * alpha]] : [];
  }

  const bad = [];
  let checked = 0, lowest = 21;
  const report = (text, fg, bgs, where) => {
    const worst = Math.min(...bgs.map((bg) => ratio(over(fg, bg), bg)));
    checked += 1;
    lowest = Math.min(lowest, worst);
    if (worst < min) bad.push({ text: text.slice(0, 60), ratio: Number(worst.toFixed(2)), fg: fg.join(","), bg: bgs.map((b) => b.slice(0, 3).join(",")).join(" | "), where });
  };
  const where = (el) => {
    const f = el.closest("figure, .pkv-root, section, article, nav, header, footer");
    return f ? `${f.tagName.toLowerCase()}.${[...f.classList].join(".")}#${f.id || ""}` : "";
  };

  // HTML text nodes.
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  const seen = new Set();
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    const el = node.parentElement;
    if (!el || seen.has(el) || !node.textContent.trim() || el.closest("svg, script, style, noscript, template, mjx-container")) continue;
    seen.add(el);
    if (exempt(el) || !shown(el)) continue;
    const fg = parse(getComputedStyle(el).color);
    if (!fg) continue;
    fg[3] *= opacityOf(el);
    report(node.textContent.trim(), fg, [htmlBackground(el)], where(el));
  }
  for (const el of document.querySelectorAll("select")) {
    if (exempt(el) || !shown(el)) continue;
    const fg = parse(getComputedStyle(el).color);
    report(el.selectedOptions[0]?.textContent || "select", fg, [htmlBackground(el)], where(el));
  }

  // SVG text.
  const shapesOf = new Map();
  for (const text of document.querySelectorAll("svg text")) {
    if (!text.textContent.trim() || exempt(text) || !shown(text)) continue;
    const style = getComputedStyle(text);
    const fg = parse(style.fill);
    if (!fg) continue;
    fg[3] *= Number(style.fillOpacity) * opacityOf(text);
    const halo = parse(style.stroke);
    if (style.paintOrder.startsWith("stroke") && halo && halo[3] > 0 && parseFloat(style.strokeWidth) >= 2) {
      report(text.textContent.trim(), fg, [halo], where(text));
      continue;
    }
    const box = text.getBoundingClientRect(), cx = box.left + box.width / 2, cy = box.top + box.height / 2;
    const root = text.closest(".js-plotly-plot, .pkv-root, figure") || text.ownerSVGElement;
    if (!shapesOf.has(root)) {
      shapesOf.set(root, [...root.querySelectorAll("rect, path, circle, ellipse, polygon")]
        .filter((s) => !s.closest("defs, pattern, clipPath, mask") && s.checkVisibility({ visibilityProperty: true }))
        .map((s) => ({ s, r: s.getBoundingClientRect() })));
    }
    let bgs = [htmlBackground(text.ownerSVGElement)];
    for (const { s, r } of shapesOf.get(root)) {
      if (!(text.compareDocumentPosition(s) & Node.DOCUMENT_POSITION_PRECEDING)) continue;
      if (cx < r.left || cx > r.right || cy < r.top || cy > r.bottom) continue;
      const colours = fills(s);
      if (colours.length) {
        const next = new Map(colours.flatMap((c) => bgs.map((bg) => over(c, bg))).map((c) => [c.join(), c]));
        bgs = [...next.values()];
      }
    }
    report(text.textContent.trim(), fg, bgs, where(text));
  }
  return { checked, worst: Number(lowest.toFixed(2)), bad };
}
