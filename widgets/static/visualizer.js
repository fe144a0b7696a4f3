// pagedkv memory visualizer: plays back precomputed scheduler traces; it never simulates.
//
// Data flow. Python (pagedkv_widgets) runs pagedkv.managers.simulate twice per setting
// (the real card, and a small teaching pool that records page tables), encodes both traces
// (widgets/encoding.py) and hands them here as a "scene" {card, pool}:
//   - live (Jupyter, anywidget): `render({model, el})`. The sliders write the `settings`
//     trait; Python re-simulates and sets the `scene` trait, which redraws.
//   - static (the built book): this file comes inline as a module right after the
//     <div class="pkv-static"> (widgets/static_page.py); `mountAll` finds each such div and
//     its <script type="application/json"> holding a grid of scenes keyed by settings; the
//     sliders pick a scene from the grid.
// Both paths share `createViewer`, which draws four linked views from a decoded scene:
// the HBM bar (card scale), the page table and pool map (teaching pool), the timeline.

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
  ["kv_free", "KV free", "#ffffff"],
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

function decodeTrace(enc) {
  const cols = {};
  for (const key of ["t", "time", "ratio", "used", "reserved", "pages", "running", "waiting"]) {
    cols[key] = undelta(enc[key]);
  }
  return { meta: enc.meta, hbm: enc.hbm, n: enc.n, kind: enc.kind, ...cols,
    ratio: cols.ratio.map((v) => v / 1000), events: decodeEvents(enc.ev),
    lifetimes: decodeLifetimes(enc.pt), samples: cols.t.length };
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
    `<rect width="4" height="4" fill="#ffffff"/><line x1="0" y1="0" x2="0" y2="4" stroke="#bbbbbb" stroke-width="1.5"/></pattern></defs>` +
    `${body}</svg>`;
}

const HATCH_CSS = "repeating-linear-gradient(45deg,#e4e4e4 0 3px,#a8a8a8 3px 5px)";

// An HTML legend: [[label, css background, dashed?], ...].
function legendHtml(items) {
  return `<div class="pkv-legend-row">${items.map(([label, background, dashed]) =>
    `<span class="pkv-key"><i class="${dashed ? "pkv-dash" : ""}" style="background:${background};color:${background}"></i>${esc(label)}</span>`).join("")}</div>`;
}

// ---------- the four views (pure: data in, SVG/HTML text out) ----------

// HBM bar at step i of the card-scale run; segments sum to the card (widgets/hbm.py).
function hbmView(card, i) {
  const { hbm, meta } = card;
  const used = Math.min(card.used[i] * meta.cell_size, hbm.pool);
  const reserved = Math.min(card.reserved[i] * meta.cell_size, hbm.pool - used);
  const bytes = { weights: hbm.weights, other: hbm.other, kv_used: used, kv_reserved: reserved,
    kv_free: hbm.pool - used - reserved };
  const W = 720, x0 = 10, barW = 700, scale = barW / hbm.card;
  let x = x0, body = "";
  HBM_SEGMENTS.forEach(([key, label, fill]) => {
    const w = bytes[key] * scale;
    body += `<rect data-segment="${key}" data-bytes="${bytes[key]}" x="${x}" y="22" width="${w}" height="34" fill="${fill}" stroke="#333" stroke-width="0.5"><title>${esc(label)}: ${gib(bytes[key])}</title></rect>`;
    if (w > 44) body += `<text x="${x + w / 2}" y="44" class="pkv-barlabel ${key === "kv_used" || key === "weights" ? "pkv-onDark" : ""}">${gib(bytes[key])}</text>`;
    x += w;
  });
  const poolStart = x0 + (hbm.weights + hbm.other) * scale;
  body += `<path d="M${poolStart} 18 v-6 h${hbm.pool * scale} v6" fill="none" stroke="#333"/>` +
    `<text x="${poolStart + (hbm.pool * scale) / 2}" y="10" class="pkv-axis">KV pool · ${gib(hbm.pool)} · ${meta.max_total_num_tokens.toLocaleString("en")} tokens</text>`;
  for (let g = 0; g * GIB <= hbm.card; g += hbm.card > 64 * GIB ? 20 : 10) {
    body += `<text x="${x0 + g * GIB * scale}" y="70" class="pkv-tick">${g}</text>`;
  }
  const legend = legendHtml(HBM_SEGMENTS.map(([key, label, fill]) =>
    [`${label} · ${gib(bytes[key])}`, fill.startsWith("url") ? HATCH_CSS : fill]));
  return svg(W, 74, body, "HBM bar") + legend;
}

