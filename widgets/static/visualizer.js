// pagedkv memory visualizer: plays back precomputed scheduler traces; it never simulates.
//
// Data flow. Python (pagedkv_widgets) runs pagedkv.managers.simulate twice per setting
// (the real card, and a small teaching pool that records page tables), encodes both traces
// (widgets/encoding.py) and hands them here as a "scene" {card, pool}:
//   - live (Jupyter, anywidget): `render({model, el})`. The sliders write the `settings`
//     trait; Python re-simulates and sets the `scene` trait, which redraws.
//   - static (the built book): this file comes inline as a module right after the
//     <div class="pkv-static"> (widgets/static_page.py); `mountAll` finds each such div and
//     its <script type="application/gzip"> holding a grid of scenes keyed by settings (JSON,
//     gzip, base64); the sliders pick a scene from the grid.
// Both paths share `createViewer`, which draws four linked views from a decoded scene:
// the HBM bar (card scale), the page table and pool map (teaching pool), the timeline.
// A run that cannot happen at a setting arrives as {error, fix} (widgets/limits.py): the
// viewer says why in words and greys that run's views out.
//
// Colours that carry meaning (segments, owners, events) are the same in both themes; text
// and the panel follow the page's theme through CSS variables (visualizer.css). Numbers
// drawn on a coloured cell have a light halo, so they read on any owner colour.

const SVG = "http://www.w3.org/2000/svg";
const GIB = 2 ** 30;
// Owner colours: 12 hues 30° apart, taken in steps of 150° so consecutive requests (the ones
// on screen together) sit far apart on the wheel, at two lightnesses: requests n and n + 12
// share a hue but not a lightness, so the 24 requests of a teaching run all differ (the
// cells also carry labels).
const requestColour = (n) => `hsl(${((n * 5) % 12) * 30} 72% ${Math.floor(n / 12) % 2 ? 78 : 58}%)`;
const HBM_SEGMENTS = [
  ["weights", "weights", "#6b6b6b"],
  ["other", "activations + CUDA graphs (1 − mem_fraction_static)", "url(#pkv-hatch)"],
  ["kv_used", "KV in use", "#0072B2"],
  ["kv_reserved", "KV reserved by admission", "#E69F00"],
  ["kv_free", "KV free", "var(--pkv-free)"],
];
const EVENT_MARKS = [["admit", "admit", "#009E73"], ["finish", "finish", "#56B4E9"],
  ["retract", "retract", "#D55E00"], ["reprefill", "re-prefill", "#CC79A7"]];

// ---------- decoding (twin of widgets/encoding.py decode_*) ----------

function undelta(values) {
  const out = new Array(values.length);
  let acc = 0;
  for (let i = 0; i < values.length; i++) out[i] = acc += values[i];
  return out;
}

function unrle(flat) {
  const out = [];
  for (let i = 0; i < flat.length; i += 2) for (let k = 0; k < flat[i + 1]; k++) out.push(flat[i]);
  return out;
}

function decodeEvents(encoded) {
  const out = {};
  for (const [kind, flat] of Object.entries(encoded)) {
    const where = undelta(flat.filter((_, i) => i % 2 === 0));
    out[kind] = new Map(where.map((w, i) => [w, flat[2 * i + 1]]));
  }
  return out;
}

// Page-table lifetimes: [rid, first sample, seq_len RLE, page ids (delta), added-at (delta)].
function decodeLifetimes(segments) {
  return (segments || []).map(([rid, s0, lens, pages, at]) => ({
    rid, s0,
    seqLens: undelta([lens[0], ...unrle(lens.slice(1))]),
    pages: undelta(pages),
    addedAt: undelta(at),
  }));
}

// Decoded once per encoded run: going back to a setting only redraws.
const decoded = new WeakMap();
function decodeRun(enc) {
  if (!decoded.has(enc)) decoded.set(enc, decodeTrace(enc));
  return decoded.get(enc);
}

function decodeTrace(enc) {
  const cols = {};
  for (const key of ["t", "time", "ratio", "used", "reserved", "pages", "running", "waiting"]) {
    cols[key] = undelta(enc[key]);
  }
  return { meta: enc.meta, hbm: enc.hbm, n: enc.n, kind: enc.kind, ...cols,
    ratio: cols.ratio.map((v) => v / 1000), events: decodeEvents(enc.ev),
    lifetimes: decodeLifetimes(enc.pt), samples: cols.t.length, open: enc.open || 0 };
}

