// pagedkv memory visualizer, part 2 of 4: helpers, colours, the HBM bar and the timeline
// (SVG text; pure: data in, markup out; W = drawing width in px).
//
// Colours that carry meaning (segments, owners, events) are the same in both themes; text
// and the panel follow the page's theme through CSS variables (visualizer.css). Numbers
// drawn on a coloured cell have a light halo, so they read on any owner colour.

const SVG = "http://www.w3.org/2000/svg";
const GIB = 2 ** 30;
const gib = (bytes) => `${(bytes / GIB).toFixed(1)} GiB`;
const esc = (s) => String(s).replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" })[c]);
const num = (n) => Number(n).toLocaleString("en");
const clamp = (v, lo, hi) => Math.max(lo, Math.min(hi, v));

// A request's colour: hues a golden angle apart, so requests admitted one after the other
// (the ones on screen together) sit far apart on the wheel, at three lightnesses.
const requestColour = (rid) => `hsl(${Math.round((rid * 137.508) % 360)} 70% ${[52, 66, 40][Math.floor(rid / 7) % 3]}%)`;
const OWNER_COLOURS = { [SHARED]: "#3f4f6b", [CACHED]: "#a7adb5" };
const OWNER_NAMES = { [SHARED]: "in the radix cache, locked by a running request (shared)",
  [CACHED]: "in the radix cache, evictable", [FREE]: "free" };
const HBM_SEGMENTS = [
  ["weights", "weights", "#6b6b6b"],
  ["other", "activations + CUDA graphs (1 − mem_fraction_static)", "url(#pkv-hatch)"],
  ["kv_used", "KV in use by running requests", "#0072B2"],
  ["kv_cached", "KV cached, evictable (radix cache)", OWNER_COLOURS[CACHED]],
  // Reserved is a count admission keeps back for running requests' future tokens, not pages:
  // the pool map draws those pages as free, the bar moves them out of "free".
  ["kv_reserved", "KV reserved by admission (free pages, held back)", "#E69F00"],
  ["kv_free", "KV free and not reserved", "var(--pkv-free)"],
];
// A sliding-window hybrid's SWA pool, after the full pool's segments (widgets/hbm.py).
const SWA_SEGMENTS = [
  ["kv_swa_used", "SWA KV held (sliding-window layers' pages not free)", "#009E73"],
  ["kv_swa_free", "SWA KV free", "var(--pkv-free)"],
];
// A linear-attention hybrid's state pool, after the KV pool's segments (widgets/hbm.py).
const STATE_SEGMENTS = [
  ["state_live", "state slots of running requests (one each)", "#009E73"],
  ["state_track", "their track slots (states being checkpointed)", "#56B4E9"],
  ["state_tree", "states the radix cache keeps", "#CC79A7"],
  ["state_free", "state slots free", "var(--pkv-free)"],
];
const EVENT_MARKS = [["admit", "admit", "#009E73"], ["finish", "finish", "#56B4E9"],
  ["retract", "retract", "#D55E00"], ["reprefill", "re-prefill", "#CC79A7"]];
const HATCH_CSS = "repeating-linear-gradient(45deg,#e4e4e4 0 3px,#a8a8a8 3px 5px)";

// The hatch pattern goes only into a drawing that uses it, under an id of its own (ids are
// the page's: two drawings, or two visualizers, must not share one).
let hatches = 0;
function svg(width, height, body, label) {
  let defs = "";
  if (body.includes("url(#pkv-hatch)")) {
    const id = `pkv-hatch-${++hatches}`;
    body = body.replaceAll("url(#pkv-hatch)", `url(#${id})`);
    defs = `<defs><pattern id="${id}" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)">` +
      `<rect width="6" height="6" fill="#e4e4e4"/><line x1="0" y1="0" x2="0" y2="6" stroke="#a8a8a8" stroke-width="2"/></pattern></defs>`;
  }
  return `<svg xmlns="${SVG}" viewBox="0 0 ${width} ${height}" width="${width}" height="${height}" role="img" aria-label="${esc(label)}">` +
    `${defs}${body}</svg>`;
}

