// pagedkv book: every Plotly figure on the page gets
//  - native, labelled controls in place of Plotly's sliders and menus, which a keyboard cannot
//    reach: a range input for a slider, a select for a dropdown, toggle buttons for buttons.
//    Each applies the step's own Plotly command (update, restyle or relayout), so the figure
//    behaves as its Python author wrote it;
//  - a phone layout below 600 px of width: legend under the plot, narrow margins, long titles
//    wrapped;
//  - the book's dark theme (pydata-sphinx-theme's html[data-theme="dark"]), followed live.
// Loaded by book/_ext/pagedkv_book.py on pages that draw a Plotly figure; a figure's original
// layout values are kept, so switching back to light or wide restores them exactly.
(function () {
  "use strict";
  const NARROW = 600;
  const AXIS = /^[xy]axis\d*$/;
  const isDark = () => document.documentElement.dataset.theme === "dark";
  const cssVar = (name, fallback) =>
    getComputedStyle(document.documentElement).getPropertyValue(name).trim() || fallback;

  // The box that sets a figure's height: plotly.py's wrapper div, else the figure's own.
  const frameOf = (gd) => (gd.parentElement?.style.height ? gd.parentElement : gd);

  // ---------- native controls ----------

  function run(gd, step) {
    const a = step.args || [];
    const done = step.method === "update" ? Plotly.update(gd, a[0] || {}, a[1] || {}, a[2])
      : step.method === "restyle" ? Plotly.restyle(gd, a[0] || {}, a[1])
        : step.method === "relayout" ? Plotly.relayout(gd, a[0] || {}) : Promise.resolve();
    return Promise.resolve(done).then(() => adapt(gd));
  }

  const plain = (s) => String(s ?? "").replace(/<[^>]*>/g, " ").replace(/\s+/g, " ").trim();

  function sliderControl(gd, slider, label) {
    const steps = slider.steps.filter((s) => s.visible !== false);
    const wrap = document.createElement("label");
    const input = document.createElement("input");
    const out = document.createElement("output");
    input.type = "range";
    input.min = 0;
    input.max = steps.length - 1;
    input.step = 1;
    input.value = Math.min(steps.length - 1, slider.active || 0);
    const sync = () => {
      const text = plain(steps[input.value].label);
      out.textContent = text;
      // A bare number reads out with what it counts: "event 7 of 9", not "7".
      input.setAttribute("aria-valuetext", /^\d+$/.test(text) ? `${label} ${text} of ${steps.length - 1}` : text);
    };
    input.addEventListener("input", () => { sync(); run(gd, steps[input.value]); });
    sync();
    wrap.append(`${label} `, input, out);
    return wrap;
  }

  function selectControl(gd, menu, label) {
    const wrap = document.createElement("label");
    const select = document.createElement("select");
    menu.buttons.forEach((b, i) => select.append(new Option(plain(b.label), i, false, i === (menu.active || 0))));
    select.addEventListener("change", () => run(gd, menu.buttons[select.value]));
    wrap.append(`${label} `, select);
    return wrap;
  }

  function buttonsControl(gd, menu, label) {
    const group = document.createElement("div");
    group.setAttribute("role", "group");
    group.setAttribute("aria-label", label);
    group.append(`${label}: `);
    const buttons = menu.buttons.map((b, i) => {
      const button = document.createElement("button");
      button.type = "button";
      button.textContent = plain(b.label);
      button.setAttribute("aria-pressed", String(i === (menu.active || 0)));
      button.addEventListener("click", () => {
        buttons.forEach((other) => other.setAttribute("aria-pressed", String(other === button)));
        run(gd, b);
      });
      return button;
    });
    group.append(...buttons);
    return group;
  }

  function replaceControls(gd) {
    const sliders = gd.layout.sliders || [], menus = gd.layout.updatemenus || [];
    if (!sliders.length && !menus.length) return;
    const box = document.createElement("div");
    box.className = "pkv-figure-controls";
    const named = (c, fallback) => plain(c.name || c.currentvalue?.prefix || fallback).replace(/:$/, "");
    menus.forEach((m) => box.append(m.type === "buttons"
      ? buttonsControl(gd, m, named(m, "view")) : selectControl(gd, m, named(m, "view"))));
    sliders.forEach((s) => box.append(sliderControl(gd, s, named(s, "step"))));
    frameOf(gd).before(box);
    // Plotly's own controls go; the space a menu took above an untitled plot goes with them.
    const untitled = !gd.layout.title?.text && !(typeof gd.layout.title === "string" && gd.layout.title);
    Plotly.relayout(gd, { sliders: [], updatemenus: [], ...(untitled && menus.length ? { "margin.t": 30 } : {}) });
  }

  // ---------- phone layout and dark theme ----------

  // Layout keys this script may change; their original values are kept per figure.
  function keysOf(gd) {
    const axes = Object.keys(gd._fullLayout).filter((k) => AXIS.test(k));
    return ["paper_bgcolor", "plot_bgcolor", "font.color", "title.font.color", "legend.font.color",
      "legend.bgcolor", "legend.orientation", "legend.x", "legend.y", "legend.xanchor",
      "legend.yanchor", "margin.l", "margin.r", "margin.t", "margin.b", "height",
      ...axes.flatMap((a) => [`${a}.gridcolor`, `${a}.linecolor`, `${a}.zerolinecolor`,
        `${a}.tickfont.color`, `${a}.title.font.color`])];
  }

  const get = (obj, path) => path.split(".").reduce((o, k) => (o == null ? undefined : o[k]), obj);

  // A title's lines broken at words to fit `width`; a line that is all <sub> or <sup> (a
  // subtitle, drawn at 70 %) keeps its tag on each piece.
  function wrapTitle(text, width, size) {
    return String(text).split("<br>").map((line) => {
      const small = /^<(su[bp])>(.*)<\/\1>$/.exec(line);
      const words = small ? small[2] : line;
      const perLine = Math.max(16, Math.floor(width / (size * (small ? 0.7 : 1) * 0.55)));
      if (words.replace(/<[^>]*>/g, "").length <= perLine || /<su[bp]>/.test(words)) return line;
      const out = [];
      let cur = "";
      for (const word of words.split(" ")) {
        if (cur && (cur + " " + word).length > perLine) { out.push(cur); cur = word; } else cur = cur ? `${cur} ${word}` : word;
      }
      return [...out, cur].map((piece) => (small ? `<${small[1]}>${piece}</${small[1]}>` : piece)).join("<br>");
    }).join("<br>");
  }

  function adapt(gd) {
    if (!gd._fullLayout) return;
    if (!gd._pkvOriginal) {
      gd._pkvOriginal = {};
      for (const k of keysOf(gd)) gd._pkvOriginal[k] = get(gd.layout, k) ?? null;
    }
    const o = gd._pkvOriginal, want = { ...o };
    // A table keeps its columns readable: on a phone it scrolls sideways in its figure.
    if (gd.data.some((t) => t.type === "table")) {
      const frame = frameOf(gd), wide = `${NARROW + 40}px`;
      if (frame.closest("figure")?.clientWidth < NARROW && frame.style.minWidth !== wide) {
        frame.style.minWidth = wide;
        frame.closest("figure").style.overflowX = "auto";
        Plotly.Plots.resize(gd);
      }
    }
    const narrow = gd.clientWidth > 0 && gd.clientWidth < NARROW;
    // The title: wrapped to the width on a phone. A control may set a new one (slider steps
    // do), so the unwrapped text is whatever the figure shows that this script did not write.
    const current = get(gd.layout, "title.text") ?? null;
    if (current !== gd._pkvWrapped) gd._pkvTitle = current;
    want["title.text"] = narrow && gd._pkvTitle ? wrapTitle(gd._pkvTitle, gd.clientWidth, 17) : gd._pkvTitle;
    gd._pkvWrapped = want["title.text"];
    if (narrow) {
      const legend = gd._fullLayout.showlegend;
      const right = Object.keys(gd._fullLayout).some((k) => /^yaxis\d+$/.test(k) && gd._fullLayout[k].side === "right");
      const lines = want["title.text"] ? String(want["title.text"]).split("<br>").length : 0;
      Object.assign(want, {
        "margin.l": Math.min(o["margin.l"] ?? 80, 48), "margin.r": right ? 52 : Math.min(o["margin.r"] ?? 80, 12),
        "margin.t": Math.max(o["margin.t"] ?? 100, lines ? 30 + 22 * lines : 30),
      });
      // A wrapped title takes more room on top, a legend below: the figure grows by both,
      // so the plot area keeps its height.
      let grow = Math.max(0, want["margin.t"] - (o["margin.t"] ?? 100));
      if (legend) {
        // Under the x axis's tick labels and title (about 70 px), whatever the plot's height.
        const below = -Math.min(0.6, 72 / Math.max(1, gd._fullLayout._size.h));
        Object.assign(want, { "legend.orientation": "h", "legend.x": 0, "legend.xanchor": "left",
          "legend.y": below, "legend.yanchor": "top", "margin.b": Math.max(o["margin.b"] ?? 80, 60) });
        grow += 110;
      }
      if (grow) want.height = (o.height ?? gd._fullLayout.height) + grow;
    }
    if (isDark()) {
      const text = cssVar("--pst-color-text-base", "#ced6dd"), grid = "#3d4654";
      Object.assign(want, { paper_bgcolor: cssVar("--pst-color-background", "#14181e"),
        plot_bgcolor: cssVar("--pst-color-on-background", "#1e252f"), "font.color": text,
        "title.font.color": text, "legend.font.color": text, "legend.bgcolor": "rgba(0,0,0,0)" });
      for (const k of Object.keys(o)) {
        if (/\.(gridcolor|zerolinecolor)$/.test(k)) want[k] = grid;
        if (/\.linecolor$/.test(k)) want[k] = "#6b778a";
        if (/\.(tickfont|title\.font)\.color$/.test(k)) want[k] = text;
      }
    }
    const update = {};
    for (const [k, v] of Object.entries(want)) if ((get(gd.layout, k) ?? null) !== v) update[k] = v;
    // Annotations and line shapes drawn in the default dark ink follow the theme too.
    const ink = isDark() ? cssVar("--pst-color-text-base", "#ced6dd") : "#444";
    (gd.layout.annotations || []).forEach((a, i) => {
      if (!a.bgcolor && (a.font?.color ?? null) !== (isDark() ? ink : null)) update[`annotations[${i}].font.color`] = isDark() ? ink : null;
    });
    (gd.layout.shapes || []).forEach((s, i) => {
      const c = s.line?.color;
      if (isDark() && /^(black|#000(000)?)$/i.test(c || "")) update[`shapes[${i}].line.color`] = ink;
      if (!isDark() && c === cssVar("--pst-color-text-base", "#ced6dd")) update[`shapes[${i}].line.color`] = "black";
    });
    // The box keeps the height Plotly was first given (plotly.py's wrapper div, else the
    // figure's own div); a taller phone layout needs it too.
    const height = want.height ?? gd._fullLayout.height;
    const frame = frameOf(gd);
    if (height && frame.style.height !== `${height}px`) frame.style.height = `${height}px`;
    if (Object.keys(update).length) Plotly.relayout(gd, update);
    // Black markers (retraction crosses) would vanish on the dark plot: drawn in ink there.
    const black = /^(black|#000(000)?)$/i;
    gd.data.forEach((t, i) => {
      const c = t.marker?.color;
      if (typeof c !== "string") return;
      if (isDark() && black.test(c)) Plotly.restyle(gd, { "marker.color": ink }, [i]);
      if (!isDark() && c === cssVar("--pst-color-text-base", "#ced6dd")) Plotly.restyle(gd, { "marker.color": "black" }, [i]);
    });
  }

  // ---------- wiring ----------

  function enhance(gd) {
    if (gd.dataset.pkvEnhanced) return;
    // Plotly draws asynchronously (on a page with math it first waits for MathJax): act
    // once the figure has its full layout.
    if (!gd._fullLayout?._size) {
      gd._pkvTries = (gd._pkvTries || 0) + 1;
      if (gd._pkvTries < 200) setTimeout(() => enhance(gd), 50);
      return;
    }
    gd.dataset.pkvEnhanced = "1";
    replaceControls(gd);
    adapt(gd);
  }

  function all() {
    return [...document.querySelectorAll(".plotly-graph-div, .js-plotly-plot")];
  }

  function start() {
    all().forEach(enhance);
    new MutationObserver(() => all().filter((gd) => gd.dataset.pkvEnhanced).forEach(adapt))
      .observe(document.documentElement, { attributes: true, attributeFilter: ["data-theme"] });
    let pending = null;
    window.addEventListener("resize", () => {
      clearTimeout(pending);
      pending = setTimeout(() => all().filter((gd) => gd.dataset.pkvEnhanced).forEach(adapt), 150);
    });
  }

  // Figures drawn later (the budget explorer redraws its chart) call this after each draw.
  window.pagedkvFigures = { enhance: (gd) => { delete gd._pkvOriginal; gd.dataset.pkvEnhanced = ""; enhance(gd); } };
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