// Rows of the page table at sample i: [{rid, seqLen, pages}] in admission order.
function tableAt(trace, i) {
  const rows = [];
  for (const life of trace.lifetimes) {
    const k = i - life.s0;
    if (k < 0 || k >= life.seqLens.length) continue;
    rows.push({ rid: life.rid, seqLen: life.seqLens[k], pages: life.pages.filter((_, j) => life.addedAt[j] <= k) });
  }
  return rows;
}

// ---------- small helpers ----------

const gib = (bytes) => `${(bytes / GIB).toFixed(1)} GiB`;
const esc = (s) => String(s).replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" })[c]);
const num = (n) => Number(n).toLocaleString("en");
const clamp = (v, lo, hi) => Math.max(lo, Math.min(hi, v));

function colourOf(rid) {
  const digits = String(rid).match(/\d+/);
  let h = digits ? Number(digits[0]) : [...String(rid)].reduce((a, c) => a * 31 + c.charCodeAt(0), 7);
  return requestColour(Math.abs(h));
}

function svg(width, height, body, label) {
  return `<svg xmlns="${SVG}" viewBox="0 0 ${width} ${height}" width="${width}" height="${height}" role="img" aria-label="${esc(label)}">` +
    `<defs><pattern id="pkv-hatch" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)">` +
    `<rect width="6" height="6" fill="#e4e4e4"/><line x1="0" y1="0" x2="0" y2="6" stroke="#a8a8a8" stroke-width="2"/></pattern>` +
    `<pattern id="pkv-tail" width="4" height="4" patternUnits="userSpaceOnUse" patternTransform="rotate(45)">` +
    `<rect width="4" height="4" class="pkv-tailbg"/><line x1="0" y1="0" x2="0" y2="4" class="pkv-tailline" stroke-width="1.5"/></pattern></defs>` +
    `${body}</svg>`;
}

const HATCH_CSS = "repeating-linear-gradient(45deg,#e4e4e4 0 3px,#a8a8a8 3px 5px)";

// An HTML legend: [[label, css background, dashed?], ...].
function legendHtml(items) {
  return `<div class="pkv-legend-row">${items.map(([label, background, dashed]) =>
    `<span class="pkv-key"><i class="${dashed ? "pkv-dash" : ""}" style="background:${background};color:${background}"></i>${esc(label)}</span>`).join("")}</div>`;
}

// ---------- the four views (pure: data in, SVG/HTML text out; W = drawing width in px) ----------

// HBM bar at step i of the card-scale run; segments sum to the card (widgets/hbm.py).
function hbmView(card, i, W) {
  const { hbm, meta } = card;
  const used = Math.min(card.used[i] * meta.cell_size, hbm.pool);
  const reserved = Math.min(card.reserved[i] * meta.cell_size, hbm.pool - used);
  const bytes = { weights: hbm.weights, other: hbm.other, kv_used: used, kv_reserved: reserved,
    kv_free: hbm.pool - used - reserved };
  const x0 = 10, barW = W - 20, scale = barW / hbm.card;
  let x = x0, body = "";
  HBM_SEGMENTS.forEach(([key, label, fill]) => {
    const w = bytes[key] * scale;
    body += `<rect data-segment="${key}" data-bytes="${bytes[key]}" x="${x}" y="24" width="${w}" height="34" style="fill:${fill}" class="pkv-outline" stroke-width="0.5"><title>${esc(label)}: ${gib(bytes[key])}</title></rect>`;
    if (w > 60) body += `<text x="${x + w / 2}" y="46" class="pkv-barlabel">${gib(bytes[key])}</text>`;
    x += w;
  });
  const poolStart = x0 + (hbm.weights + hbm.other) * scale, poolW = hbm.pool * scale;
  const label = `KV pool · ${gib(hbm.pool)} · ${num(meta.max_total_num_tokens)} tokens`;
  const half = label.length * 3.2;  // about half the label's width at 11 px
  body += `<path d="M${poolStart} 20 v-6 h${poolW} v6" fill="none" class="pkv-outline"/>` +
    `<text x="${clamp(poolStart + poolW / 2, half + 2, W - half - 2)}" y="11" class="pkv-axis">${label}</text>`;
  const every = hbm.card > 64 * GIB ? (W < 480 ? 40 : 20) : 10;
  for (let g = 0; g * GIB <= hbm.card; g += every) {
    body += `<text x="${x0 + g * GIB * scale}" y="72" class="pkv-tick">${g}</text>`;
  }
  const legend = legendHtml(HBM_SEGMENTS.map(([key, label, fill]) =>
    [`${label} · ${gib(bytes[key])}`, fill.startsWith("url") ? HATCH_CSS : fill]));
  return svg(W, 76, body, "HBM bar") + legend;
}