// An HTML legend: [[label, css background, dashed?], ...].
function legendHtml(items) {
  return `<div class="pkv-legend-row">${items.map(([label, background, dashed]) =>
    `<span class="pkv-key">${background ? `<i class="${dashed ? "pkv-dash" : ""}" style="background:${background};color:${background}"></i>` : ""}${esc(label)}</span>`).join("")}</div>`;
}

// The HBM bar's bytes at step s (twin of widgets/hbm.py hbm_segments): what the pool holds
// first (requests' tokens, the radix cache's evictable pages), then admission's estimate,
// clipped to what is left.
function hbmBytes(run, s) {
  const { hbm, meta } = run, cell = meta.cell_size;
  const used = Math.min(run.used[s] * cell, hbm.pool);
  const cached = Math.min(run.evictable[s] * cell, hbm.pool - used);
  const reserved = Math.min(run.reserved[s] * cell, hbm.pool - used - cached);
  const bytes = { weights: hbm.weights, other: hbm.other, kv_used: used, kv_cached: cached,
    kv_reserved: reserved, kv_free: hbm.pool - used - cached - reserved };
  if (hbm.swa_pool !== undefined) {  // the SWA pool: its pages held, from the page record
    const held = Math.min((swaHeldAt(run, s) ?? 0) * meta.page_size * meta.swa_cell_size, hbm.swa_pool);
    Object.assign(bytes, { kv_swa_used: held, kv_swa_free: hbm.swa_pool - held });
  }
  if (hbm.state_pool !== undefined) {  // the state pool: its slots' parts, from the page record
    const c = slotsAt(run, s) ?? { live: 0, track: 0, tree: 0 };
    const held = { state_live: c.live * hbm.state_bytes, state_track: c.track * hbm.state_bytes, state_tree: c.tree * hbm.state_bytes };
    Object.assign(bytes, held, { state_free: hbm.state_pool - held.state_live - held.state_track - held.state_tree });
  }
  return bytes;
}

// A bracket over (above: up) or under a span of the bar, with its label.
function bracket(x, w, up, label, W) {
  const half = label.length * 3.2;  // about half the label's width at 11 px
  const tx = clamp(x + w / 2, half + 2, W - half - 2);
  return up ? `<path d="M${x} 20 v-6 h${w} v6" fill="none" class="pkv-outline"/><text x="${tx}" y="11" class="pkv-axis">${label}</text>`
    : `<path d="M${x} 62 v6 h${w} v-6" fill="none" class="pkv-outline"/><text x="${tx}" y="80" class="pkv-axis">${label}</text>`;
}

// HBM bar at step s; segments sum to the card (widgets/hbm.py). A sliding-window hybrid's
// bar has both pools, each under a bracket with its tokens: FULL above, SWA below.
function hbmView(run, s, W) {
  const { hbm, meta } = run, bytes = hbmBytes(run, s), swa = hbm.swa_pool !== undefined;
  const state = hbm.state_pool !== undefined, below = swa || state;
  const segments = [...HBM_SEGMENTS, ...(swa ? SWA_SEGMENTS : []), ...(state ? STATE_SEGMENTS : [])];
  const x0 = 10, barW = W - 20, scale = barW / hbm.card;
  let x = x0, body = "";
  segments.forEach(([key, label, fill]) => {
    const w = bytes[key] * scale;
    body += `<rect data-segment="${key}" data-bytes="${bytes[key]}" x="${x}" y="24" width="${w}" height="34" style="fill:${fill}" class="pkv-outline" stroke-width="0.5"><title>${esc(label)}: ${gib(bytes[key])}</title></rect>`;
    if (w > 60) body += `<text x="${x + w / 2}" y="46" class="pkv-barlabel">${gib(bytes[key])}</text>`;
    x += w;
  });
  const poolStart = x0 + (hbm.weights + hbm.other) * scale, poolW = hbm.pool * scale;
  body += bracket(poolStart, poolW, true, `${swa ? "FULL " : ""}KV pool · ${gib(hbm.pool)} · ${num(meta.max_total_num_tokens)} tokens`, W);
  if (swa) body += bracket(poolStart + poolW, hbm.swa_pool * scale, false, `SWA KV pool · ${gib(hbm.swa_pool)} · ${num(meta.swa_max_total_num_tokens)} tokens`, W);
  if (state) body += bracket(poolStart + poolW, hbm.state_pool * scale, false, `state pool · ${gib(hbm.state_pool)} · ${num(meta.mamba_slots)} slots`, W);
  const every = hbm.card > 64 * GIB ? (W < 480 ? 40 : 20) : 10, tickY = below ? 94 : 72;
  for (let g = 0; g * GIB <= hbm.card; g += every) {
    body += `<text x="${x0 + g * GIB * scale}" y="${tickY}" class="pkv-tick">${g}</text>`;
  }
  const legend = legendHtml(segments.map(([key, label, fill]) =>
    [`${label} · ${gib(bytes[key])}`, fill.startsWith("url") ? HATCH_CSS : fill]));
  return svg(W, below ? 98 : 76, body, `HBM bar at step ${s}`) + legend;
}