// Page table: rows = requests, columns = logical pages, cell text = physical page id.
function pageTableView(rows, pageSize) {
  const cols = Math.max(8, ...rows.map((r) => r.pages.length));
  const cw = Math.min(30, 640 / cols), ch = 18, left = 46, H = Math.max(1, rows.length) * (ch + 2) + 20;
  let body = "";
  for (let c = 0; c < cols; c += cols > 24 ? 5 : 1) body += `<text x="${left + c * cw + cw / 2}" y="10" class="pkv-tick">${c}</text>`;
  rows.forEach((row, r) => {
    const y = 14 + r * (ch + 2), fill = colourOf(row.rid);
    body += `<text x="${left - 4}" y="${y + 13}" class="pkv-rowlabel">req ${esc(row.rid)}</text>`;
    row.pages.forEach((page, c) => {
      const inPage = c < row.pages.length - 1 ? pageSize : row.seqLen - c * pageSize;
      const frac = Math.max(0, Math.min(1, inPage / pageSize));
      body += `<g data-page="${page}"><rect x="${left + c * cw}" y="${y}" width="${cw - 1}" height="${ch}" fill="url(#pkv-tail)" stroke="#666" stroke-width="0.5"/>` +
        `<rect x="${left + c * cw}" y="${y}" width="${(cw - 1) * frac}" height="${ch}" fill="${fill}"/>` +
        (cw >= 14 ? `<text x="${left + c * cw + cw / 2}" y="${y + 13}" class="pkv-cell">${page}</text>` : "") +
        `<title>${esc(row.rid)} logical page ${c} → physical page ${page} (${inPage} of ${pageSize} tokens)</title></g>`;
    });
  });
  if (!rows.length) body += `<text x="${left}" y="28" class="pkv-legend">no request holds pages at this step</text>`;
  return svg(left + cols * cw + 4, H, body, "page table");
}

// Physical pool: one cell per page, coloured by owner; the unused tail of a partial page
// is hatched; page 0 is never handed out (SGLang's padding page).
function poolView(rows, numPages, pageSize) {
  const owner = new Map();
  for (const row of rows) {
    row.pages.forEach((page, c) => owner.set(page, { rid: row.rid,
      fill: c < row.pages.length - 1 ? pageSize : row.seqLen - c * pageSize }));
  }
  const perRow = 16, cw = 40, ch = 26, total = numPages + 1;
  let body = "";
  for (let page = 0; page < total; page++) {
    const x = (page % perRow) * cw, y = Math.floor(page / perRow) * ch, o = owner.get(page);
    if (page === 0) {
      body += `<g data-page="0" data-owner="reserved"><rect x="${x}" y="${y}" width="${cw - 2}" height="${ch - 2}" fill="url(#pkv-hatch)" stroke="#666" stroke-width="0.5"/><text x="${x + cw / 2}" y="${y + 16}" class="pkv-cell">0</text><title>page 0: never handed out (padding)</title></g>`;
    } else if (o) {
      const frac = Math.max(0, Math.min(1, o.fill / pageSize));
      body += `<g data-page="${page}" data-owner="${esc(o.rid)}"><rect x="${x}" y="${y}" width="${cw - 2}" height="${ch - 2}" fill="url(#pkv-tail)" stroke="#333" stroke-width="0.5"/>` +
        `<rect x="${x}" y="${y}" width="${(cw - 2) * frac}" height="${ch - 2}" fill="${colourOf(o.rid)}"/>` +
        `<text x="${x + cw / 2}" y="${y + 16}" class="pkv-cell">${page}</text><title>page ${page}: ${esc(o.rid)}, ${o.fill} of ${pageSize} tokens written</title></g>`;
    } else {
      body += `<g data-page="${page}" data-owner=""><rect x="${x}" y="${y}" width="${cw - 2}" height="${ch - 2}" fill="#fff" stroke="#999" stroke-dasharray="3 2"/><text x="${x + cw / 2}" y="${y + 16}" class="pkv-cell pkv-free">${page}</text><title>page ${page}: free</title></g>`;
    }
  }
  return svg(perRow * cw, Math.ceil(total / perRow) * ch, body, "physical pool");
}