// Page table: rows = requests, columns = logical pages, cell text = physical page id. The
// cells keep a readable size; a wide table scrolls in its own box.
function pageTableView(rows, pageSize) {
  const cols = Math.max(8, ...rows.map((r) => r.pages.length));
  const cw = clamp(640 / cols, 24, 30), ch = 20, left = 54, H = Math.max(1, rows.length) * (ch + 2) + 22;
  let body = "";
  for (let c = 0; c < cols; c += cols > 24 ? 5 : 1) body += `<text x="${left + c * cw + cw / 2}" y="11" class="pkv-tick">${c}</text>`;
  rows.forEach((row, r) => {
    const y = 16 + r * (ch + 2), fill = colourOf(row.rid);
    body += `<text x="${left - 4}" y="${y + 14}" class="pkv-rowlabel">req ${esc(row.rid)}</text>`;
    row.pages.forEach((page, c) => {
      const inPage = c < row.pages.length - 1 ? pageSize : row.seqLen - c * pageSize;
      const frac = clamp(inPage / pageSize, 0, 1);
      body += `<g data-page="${page}"><rect x="${left + c * cw}" y="${y}" width="${cw - 1}" height="${ch}" fill="url(#pkv-tail)" class="pkv-cellline" stroke-width="0.5"/>` +
        `<rect x="${left + c * cw}" y="${y}" width="${(cw - 1) * frac}" height="${ch}" style="fill:${fill}"/>` +
        `<text x="${left + c * cw + cw / 2}" y="${y + 14}" class="pkv-cell">${page}</text>` +
        `<title>${esc(row.rid)} logical page ${c} → physical page ${page} (${inPage} of ${pageSize} tokens)</title></g>`;
    });
  });
  if (!rows.length) body += `<text x="${left}" y="32" class="pkv-note">no request holds pages at this step</text>`;
  return svg(left + cols * cw + 4, H, body, "page table");
}

// Physical pool: one cell per page, coloured by owner; the unused tail of a partial page
// is hatched; page 0 is never handed out (SGLang's padding page).
function poolView(rows, numPages, pageSize, W) {
  const owner = new Map();
  for (const row of rows) {
    row.pages.forEach((page, c) => owner.set(page, { rid: row.rid,
      fill: c < row.pages.length - 1 ? pageSize : row.seqLen - c * pageSize }));
  }
  const cw = 40, ch = 26, perRow = clamp(Math.floor(W / cw), 8, 16), total = numPages + 1;
  let body = "";
  for (let page = 0; page < total; page++) {
    const x = (page % perRow) * cw, y = Math.floor(page / perRow) * ch, o = owner.get(page);
    if (page === 0) {
      body += `<g data-page="0" data-owner="reserved"><rect x="${x}" y="${y}" width="${cw - 2}" height="${ch - 2}" fill="url(#pkv-hatch)" class="pkv-cellline" stroke-width="0.5"/><text x="${x + cw / 2}" y="${y + 16}" class="pkv-cell">0</text><title>page 0: never handed out (padding)</title></g>`;
    } else if (o) {
      const frac = clamp(o.fill / pageSize, 0, 1);
      body += `<g data-page="${page}" data-owner="${esc(o.rid)}"><rect x="${x}" y="${y}" width="${cw - 2}" height="${ch - 2}" fill="url(#pkv-tail)" class="pkv-outline" stroke-width="0.5"/>` +
        `<rect x="${x}" y="${y}" width="${(cw - 2) * frac}" height="${ch - 2}" style="fill:${colourOf(o.rid)}"/>` +
        `<text x="${x + cw / 2}" y="${y + 16}" class="pkv-cell">${page}</text><title>page ${page}: ${esc(o.rid)}, ${o.fill} of ${pageSize} tokens written</title></g>`;
    } else {
      body += `<g data-page="${page}" data-owner=""><rect x="${x}" y="${y}" width="${cw - 2}" height="${ch - 2}" class="pkv-freecell" stroke-dasharray="3 2"/><text x="${x + cw / 2}" y="${y + 16}" class="pkv-free">${page}</text><title>page ${page}: free</title></g>`;
    }
  }
  return svg(perRow * cw, Math.ceil(total / perRow) * ch, body, "physical pool");
}