// A linear-attention hybrid's state slots over the run, stacked (running requests' state
// slots, their track slots, the radix cache's states; up to the most held at once), the
// step s marked, and the parts at s in the legend. Slots are not pages: counts, not a map.
function slotsView(run, s, W) {
  const ss = run.pages?.slots;
  if (!ss) return "";
  const L = 40, R = W - 40, T = 10, B = 110, n = run.n;
  const points = Math.max(2, Math.min(n, Math.ceil((R - L) / 2)));
  const at = Array.from({ length: points }, (_, k) => Math.round((k * (n - 1)) / (points - 1)));
  const parts = at.map((t) => slotsAt(run, t));
  let ymax = 1;
  for (let i = 0; i < ss.step.length; i++) ymax = Math.max(ymax, ss.live[i] + ss.track[i] + ss.tree[i]);
  const X = (t) => (L + ((R - L) * t) / Math.max(1, n - 1)).toFixed(1), Y = (v) => (B - ((B - T) * v) / ymax).toFixed(1);
  const area = (f) => `${L},${B} ${at.map((t, k) => `${X(t)},${Y(f(parts[k]))}`).join(" ")} ${R},${B}`;
  const [live, track, tree] = STATE_SEGMENTS;
  let body = `<rect x="${L}" y="${T}" width="${R - L}" height="${B - T}" class="pkv-plotbg"/>` +
    `<polygon data-slots="tree" points="${area((c) => c.live + c.track + c.tree)}" fill="${tree[2]}"/>` +
    `<polygon data-slots="track" points="${area((c) => c.live + c.track)}" fill="${track[2]}"/>` +
    `<polygon data-slots="live" points="${area((c) => c.live)}" fill="${live[2]}"/>` +
    `<text x="${L - 4}" y="${T + 8}" class="pkv-tick pkv-end">${num(ymax)}</text><text x="${L - 4}" y="${B}" class="pkv-tick pkv-end">0</text>` +
    `<text x="${L}" y="${B + 13}" class="pkv-tick pkv-start">step 0</text><text x="${R}" y="${B + 13}" class="pkv-tick pkv-end">step ${num(n - 1)}</text>` +
    `<line data-role="slots-cursor" x1="${X(s)}" x2="${X(s)}" y1="${T}" y2="${B}" class="pkv-cursor" stroke-width="1.5"/>`;
  const c = slotsAt(run, s);
  const legend = legendHtml([...STATE_SEGMENTS.map(([key, label, fill]) => [`${label} · ${num(c[key.slice(6)])}`, fill])]);
  return svg(W, B + 18, body, `state slots at step ${s}: ${c.live} of running requests, ${c.track} track, ${c.tree} in the radix cache, ${c.free} free of ${ss.slots}`) + legend;
}

// Timeline: counts on the left axis, fractions on the right. The frame (axes, legend, empty
// lines) is made once per width; a run only sets the lines' points and the event marks, so
// changing the setting parses no new markup. The run has every step; a line takes a point
// every other pixel (the step at its left edge), the marks every event, binned by pixel.
// Under the plot: the step labels (to B + 13), then one row of event marks per kind, 7 px apart.
const TL = { L: 40, T: 10, B: 140, H: 140 + 20 + 7 * 4 + 4 };
const tlRight = (W) => W - 40;
const tlX = (run, W, s) => TL.L + ((tlRight(W) - TL.L) * s) / Math.max(1, run.n - 1);
const TL_LINES = [["used", "polygon", 'fill="#0072B2" opacity="0.22"'],
  ["reserved", "polyline", 'fill="none" stroke="#E69F00" stroke-width="1.2"'],
  ["ratio", "polyline", 'fill="none" stroke="#CC79A7" stroke-width="1.5" stroke-dasharray="2 2"'],
  ["running", "polyline", 'fill="none" stroke="#0072B2" stroke-width="1.8"'],
  ["waiting", "polyline", 'fill="none" stroke="#D55E00" stroke-width="1.5" stroke-dasharray="5 3"']];