// Timeline of the card-scale run: counts on the left axis, fractions on the right.
function timelineView(card, i) {
  const W = 720, H = 178, L = 40, R = 680, T = 10, B = 140;
  const xs = card.t, xmax = Math.max(1, xs[xs.length - 1]);
  const X = (s) => L + ((R - L) * s) / xmax;
  const cmax = Math.max(1, ...card.running, ...card.waiting);
  const Yc = (v) => B - ((B - T) * v) / cmax, Yf = (v) => B - (B - T) * Math.min(1, v);
  const line = (vals, Y) => vals.map((v, k) => `${X(xs[k]).toFixed(1)},${Y(v).toFixed(1)}`).join(" ");
  const tokens = card.meta.max_total_num_tokens;
  let body = `<rect x="${L}" y="${T}" width="${R - L}" height="${B - T}" fill="#fafafa" stroke="#ccc"/>` +
    `<polygon points="${X(0)},${B} ${line(card.used.map((u) => u / tokens), Yf)} ${X(xmax)},${B}" fill="#0072B2" opacity="0.18"/>` +
    `<polyline points="${line(card.used.map((u, k) => (u + card.reserved[k]) / tokens), Yf)}" fill="none" stroke="#E69F00" stroke-width="1.2"/>` +
    `<polyline points="${line(card.ratio, Yf)}" fill="none" stroke="#CC79A7" stroke-width="1.5" stroke-dasharray="2 2"/>` +
    `<polyline points="${line(card.running, Yc)}" fill="none" stroke="#0072B2" stroke-width="1.8"/>` +
    `<polyline points="${line(card.waiting, Yc)}" fill="none" stroke="#D55E00" stroke-width="1.5" stroke-dasharray="5 3"/>` +
    `<text x="${L - 4}" y="${T + 8}" class="pkv-tick pkv-end">${cmax}</text><text x="${L - 4}" y="${B}" class="pkv-tick pkv-end">0</text>` +
    `<text x="${R + 4}" y="${T + 8}" class="pkv-tick pkv-start">1.0</text><text x="${R + 4}" y="${B}" class="pkv-tick pkv-start">0</text>` +
    `<text x="${L}" y="${B + 12}" class="pkv-tick pkv-start">step 0</text><text x="${R}" y="${B + 12}" class="pkv-tick pkv-end">step ${xmax}</text>`;
  EVENT_MARKS.forEach(([kind, label, colour], r) => {
    const y = B + 22 + r * 7;
    for (const [k, count] of card.events[kind] || []) {
      body += `<rect x="${X(xs[k]) - 1}" y="${y - 2}" width="2" height="${Math.min(6, 2 + count)}" fill="${colour}"><title>${label} × ${count}</title></rect>`;
    }
  });
  body += `<line data-role="cursor" x1="${X(xs[i])}" x2="${X(xs[i])}" y1="${T}" y2="${B + 34}" stroke="#000" stroke-width="1.5"/>`;
  const legend = legendHtml([["running (left axis)", "#0072B2"], ["waiting (left axis, dashed)", "#D55E00", true],
    ["tokens in use / pool (shaded)", "#9fc3de"], ["in use + reserved / pool", "#E69F00"],
    ["new_token_ratio (dotted)", "#CC79A7", true], ...EVENT_MARKS.map(([, label, colour]) => [`${label} events`, colour])]);
  return svg(W, H, body, "timeline") + legend;
}

// ---------- the viewer: controls, playback, linking ----------

function control(role, label, input) {
  return `<label class="pkv-control">${label}${input}<output data-role="${role}-value"></output></label>`;
}

function controlsHtml(config) {
  const { axes, controls } = config;
  const select = (role) => `<select data-role="${role}">${axes[role].map(([v, l]) => `<option value="${esc(v)}">${esc(l)}</option>`).join("")}</select>`;
  const range = (role) => `<input type="range" data-role="${role}" min="0" max="${axes[role].length - 1}" step="1">`;
  const parts = {
    mem_fraction_static: () => control("mem_fraction_static", "mem_fraction_static", range("mem_fraction_static")),
    page_size: () => control("page_size", "page size (tokens)", range("page_size")),
    model: () => control("model", "model", select("model")),
    gpu: () => control("gpu", "GPU", select("gpu")),
    workload: () => control("workload", "workload", select("workload")),
  };
  return controls.filter((c) => parts[c]).map((c) => parts[c]()).join("");
}