// Timeline of the card-scale run: counts on the left axis, fractions on the right.
const TL = { L: 40, T: 10, B: 140, H: 178 };
const tlRight = (W) => W - 40;
function timelineView(card, W) {
  const { L, T, B, H } = TL, R = tlRight(W);
  const xs = card.t, xmax = Math.max(1, xs[xs.length - 1]);
  const X = (s) => L + ((R - L) * s) / xmax;
  const cmax = Math.max(1, ...card.running, ...card.waiting);
  const Yc = (v) => B - ((B - T) * v) / cmax, Yf = (v) => B - (B - T) * Math.min(1, v);
  const line = (vals, Y) => vals.map((v, k) => `${X(xs[k]).toFixed(1)},${Y(v).toFixed(1)}`).join(" ");
  const tokens = card.meta.max_total_num_tokens;
  let body = `<rect x="${L}" y="${T}" width="${R - L}" height="${B - T}" class="pkv-plotbg"/>` +
    `<polygon points="${X(0)},${B} ${line(card.used.map((u) => u / tokens), Yf)} ${X(xmax)},${B}" fill="#0072B2" opacity="0.22"/>` +
    `<polyline points="${line(card.used.map((u, k) => (u + card.reserved[k]) / tokens), Yf)}" fill="none" stroke="#E69F00" stroke-width="1.2"/>` +
    `<polyline points="${line(card.ratio, Yf)}" fill="none" stroke="#CC79A7" stroke-width="1.5" stroke-dasharray="2 2"/>` +
    `<polyline points="${line(card.running, Yc)}" fill="none" stroke="#0072B2" stroke-width="1.8"/>` +
    `<polyline points="${line(card.waiting, Yc)}" fill="none" stroke="#D55E00" stroke-width="1.5" stroke-dasharray="5 3"/>` +
    `<text x="${L - 4}" y="${T + 8}" class="pkv-tick pkv-end">${cmax}</text><text x="${L - 4}" y="${B}" class="pkv-tick pkv-end">0</text>` +
    `<text x="${R + 4}" y="${T + 8}" class="pkv-tick pkv-start">1.0</text><text x="${R + 4}" y="${B}" class="pkv-tick pkv-start">0</text>` +
    `<text x="${L}" y="${B + 13}" class="pkv-tick pkv-start">step 0</text><text x="${R}" y="${B + 13}" class="pkv-tick pkv-end">step ${num(xmax)}</text>`;
  EVENT_MARKS.forEach(([kind, label, colour], r) => {
    const y = B + 22 + r * 7;
    for (const [k, count] of card.events[kind] || []) {
      body += `<rect x="${X(xs[k]) - 1}" y="${y - 2}" width="2" height="${Math.min(6, 2 + count)}" fill="${colour}"><title>${label} × ${count}</title></rect>`;
    }
  });
  body += `<line data-role="cursor" x1="${X(xs[0])}" x2="${X(xs[0])}" y1="${T}" y2="${B + 34}" class="pkv-cursor" stroke-width="1.5"/>`;
  const legend = legendHtml([["running (left axis)", "#0072B2"], ["waiting (left axis, dashed)", "#D55E00", true],
    ["tokens in use / pool (shaded)", "#9fc3de"], ["in use + reserved / pool", "#E69F00"],
    ["new_token_ratio (dotted)", "#CC79A7", true], ...EVENT_MARKS.map(([, label, colour]) => [`${label} events`, colour])]);
  return svg(W, H, body, "timeline") + legend;
}

// ---------- the viewer: controls, playback, linking ----------

// Each slider reads out its value in its unit (aria-valuetext), not its position.
const UNITS = { mem_fraction_static: (v) => Number(v).toFixed(2), page_size: (v) => `${v} ${v === 1 ? "token" : "tokens"}` };