function timelineFrame(W) {
  const { L, T, B, H } = TL, R = tlRight(W);
  let body = `<rect x="${L}" y="${T}" width="${R - L}" height="${B - T}" class="pkv-plotbg"/>` +
    TL_LINES.map(([key, tag, style]) => `<${tag} data-line="${key}" ${style}/>`).join("") +
    `<text data-role="cmax" x="${L - 4}" y="${T + 8}" class="pkv-tick pkv-end"></text><text x="${L - 4}" y="${B}" class="pkv-tick pkv-end">0</text>` +
    `<text x="${R + 4}" y="${T + 8}" class="pkv-tick pkv-start">1.0</text><text x="${R + 4}" y="${B}" class="pkv-tick pkv-start">0</text>` +
    `<text x="${L}" y="${B + 13}" class="pkv-tick pkv-start">step 0</text><text data-role="last" x="${R}" y="${B + 13}" class="pkv-tick pkv-end"></text>`;
  body += EVENT_MARKS.map(([kind, , colour]) => `<path data-marks="${kind}" stroke="${colour}" stroke-width="2"/>`).join("");
  body += `<line data-role="cursor" x1="${L}" x2="${L}" y1="${T}" y2="${B + 20 + 7 * EVENT_MARKS.length}" class="pkv-cursor" stroke-width="1.5"/>`;
  const legend = legendHtml([["running (left axis)", "#0072B2"], ["waiting (left axis, dashed)", "#D55E00", true],
    ["tokens in use / pool (shaded)", "#9fc3de"], ["in use + reserved / pool", "#E69F00"],
    ["new_token_ratio (dotted)", "#CC79A7", true], ...EVENT_MARKS.map(([, label, colour]) => [`${label} events`, colour])]);
  return svg(W, H, body, "timeline") + legend;
}

function drawTimeline(view, run, W) {
  const { L, T, B } = TL, R = tlRight(W), n = run.n;
  const points = Math.max(2, Math.min(n, Math.ceil((R - L) / 2)));
  const at = Array.from({ length: points }, (_, k) => Math.round((k * (n - 1)) / (points - 1)));
  let cmax = 1;
  for (let s = 0; s < n; s++) cmax = Math.max(cmax, run.running[s], run.waiting[s]);
  const Yc = (v) => B - ((B - T) * v) / cmax, Yf = (v) => B - (B - T) * Math.min(1, v);
  const line = (f, Y) => at.map((s) => `${tlX(run, W, s).toFixed(1)},${Y(f(s)).toFixed(1)}`).join(" ");
  const tokens = run.meta.max_total_num_tokens;
  const series = {
    used: `${L},${B} ${line((s) => run.used[s] / tokens, Yf)} ${R},${B}`,
    reserved: line((s) => (run.used[s] + run.reserved[s]) / tokens, Yf),
    ratio: line((s) => run.ratio[s], Yf),
    running: line((s) => run.running[s], Yc),
    waiting: line((s) => run.waiting[s], Yc),
  };
  for (const [key, points] of Object.entries(series)) view.querySelector(`[data-line=${key}]`).setAttribute("points", points);
  view.querySelector("[data-role=cmax]").textContent = cmax;
  view.querySelector("[data-role=last]").textContent = `step ${num(n - 1)}`;
  EVENT_MARKS.forEach(([kind], r) => {
    const bins = new Map();
    for (const s of run.events[kind]?.steps || []) {
      const x = Math.round(tlX(run, W, s));
      bins.set(x, (bins.get(x) || 0) + 1);
    }
    const y = B + 20 + r * 7;
    view.querySelector(`[data-marks=${kind}]`).setAttribute("d",
      [...bins].map(([x, count]) => `M${x} ${y}v${Math.min(6, 2 + count)}`).join(""));
  });
}