function layoutHtml(config) {
  const has = (v) => config.views.includes(v);
  return `<div class="pkv-title">${esc(config.title)}</div>
<div class="pkv-controls">${controlsHtml(config)}<span class="pkv-status" data-role="status"></span></div>
<div class="pkv-player"><button type="button" data-role="play">▶ play</button><button type="button" data-role="step">step ▸</button>
<input type="range" data-role="scrub" min="0" max="0" step="1"><span data-role="step-label"></span></div>
${has("hbm") ? `<section class="pkv-panel"><h4>HBM at card scale: <span data-role="card-name"></span> <small>(GiB = 2<sup>30</sup> bytes)</small></h4><div data-view="hbm"></div></section>` : ""}
${has("timeline") ? `<section class="pkv-panel"><h4>Timeline at card scale <small data-role="card-step"></small></h4><div data-view="timeline"></div></section>` : ""}
${has("pagetable") || has("pool") ? `<section class="pkv-panel"><h4>Teaching pool: <span data-role="pool-size"></span> <small>(a toy card with the same mem_fraction_static, small enough to read page by page)</small></h4>
<div class="pkv-caption" data-role="pool-caption"></div>
<div class="pkv-teach">${has("pagetable") ? `<div><h5>Page table (req_to_token): rows = requests, columns = logical pages, cells = physical page ids</h5><div data-view="pagetable"></div></div>` : ""}
${has("pool") ? `<div><h5>Physical pool: pages coloured by owner; hatched = unused tail of a partial page; dashed = free</h5><div data-view="pool"></div></div>` : ""}</div></section>` : ""}`;
}