function controlsHtml(config) {
  const { axes, controls } = config;
  const select = (role) => `<select data-role="${role}">${axes[role].map(([v, l]) => `<option value="${esc(v)}">${esc(l)}</option>`).join("")}</select>`;
  const range = (role) => `<input type="range" data-role="${role}" min="0" max="${axes[role].length - 1}" step="1"><output data-role="${role}-value"></output>`;
  const labels = { mem_fraction_static: "mem_fraction_static", page_size: "page size", model: "model", gpu: "GPU", workload: "workload" };
  return controls.filter((c) => labels[c]).map((c) =>
    `<label class="pkv-control">${labels[c]} ${axes[c].length && Array.isArray(axes[c][0]) ? select(c) : range(c)}</label>`).join("");
}

function layoutHtml(config) {
  const has = (v) => config.views.includes(v);
  return `<div class="pkv-title">${esc(config.title)}</div>
<div class="pkv-controls">${controlsHtml(config)}</div>
<div class="pkv-problem" data-role="problem" role="status" aria-live="polite"></div>
<div class="pkv-player">
<button type="button" data-role="play">▶ play</button>
<button type="button" data-role="back" aria-label="previous sample">◂</button>
<button type="button" data-role="step" aria-label="next sample">▸</button>
<label class="pkv-scrub">step <input type="range" data-role="scrub" min="0" max="0" step="1"></label>
<button type="button" data-role="prev-retract" aria-label="previous retraction">◂ retraction</button>
<button type="button" data-role="next-retract" aria-label="next retraction">retraction ▸</button>
<span class="pkv-readout" data-role="step-label" aria-live="polite"></span>
<span class="pkv-status" data-role="status"></span></div>
${has("hbm") ? `<section class="pkv-panel" data-part="card"><h4>HBM at card scale: <span data-role="card-name"></span> <small>(GiB = 2<sup>30</sup> bytes)</small></h4><div class="pkv-scroll" data-view="hbm"></div></section>` : ""}
${has("timeline") ? `<section class="pkv-panel" data-part="card"><h4>Timeline at card scale <small data-role="card-step"></small></h4><div class="pkv-scroll" data-view="timeline"></div></section>` : ""}
${has("pagetable") || has("pool") ? `<section class="pkv-panel" data-part="pool"><h4>Teaching pool: <span data-role="pool-size"></span> <small>(a toy card with the same mem_fraction_static, small enough to read page by page)</small></h4>
<div class="pkv-caption" data-role="pool-caption"></div>
<div class="pkv-teach">${has("pagetable") ? `<div><h5>Page table (req_to_token): rows = requests, columns = logical pages, cells = physical page ids</h5><div class="pkv-scroll" data-view="pagetable"></div></div>` : ""}
${has("pool") ? `<div><h5>Physical pool: pages coloured by owner; hatched = unused tail of a partial page; dashed = free</h5><div class="pkv-scroll" data-view="pool"></div></div>` : ""}</div></section>` : ""}
${config.caption ? `<p class="pkv-figcaption"><strong>Figure:</strong> ${esc(config.caption)}</p>` : ""}`;
}

// `source.request(settings)` returns a scene or null (live: the answer arrives later via
// `viewer.show(scene)`).
export function createViewer(el, config, source) {
  el.classList.add("pkv-root");
  el.innerHTML = layoutHtml(config);
  const q = (sel) => el.querySelector(sel);
  const views = Object.fromEntries([...el.querySelectorAll("[data-view]")].map((n) => [n.dataset.view, n]));
  const settings = { ...config.settings };
  const usesCard = Boolean(views.hbm || views.timeline);
  const usesPool = Boolean(views.pagetable || views.pool);
  let card = null, pool = null, index = 0, timer = null, opened = false, width = 0;
  const cache = new Map();

  const labelOf = (role, v) => (config.axes[role].find(([x]) => x === v) || [v, v])[1];
  // The run the step control walks: the teaching run where the chapter shows one and it ran.
  const master = () => (usesPool && pool ? pool : card);
  const at = (run, i) => (run === master() ? i : Math.round((i * (run.samples - 1)) / Math.max(1, master().samples - 1)));
  const drawWidth = (px = el.clientWidth) => clamp(Math.floor(px) - 26, 280, 720);
  const retractions = (run) => [...(run?.events.retract?.keys() || [])].sort((a, b) => a - b);

  function readout() {
    const m = master();
    if (!m) return "";
    const both = usesPool && pool && card;
    return both
      ? `step ${m.t[index]} / ${m.n - 1} of the teaching run · ${Math.round((100 * m.t[index]) / Math.max(1, m.n - 1))}% through each run (the card run has its own steps)`
      : `step ${num(m.t[index])} / ${num(m.n - 1)}${m === card ? ` of the card run (sample ${index + 1} of ${m.samples})` : ""}`;
  }

  function drawStep() {
    const i = index;
    if (card) {
      const ci = at(card, i);
      if (views.hbm) views.hbm.innerHTML = hbmView(card, ci, width);
      if (views.timeline) {
        const cursor = views.timeline.querySelector("[data-role=cursor]");
        const x = TL.L + ((tlRight(width) - TL.L) * card.t[ci]) / Math.max(1, card.t[card.t.length - 1]);
        cursor.setAttribute("x1", x);
        cursor.setAttribute("x2", x);
      }
      const step = q("[data-role=card-step]");
      if (step) step.textContent = `· card step ${num(card.t[ci])} of ${num(card.n - 1)}`;
    }
    if (pool) {
      const pi = at(pool, i);
      const rows = tableAt(pool, pi);
      if (views.pagetable) views.pagetable.innerHTML = pageTableView(rows, pool.meta.page_size);
      if (views.pool) views.pool.innerHTML = poolView(rows, pool.meta.num_pages, pool.meta.page_size, width);
      const happened = EVENT_MARKS.map(([kind, label]) => [label, pool.events[kind]?.get(pi)]).filter(([, n]) => n);
      const held = rows.reduce((a, r) => a + r.pages.length, 0);
      q("[data-role=pool-caption]").textContent = `teaching pool step ${pool.t[pi]} of ${pool.n - 1} · ${held} of ${pool.meta.num_pages} pages held by ${rows.length} requests` +
        (happened.length ? ` · this step: ${happened.map(([l, n]) => `${l} × ${n}`).join(", ")}` : "");
    }
    const m = master(), scrub = q("[data-role=scrub]"), text = readout();
    scrub.value = i;
    scrub.setAttribute("aria-valuetext", text.split(" · ")[0]);
    q("[data-role=step-label]").textContent = text;
    const marks = retractions(m);
    q("[data-role=prev-retract]").disabled = !marks.some((k) => k < i);
    q("[data-role=next-retract]").disabled = !marks.some((k) => k > i);
    q("[data-role=back]").disabled = !m || i <= 0;
    q("[data-role=step]").disabled = !m || i >= m.samples - 1;
  }

  // Which runs cannot happen at these settings: their reason, a fix, and their views greyed
  // out and inert (no stale picture of the previous setting stays readable as if current).
  function showProblems(scene) {
    const failed = [["card", usesCard], ["pool", usesPool]].filter(([p, used]) => used && scene[p]?.error);
    const both = usesCard && usesPool;
    const box = q("[data-role=problem]");
    const text = failed.map(([p]) => `<p><strong>${both ? (p === "card" ? "At card scale" : "In the teaching pool") + ", this" : "This"} setting cannot run.</strong> ` +
      `${esc(scene[p].error)} ${esc(scene[p].fix || "")}</p>`).join("");
    if (box.innerHTML !== text) box.innerHTML = text;
    el.querySelectorAll("[data-part]").forEach((panel) => {
      const off = failed.some(([p]) => p === panel.dataset.part);
      if (!off && !panel.inert) return;  // was running, still runs: nothing to change
      panel.classList.toggle("pkv-off", off);
      panel.inert = off;
      panel.setAttribute("aria-hidden", String(off));
      if (!off) return;
      // Nothing of the previous setting's run stays drawn: each view becomes an empty box
      // of the same height (the page does not jump), its step line goes.
      panel.querySelectorAll("[data-view]").forEach((view) => {
        view.innerHTML = `<div class="pkv-blank" style="height:${Math.max(40, view.offsetHeight)}px"></div>`;
      });
      panel.querySelectorAll("[data-role=card-step], [data-role=pool-caption]").forEach((n) => { n.textContent = ""; });
    });
    const name = q("[data-role=card-name]");
    if (name && scene.card?.error) name.textContent = `${labelOf("model", settings.model)} on ${labelOf("gpu", settings.gpu)} · mem_fraction_static ${Number(settings.mem_fraction_static).toFixed(2)} · cannot run`;
    const size = q("[data-role=pool-size]");
    if (size && scene.pool?.error) size.textContent = `mem_fraction_static ${Number(settings.mem_fraction_static).toFixed(2)}, pages of ${settings.page_size} tokens · cannot run`;
    return failed.length;
  }

  function show(scene) {
    const missing = [["card", usesCard], ["pool", usesPool]].some(([p, used]) => used && !scene[p]);
    q("[data-role=status]").textContent = missing ? "this combination was not precomputed" : "";
    if (missing) return;
    const before = master(), frac = before ? index / Math.max(1, before.samples - 1) : 0;
    showProblems(scene);
    const lastCard = card;
    card = scene.card && !scene.card.error ? decodeRun(scene.card) : null;
    pool = scene.pool && !scene.pool.error ? decodeRun(scene.pool) : null;
    const m = master();
    el.classList.toggle("pkv-nothing", !m);
    el.querySelectorAll(".pkv-player button, .pkv-player input").forEach((c) => { c.disabled = !m; });
    if (!m) {
      pause();
      q("[data-role=step-label]").textContent = "";
      return;
    }
    q("[data-role=scrub]").max = m.samples - 1;
    // First view: an interesting step (widgets/encoding.py opening_sample); later settings
    // keep the same point of the run, so two settings compare at the same moment.
    index = opened ? clamp(Math.round(frac * (m.samples - 1)), 0, m.samples - 1) : m.open;
    opened = true;
    if (!width) width = drawWidth();  // later widths come from the ResizeObserver, no forced layout
    if (card) {
      const name = q("[data-role=card-name]");
      if (name) name.textContent = `${labelOf("model", settings.model)} on ${labelOf("gpu", settings.gpu)} · mem_fraction_static ${card.meta.mem_fraction_static} · ${num(card.meta.max_total_num_tokens)}-token pool in pages of ${card.meta.page_size}`;
      // A page-size move leaves the card run as it was: its timeline stays.
      if (views.timeline && (card !== lastCard || !views.timeline.querySelector("[data-role=cursor]"))) {
        views.timeline.innerHTML = timelineView(card, width);
      }
    }
    if (pool) {
      q("[data-role=pool-size]").textContent = `${pool.meta.num_pages} pages × ${pool.meta.page_size} ${pool.meta.page_size === 1 ? "token" : "tokens"} = ${pool.meta.max_total_num_tokens} tokens`;
    }
    drawStep();
  }

  function syncControls() {
    for (const [role, values] of Object.entries(config.axes)) {
      const input = q(`[data-role=${role}]`);
      if (!input) continue;
      const k = values.findIndex((v) => String(Array.isArray(v) ? v[0] : v) === String(settings[role]));
      if (input.tagName === "SELECT") {
        input.value = values[k][0];
        continue;
      }
      const text = UNITS[role] ? UNITS[role](values[k]) : String(values[k]);
      input.value = k;
      input.setAttribute("aria-valuetext", text);
      q(`[data-role=${role}-value]`).textContent = text;
    }
  }

  function request() {
    syncControls();
    const key = JSON.stringify(settings);
    const scene = cache.get(key) || source.request({ ...settings });
    if (scene) {
      cache.set(key, scene);
      show(scene);
    } else {
      q("[data-role=status]").textContent = "re-simulating…";
    }
  }

  function setIndex(i) {
    const m = master();
    if (!m) return;
    index = clamp(i, 0, m.samples - 1);
    drawStep();
  }

  const readoutLive = (on) => q("[data-role=step-label]").setAttribute("aria-live", on ? "polite" : "off");

  function pause() {
    clearInterval(timer);
    timer = null;
    q("[data-role=play]").textContent = "▶ play";
    readoutLive(true);
  }

  function play() {
    if (timer) return pause();
    if (master() && index >= master().samples - 1) setIndex(0);
    q("[data-role=play]").textContent = "‖ pause";
    readoutLive(false);  // a readout every 120 ms would drown a screen reader
    timer = setInterval(() => (index >= master().samples - 1 ? pause() : setIndex(index + 1)), 120);
  }

  function jump(direction) {
    pause();
    const marks = retractions(master());
    const k = direction > 0 ? marks.find((s) => s > index) : marks.reverse().find((s) => s < index);
    if (k !== undefined) setIndex(k);
  }

  q("[data-role=play]").addEventListener("click", play);
  q("[data-role=step]").addEventListener("click", () => { pause(); setIndex(index + 1); });
  q("[data-role=back]").addEventListener("click", () => { pause(); setIndex(index - 1); });
  q("[data-role=next-retract]").addEventListener("click", () => jump(1));
  q("[data-role=prev-retract]").addEventListener("click", () => jump(-1));
  q("[data-role=scrub]").addEventListener("input", (e) => { pause(); setIndex(Number(e.target.value)); });
  for (const [role, values] of Object.entries(config.axes)) {
    const input = q(`[data-role=${role}]`);
    if (!input) continue;
    input.addEventListener("input", () => {
      settings[role] = input.tagName === "SELECT" ? values.find(([v]) => String(v) === input.value)[0] : values[Number(input.value)];
      request();
    });
  }
  if (views.timeline) {
    views.timeline.addEventListener("click", (e) => {
      if (!card) return;
      const box = views.timeline.firstElementChild.getBoundingClientRect();
      const step = (((e.clientX - box.left) / box.width) * width - TL.L) / (tlRight(width) - TL.L) * card.t[card.t.length - 1];
      const ci = Math.max(0, card.t.findIndex((s) => s >= step));
      setIndex(master() === card ? ci : Math.round((ci * (master().samples - 1)) / Math.max(1, card.samples - 1)));
    });
  }
  // The drawings follow the panel's width (a phone gets narrower bars, not smaller text).
  const resized = new ResizeObserver(([entry]) => {
    const next = drawWidth(entry.borderBoxSize?.[0]?.inlineSize ?? el.clientWidth);
    if (!master() || next === width) return;
    width = next;
    if (card && views.timeline) views.timeline.innerHTML = timelineView(card, width);
    drawStep();
  });
  resized.observe(el);
  // Settings changed elsewhere (another view of the same live widget): adopt them.
  function setSettings(next) {
    Object.assign(settings, next);
    syncControls();
  }

  request();
  return { show, setSettings, pause, destroy: () => { pause(); resized.disconnect(); } };
}