// `source.request(settings)` returns a scene or null (live: the answer arrives later via
// `viewer.show(scene)`).
export function createViewer(el, config, source) {
  el.classList.add("pkv-root");
  el.innerHTML = layoutHtml(config);
  const q = (sel) => el.querySelector(sel);
  const views = Object.fromEntries([...el.querySelectorAll("[data-view]")].map((n) => [n.dataset.view, n]));
  const settings = { ...config.settings };
  const usesPool = Boolean(views.pagetable || views.pool);
  let card = null, pool = null, index = 0, timer = null;
  const cache = new Map();

  const labelOf = (role, v) => (config.axes[role].find(([x]) => x === v) || [v, v])[1];
  const master = () => (usesPool ? pool : card);
  const other = (run, i) => Math.round((i * (run.samples - 1)) / Math.max(1, master().samples - 1));

  function drawStep() {
    const i = index;
    if (card) {
      const ci = usesPool ? other(card, i) : i;
      if (views.hbm) views.hbm.innerHTML = hbmView(card, ci);
      if (views.timeline) {
        const cursor = views.timeline.querySelector("[data-role=cursor]");
        const x = 40 + (640 * card.t[ci]) / Math.max(1, card.t[card.t.length - 1]);
        cursor.setAttribute("x1", x);
        cursor.setAttribute("x2", x);
      }
      const step = q("[data-role=card-step]");
      if (step) step.textContent = `· card step ${card.t[ci]} of ${card.n - 1}`;
    }
    if (usesPool && pool) {
      const rows = tableAt(pool, i);
      if (views.pagetable) views.pagetable.innerHTML = pageTableView(rows, pool.meta.page_size);
      if (views.pool) views.pool.innerHTML = poolView(rows, pool.meta.num_pages, pool.meta.page_size);
      const happened = EVENT_MARKS.map(([kind, label]) => [label, pool.events[kind]?.get(i)]).filter(([, n]) => n);
      const held = rows.reduce((a, r) => a + r.pages.length, 0);
      q("[data-role=pool-caption]").textContent = `teaching pool step ${pool.t[i]} of ${pool.n - 1} · ${held} of ${pool.meta.num_pages} pages held by ${rows.length} requests` +
        (happened.length ? ` · this step: ${happened.map(([l, n]) => `${l} × ${n}`).join(", ")}` : "");
    }
    const m = master();
    q("[data-role=scrub]").value = i;
    // One scrubber, two runs of different lengths: it moves both through the same fraction
    // of their own run, and each view labels its own step.
    const both = usesPool && card;
    const pct = m ? Math.round((100 * m.t[i]) / Math.max(1, m.n - 1)) : 0;
    q("[data-role=step-label]").textContent = !m ? "" : both
      ? `step ${m.t[i]} / ${m.n - 1} of the teaching run · ${pct}% through each run (the card run has its own steps)`
      : `step ${m.t[i]} / ${m.n - 1}`;
  }

  function show(scene) {
    const errors = [scene.card, scene.pool].filter((run) => run?.error).map((run) => run.error);
    const m = usesPool ? scene.pool : scene.card;
    q("[data-role=status]").textContent = errors.join("; ");
    if (!m || m.error) {
      if (!m) q("[data-role=status]").textContent = "this combination was not precomputed";
      return;
    }
    card = scene.card && !scene.card.error ? decodeTrace(scene.card) : null;
    pool = scene.pool && !scene.pool.error ? decodeTrace(scene.pool) : null;
    const frac = q("[data-role=scrub]").max > 0 ? index / q("[data-role=scrub]").max : 0;
    const samples = master().samples;
    q("[data-role=scrub]").max = samples - 1;
    index = Math.min(samples - 1, Math.round(frac * (samples - 1)));
    if (card) {
      const name = q("[data-role=card-name]");
      if (name) name.textContent = `${labelOf("model", settings.model)} on ${labelOf("gpu", settings.gpu)} · mem_fraction_static ${card.meta.mem_fraction_static} · ${card.meta.max_total_num_tokens.toLocaleString("en")}-token pool in pages of ${card.meta.page_size}`;
      if (views.timeline) views.timeline.innerHTML = timelineView(card, 0);
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
      if (input.tagName === "SELECT") input.value = values[k][0];
      else input.value = k;
      q(`[data-role=${role}-value]`).textContent = Array.isArray(values[k]) ? "" : values[k];
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
    index = Math.max(0, Math.min(m.samples - 1, i));
    drawStep();
  }

  function pause() {
    clearInterval(timer);
    timer = null;
    q("[data-role=play]").textContent = "▶ play";
  }

  function play() {
    if (timer) return pause();
    if (master() && index >= master().samples - 1) setIndex(0);
    q("[data-role=play]").textContent = "‖ pause";
    timer = setInterval(() => (index >= master().samples - 1 ? pause() : setIndex(index + 1)), 120);
  }

  q("[data-role=play]").addEventListener("click", play);
  q("[data-role=step]").addEventListener("click", () => { pause(); setIndex(index + 1); });
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
      const box = views.timeline.firstElementChild.getBoundingClientRect();
      const step = ((e.clientX - box.left) / box.width * 720 - 40) / 640 * card.t[card.t.length - 1];
      const ci = card.t.findIndex((s) => s >= step);
      setIndex(usesPool ? Math.round((Math.max(0, ci) * (pool.samples - 1)) / Math.max(1, card.samples - 1)) : Math.max(0, ci));
    });
  }
  // Settings changed elsewhere (another view of the same live widget): adopt them.
  function setSettings(next) {
    Object.assign(settings, next);
    syncControls();
  }

  request();
  return { show, setSettings, pause, destroy: pause };
}

// ---------- entry points ----------

const sceneKeys = (s) => ({
  card: [s.model, s.gpu, s.workload, Number(s.mem_fraction_static).toFixed(2)].join("|"),
  pool: [s.workload, Number(s.mem_fraction_static).toFixed(2), s.page_size].join("|"),
});

export function mountStatic(el) {
  if (el.dataset.mounted) return;
  el.dataset.mounted = "1";
  const { config, grid } = JSON.parse(el.querySelector("script[type='application/json']").textContent);
  createViewer(el.querySelector(".pkv-mount"), config, {
    request: (s) => {
      const k = sceneKeys(s);
      return { card: grid.card?.[k.card] || null, pool: grid.pool?.[k.pool] || null };
    },
  });
}

export function mountAll(root = document) {
  root.querySelectorAll(".pkv-static").forEach(mountStatic);
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