// ---------- entry points ----------

const sceneKeys = (s) => ({
  card: [s.model, s.gpu, s.workload, Number(s.mem_fraction_static).toFixed(2)].join("|"),
  pool: [s.workload, Number(s.mem_fraction_static).toFixed(2), s.page_size].join("|"),
});

// The static grid: JSON, gzip, base64 (widgets/static_page.py pack); the browser inflates it.
async function readPayload(script) {
  const bytes = Uint8Array.from(atob(script.textContent.trim()), (c) => c.charCodeAt(0));
  const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"));
  return JSON.parse(await new Response(stream).text());
}

export async function mountStatic(el) {
  if (el.dataset.mounted) return;
  el.dataset.mounted = "1";
  const { config, grid } = await readPayload(el.querySelector("script[type='application/gzip']"));
  createViewer(el.querySelector(".pkv-mount"), config, {
    request: (s) => {
      const k = sceneKeys(s);
      return { card: grid.card?.[k.card] || null, pool: grid.pool?.[k.pool] || null };
    },
  });
}

export function mountAll(root = document) {
  return Promise.all([...root.querySelectorAll(".pkv-static")].map(mountStatic));
}

// anywidget: traits `config` and `scene` come from Python; `settings` goes back. Settings
// equal to the model's bring no `change:scene` (nothing changes in Python), so the current
// scene is shown instead: the first render, and a view that another view has moved.
function render({ model, el }) {
  const same = (a, b) => Boolean(b) && Object.keys(a).every((k) => a[k] === b[k]);
  const viewer = createViewer(el, model.get("config"), {
    request: (s) => {
      if (same(s, model.get("settings"))) queueMicrotask(() => onScene());
      else {
        model.set("settings", s);
        model.save_changes();
      }
      return null;
    },
  });
  const onScene = () => viewer.show(model.get("scene"));
  const onSettings = () => viewer.setSettings(model.get("settings"));
  model.on("change:scene", onScene);
  model.on("change:settings", onSettings);
  return () => {
    model.off("change:scene", onScene);
    model.off("change:settings", onSettings);
    viewer.destroy();
  };
}

export default { render };

if (typeof document !== "undefined") {
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", () => mountAll());
  else mountAll();
}
