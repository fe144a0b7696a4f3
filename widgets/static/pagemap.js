// pagedkv memory visualizer, part 3 of 4: the page table and the pool map, on <canvas>.
//
// At card scale the pool has thousands of pages (5,323 for Qwen3-4B on an RTX 4090 at
// mem_fraction_static 0.80, tens of thousands on an H100), so these two views paint cells on
// a canvas instead of making an SVG element per page. Each view is a grid of cells in a
// scrolling box: the canvas is the size of the box (sticky in it) and paints only the cells
// in sight, so zooming in (buttons) makes the grid larger, not the canvas. Pointing at a cell,
// or moving to it with the arrow keys once the canvas has focus, reads it out below the view
// (page id, owner, tokens used).
//
// Each canvas keeps what it painted last in `canvas.pkvDrawn`, and its geometry in data
// attributes, so a test can compare the two views with each other and with the pixels.

const ZOOMS = [1, 2, 4, 8, 16];
const BOX_HEIGHT = 360;  // px of the scrolling box at most (a phone keeps the page short)
const PADDING_PAGE = "#555";

// The theme's colours the canvases paint with (visualizer.css), read once per redraw.
function themeColours(el) {
  const css = getComputedStyle(el), read = (name) => css.getPropertyValue(name).trim() || "#fff";
  return { bg: read("--pkv-bg"), text: read("--pkv-text"), ink: read("--pkv-ink"), halo: read("--pkv-halo"),
    free: read("--pkv-free"), freeLine: read("--pkv-free-line"), line: read("--pkv-line"), ahead: read("--pkv-ahead") };
}

// Slots allocated ahead (the overlap loop's batch in flight has not written them yet) are a
// solid bar in the theme's --pkv-ahead (near black on light, near white on dark) over the
// part of the cell they take, at least AHEAD_MIN_PX wide so one slot of a large page shows.
const AHEAD_MIN_PX = 2;
function aheadRect(x, w, from, to, p) {
  const x0 = x + (w * from) / p, x1 = Math.max(x + (w * to) / p, x0 + Math.min(w, AHEAD_MIN_PX));
  return [Math.min(x0, x + w - Math.min(w, AHEAD_MIN_PX)), x1];
}

function aheadText(n) {
  return n ? `; ${n} ${n === 1 ? "slot" : "slots"} of it allocated ahead (not written yet: the batch in flight writes ${n === 1 ? "it" : "them"})` : "";
}

// The unused part of a partly written page: hatched, in the free pages' colours.
const tails = new Map();
function tailPattern(ctx, colours) {
  const key = colours.free + colours.freeLine;
  if (!tails.has(key)) {
    const tile = document.createElement("canvas");
    tile.width = tile.height = 6;
    const t = tile.getContext("2d");
    t.fillStyle = colours.free;
    t.fillRect(0, 0, 6, 6);
    t.strokeStyle = colours.freeLine;
    t.lineWidth = 1.2;
    t.beginPath();
    t.moveTo(-1, 7);
    t.lineTo(7, -1);
    t.stroke();
    tails.set(key, tile);
  }
  return ctx.createPattern(tails.get(key), "repeat");
}

// Page ids are written in the cells once the widest id fits.
function fitsLabels(ctx, cw, largest) {
  ctx.font = "11px system-ui, sans-serif";
  return cw >= ctx.measureText(String(largest)).width + 8;
}

function labelCell(ctx, text, x, y, ink, halo) {
  ctx.strokeStyle = halo;
  ctx.strokeText(text, x, y);
  ctx.fillStyle = ink;
  ctx.fillText(text, x, y);
}

// Cells of 2-3 px (a pool of tens of thousands of pages) are written as pixels: a fill call
// per cell would take longer than a frame. A colour as one little-endian RGBA word:
const words = new Map();
let probe = null;
const requestWords = [];  // a request's colour as a word, made once each
function colourWord(colour) {
  if (!words.has(colour)) {
    probe ??= Object.assign(document.createElement("canvas"), { width: 1, height: 1 }).getContext("2d", { willReadFrequently: true });
    probe.clearRect(0, 0, 1, 1);
    probe.fillStyle = colour;
    probe.fillRect(0, 0, 1, 1);
    const [r, g, b, a] = probe.getImageData(0, 0, 1, 1).data;
    words.set(colour, ((a << 24) | (b << 16) | (g << 8) | r) >>> 0);
  }
  return words.get(colour);
}

// The pool map's pages straight into the canvas's pixels, cell by cell in page order, with no
// per-cell objects (tens of thousands of pages, every frame). g: {r0, r1, c0, c1, cols, total,
// cw, ch, owners, partial, p} as in poolMapSpec; v: the view in CSS px.
function paintPixels(ctx, v, g, colours) {
  const canvas = ctx.canvas, k = canvas.width / v.W, stride = canvas.width;
  if (canvas.pkvPixels?.width !== canvas.width || canvas.pkvPixels.height !== canvas.height) {
    canvas.pkvPixels = ctx.createImageData(canvas.width, canvas.height);  // kept: no megabyte per frame
  }
  const img = canvas.pkvPixels, px = new Uint32Array(img.data.buffer);
  px.fill(colourWord(colours.bg));
  const free = colourWord(colours.free), padding = colourWord(PADDING_PAGE);
  const special = new Map([[FREE, free], [SHARED, colourWord(OWNER_COLOURS[SHARED])], [CACHED, colourWord(OWNER_COLOURS[CACHED])]]);
  const { r0, r1, c0, c1, cols, total, cw, ch, owners, partial, ahead, p } = g;
  const aheadWord = colourWord(colours.ahead);
  // Column edges in device pixels, once per frame.
  const xs = new Int32Array(c1 - c0 + 1);
  for (let c = c0; c <= c1; c++) xs[c - c0] = Math.min(stride, Math.max(0, Math.round((c * cw - v.x) * k)));
  for (let r = r0; r < r1; r++) {
    const y0 = Math.max(0, Math.round((r * ch - v.y) * k)), y1 = Math.min(canvas.height, Math.round(((r + 1) * ch - v.y) * k));
    for (let c = c0; c < c1; c++) {
      const page = r * cols + c;
      if (page >= total) break;
      const o = owners[page], x0 = xs[c - c0], x1 = xs[c - c0 + 1];
      const word = page === 0 ? padding : o >= 0 ? (requestWords[o] ??= colourWord(ownerFill(o))) : special.get(o);
      const tail = partial.get(page), cut = tail ? Math.round(x0 + (x1 - x0) * tail[1] / p) : x1;
      const span = ahead.get(page);
      const [a0, a1] = span ? aheadRect(x0, x1 - x0, span[0], span[1], p).map(Math.round) : [0, 0];
      for (let row = y0, at = y0 * stride; row < y1; row++, at += stride) {
        px.fill(word, at + x0, at + cut);
        if (cut < x1) px.fill(free, at + cut, at + x1);
        if (a1 > a0) px.fill(aheadWord, at + a0, at + a1);
      }
    }
  }
  ctx.putImageData(img, 0, 0);
}

const fills = [];  // requests' colours, made once each
function ownerFill(owner) {
  return owner >= 0 ? (fills[owner] ??= requestColour(owner)) : OWNER_COLOURS[owner];
}

function ownerText(owner) {
  return owner >= 0 ? `request ${owner}'s own page` : OWNER_NAMES[owner];
}

// A zoomable, scrolling grid of cells painted on a canvas. `spec` gives the grid for the
// current width: {cols, rows, cw, ch, gutter, paint(ctx, view), inspect(col, row) -> text}.
function canvasGrid(root, label) {
  root.innerHTML = `<div class="pkv-zoombar"><button type="button" data-role="zoom-out" aria-label="zoom out (${esc(label)})">−</button>` +
    `<output data-role="zoom">×1</output><button type="button" data-role="zoom-in" aria-label="zoom in (${esc(label)})">+</button>` +
    `<span class="pkv-hint">point at a cell, or focus the view and use the arrow keys, to read it</span></div>` +
    `<div class="pkv-canvas-box"><div class="pkv-sizer"><canvas tabindex="0" role="img" aria-label="${esc(label)}"></canvas></div></div>` +
    `<div class="pkv-inspect" data-role="inspect" aria-live="polite"></div>`;
  const box = root.querySelector(".pkv-canvas-box"), sizer = root.querySelector(".pkv-sizer");
  const canvas = root.querySelector("canvas"), readout = root.querySelector("[data-role=inspect]");
  const zoomOut = root.querySelector("[data-role=zoom-out]"), zoomIn = root.querySelector("[data-role=zoom-in]");
  let zoom = 0, spec = null, focus = null, pointer = null;
  const set = (node, key, value) => { if (node[key] !== value) node[key] = value; };  // no needless layout

  function paint() {
    if (!spec) return;
    const dpr = window.devicePixelRatio || 1;
    const W = Math.max(1, box.clientWidth), H = Math.min(spec.height, BOX_HEIGHT);
    if (canvas.width !== Math.round(W * dpr) || canvas.height !== Math.round(H * dpr)) {
      canvas.width = Math.round(W * dpr);
      canvas.height = Math.round(H * dpr);
      canvas.style.width = `${W}px`;
      canvas.style.height = `${H}px`;
    }
    const ctx = canvas.getContext("2d");
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.fillStyle = spec.colours.bg;
    ctx.fillRect(0, 0, W, H);
    const view = { x: box.scrollLeft, y: box.scrollTop, W, H };
    spec.paint(ctx, view);
    const mark = pointer || focus;
    if (mark) {
      ctx.strokeStyle = spec.colours.line;
      ctx.lineWidth = 2;
      ctx.strokeRect(spec.gutter + mark.col * spec.cw - view.x, mark.row * spec.ch - view.y, spec.cw, spec.ch);
    }
    const geometry = { cols: spec.cols, cw: spec.cw, ch: spec.ch, gutter: spec.gutter, scrollX: view.x, scrollY: view.y };
    for (const [key, value] of Object.entries(geometry)) set(canvas.dataset, key, String(value));
  }

  function layout(next) {
    spec = next;
    set(sizer.style, "width", `${spec.gutter + spec.cols * spec.cw}px`);
    set(sizer.style, "height", `${spec.height}px`);
    set(root.querySelector("[data-role=zoom]"), "textContent", `×${ZOOMS[zoom]}`);
    set(zoomOut, "disabled", zoom === 0);
    set(zoomIn, "disabled", zoom === ZOOMS.length - 1);
    canvas.setAttribute("aria-label", spec.label);
    if (focus || pointer) readout.textContent = spec.inspect((pointer || focus).col, (pointer || focus).row) || "";
    paint();
  }

  function cellAt(event) {
    const r = canvas.getBoundingClientRect();
    const col = Math.floor((event.clientX - r.left + box.scrollLeft - spec.gutter) / spec.cw);
    const row = Math.floor((event.clientY - r.top + box.scrollTop) / spec.ch);
    return col >= 0 && col < spec.cols && row >= 0 && row < spec.rows ? { col, row } : null;
  }

  function point(cell) {
    pointer = cell;
    readout.textContent = cell ? spec.inspect(cell.col, cell.row) || "" : "";
    paint();
  }

  canvas.addEventListener("pointermove", (e) => spec && point(cellAt(e)));
  canvas.addEventListener("pointerleave", () => { pointer = null; paint(); });
  canvas.addEventListener("keydown", (e) => {
    const move = { ArrowLeft: [-1, 0], ArrowRight: [1, 0], ArrowUp: [0, -1], ArrowDown: [0, 1] }[e.key];
    if (!move || !spec) return;
    e.preventDefault();
    focus = focus || { col: 0, row: 0 };
    focus = { col: clamp(focus.col + move[0], 0, spec.cols - 1), row: clamp(focus.row + move[1], 0, Math.max(0, spec.rows - 1)) };
    const x = spec.gutter + focus.col * spec.cw, y = focus.row * spec.ch;
    if (x < box.scrollLeft + spec.gutter || x + spec.cw > box.scrollLeft + box.clientWidth) box.scrollLeft = x - spec.gutter - box.clientWidth / 2;
    if (y < box.scrollTop || y + spec.ch > box.scrollTop + box.clientHeight) box.scrollTop = y - box.clientHeight / 2;
    pointer = null;
    readout.textContent = spec.inspect(focus.col, focus.row) || "";
    paint();
  });
  box.addEventListener("scroll", () => requestAnimationFrame(paint));
  const setZoom = (z) => () => { zoom = clamp(zoom + z, 0, ZOOMS.length - 1); onZoom(ZOOMS[zoom]); };
  let onZoom = () => {};
  zoomOut.addEventListener("click", setZoom(-1));
  zoomIn.addEventListener("click", setZoom(1));
  return { canvas, layout, paint, zoom: () => ZOOMS[zoom], onZoom: (f) => { onZoom = f; } };
}

// Row order and widths stay put while the step moves: a row per request holding KV now, in
// the order they were admitted; columns up to the longest row of the whole run.
function pageTableSpec(run, s, width, zoom, colours) {
  const pg = run.pages, p = pg.pageSize, rows = rowsAt(run, s), owners = ownersAt(run, s);
  pg.widest = pg.widest || Math.max(8, ...pg.lives.map((l) => l.pages.length));
  pg.most = pg.most || Math.max(1, ...run.running);  // rows at most: the grid keeps its height
  const cols = pg.widest, gutter = 64;
  const cw = Math.max(1, Math.min(28, Math.floor((width - gutter) / cols))) * zoom;
  const ch = Math.max(12, Math.min(20, Math.floor(240 / pg.most))) + (zoom > 1 ? 6 * Math.log2(zoom) : 0);
  const { text, ink, halo } = colours;
  const drawnRows = rows.map((r) => ({ rid: r.rid, tokens: r.tokens, pages: Array.from(r.pages),
    owners: Array.from(r.pages, (page) => owners[page]), ahead: r.ahead, unseen: r.unseen, spans: aheadSpans(r, p) }));
  const aheadRows = drawnRows.filter((r) => r.ahead).length, unseen = drawnRows.filter((r) => r.unseen).map((r) => r.rid);
  return {
    cols, rows: rows.length, cw, ch, gutter, height: pg.most * ch, colours,
    label: `page table at step ${s}: ${rows.length} requests hold pages` +
      (aheadRows ? `, ${aheadRows} with slots allocated ahead` : "") +
      (unseen.length ? `, finished but not yet seen: ${unseen.map((r) => `request ${r}`).join(", ")}` : ""),
    paint(ctx, v) {
      ctx.canvas.pkvDrawn = { step: s, rows: drawnRows };
      const tail = tailPattern(ctx, colours), labels = fitsLabels(ctx, cw, pg.numPages);
      const r0 = Math.max(0, Math.floor(v.y / ch)), r1 = Math.min(rows.length, Math.ceil((v.y + v.H) / ch));
      const c0 = Math.max(0, Math.floor((v.x) / cw)), c1 = Math.min(cols, Math.ceil((v.x + v.W - gutter) / cw));
      const gap = cw >= 4 ? 1 : 0;
      for (let r = r0; r < r1; r++) {
        const row = drawnRows[r], y = r * ch - v.y + 1;
        for (let k = c0, runStart = c0, colour = null; k <= Math.min(c1, row.pages.length); k++) {
          const next = k < row.pages.length ? ownerFill(row.owners[k]) : null;
          if (gap || next !== colour || k === Math.min(c1, row.pages.length)) {
            if (colour) {
              ctx.fillStyle = colour;
              ctx.fillRect(gutter + runStart * cw - v.x, y, (k - runStart) * cw - gap, ch - 2);
            }
            runStart = k;
            colour = next;
          }
        }
        const last = row.pages.length - 1, used = row.tokens - last * p;
        if (used < p && last >= c0 && last < c1) {  // the unused tail of its last page
          ctx.fillStyle = tail;
          const x = gutter + last * cw - v.x;
          ctx.fillRect(x + (cw - gap) * (used / p), y, (cw - gap) * (1 - used / p), ch - 2);
        }
        ctx.fillStyle = colours.ahead;
        for (const [k, from, to] of row.spans) {
          if (k < c0 || k >= c1) continue;
          const [x0, x1] = aheadRect(gutter + k * cw - v.x, cw - gap, from, to, p);
          ctx.fillRect(x0, y, x1 - x0, ch - 2);
        }
        if (labels) {
          ctx.textAlign = "center";
          ctx.lineWidth = 3;
          for (let k = c0; k < Math.min(c1, row.pages.length); k++) {
            labelCell(ctx, String(row.pages[k]), gutter + k * cw - v.x + cw / 2, y + ch / 2 + 3, ink, halo);
          }
        }
      }
      ctx.fillStyle = colours.bg;
      ctx.fillRect(0, 0, gutter - 4, v.H);
      ctx.fillStyle = text;
      ctx.font = "11px system-ui, sans-serif";
      ctx.textAlign = "right";
      for (let r = r0; r < r1; r++) ctx.fillText(`${drawnRows[r].unseen ? "✓ " : ""}req ${drawnRows[r].rid}`, gutter - 8, r * ch - v.y + ch / 2 + 4);
      if (!rows.length) {
        ctx.textAlign = "left";
        ctx.fillText("no request holds pages at this step", gutter, 14);
      }
    },
    inspect(col, r) {
      const row = drawnRows[r];
      if (!row) return "";
      const done = row.unseen ? "; finished on the GPU, not yet seen: the scheduler sees it, and frees its KV, at the next step" : "";
      if (col >= row.pages.length) return `request ${row.rid}: ${row.pages.length} pages, ${num(row.tokens)} tokens; no page ${col} yet${done}`;
      const used = Math.min(p, row.tokens - col * p), span = row.spans.find(([k]) => k === col);
      return `request ${row.rid}, logical page ${col} → physical page ${row.pages[col]}: ${used} of ${p} tokens; ${ownerText(row.owners[col])}` +
        aheadText(span ? span[2] - span[1] : 0) + done;
    },
  };
}

// The pool map: every physical page in id order, a cell each, coloured by its owner; the
// last page of a request that is only partly written shows how much of it is used. On a
// sliding-window hybrid, pool "swa" maps the SWA pool: a page is its full peer's owner's
// until the window leaves it (its partly written pages and slots allocated ahead are marked
// on the full pool's map only).
function poolMapSpec(run, s, width, zoom, colours, pool = "full") {
  const pg = run.pages, p = pg.pageSize, swa = pool === "swa", total = (swa ? pg.swa.numPages : pg.numPages) + 1;
  const owners = (swa ? trackAt(pg.swa, s) : ownersAt(run, s)).slice(), partial = new Map(), ahead = new Map(), unseen = new Set();
  for (const row of swa ? [] : rowsAt(run, s)) {
    if (row.unseen) unseen.add(row.rid);
    const last = row.pages.length - 1, used = row.tokens - last * p;
    if (last >= 0 && used < p) partial.set(row.pages[last], [row.rid, used]);
    for (const [k, from, to] of aheadSpans(row, p)) ahead.set(row.pages[k], [from, to]);
  }
  // Cells sized so the map is about 300 px tall, but at least 6 px while the map then stays
  // within about three heights of its scrolling box (a phone's 5,000-page pool: 6 px cells,
  // not 4); whole pixels while a gap is drawn between cells, any size below (painted as
  // pixels, see paintPixels).
  const readable = Math.min(6, Math.sqrt((width * 3 * BOX_HEIGHT) / total));
  const fit = clamp(Math.max(Math.sqrt((width * 300) / total), readable), 2, 40), base = fit >= 4 ? Math.floor(fit) : fit;
  const cols = Math.max(8, Math.floor(width / base)), rows = Math.ceil(total / cols);
  const cw = base * zoom, ch = base * zoom;
  const { free, ink, halo, freeLine: grid } = colours;
  let own = 0, shared = 0, cached = 0, freePages = 0;  // plain counters: no keyed lookups per page
  for (let page = 1; page < total; page++) {
    const o = owners[page];
    if (o >= 0) own++;
    else if (o === SHARED) shared++;
    else if (o === CACHED) cached++;
    else freePages++;
  }
  const counts = { own, [SHARED]: shared, [CACHED]: cached, [FREE]: freePages };
  return {
    cols, rows, cw, ch, gutter: 0, height: rows * ch, counts, colours,
    label: `${swa ? "SWA pool map" : pg.swa ? "FULL pool map" : "pool map"} at step ${s}: ${counts.own} pages held by requests, ${counts[SHARED]} shared, ${counts[CACHED]} cached, ${counts[FREE]} free` +
      (ahead.size ? `; ${ahead.size} of them hold slots allocated ahead` : ""),
    paint(ctx, v) {
      ctx.canvas.pkvDrawn = { step: s, owners, partial, counts, ahead };
      const r0 = Math.floor(v.y / ch), r1 = Math.min(rows, Math.ceil((v.y + v.H) / ch));
      const c0 = Math.floor(v.x / cw), c1 = Math.min(cols, Math.ceil((v.x + v.W) / cw));
      const gap = cw >= 4 ? 1 : 0, byColour = new Map(), tails = [], spans = [];
      if (!gap) return paintPixels(ctx, v, { r0, r1, c0, c1, cols, total, cw, ch, owners, partial, ahead, p }, colours);
      for (let r = r0; r < r1; r++) {
        for (let c = c0; c < c1; c++) {
          const page = r * cols + c;
          if (page >= total) break;
          const o = owners[page], colour = page === 0 ? PADDING_PAGE : o === FREE ? free : ownerFill(o);
          if (!byColour.has(colour)) byColour.set(colour, []);
          byColour.get(colour).push(c * cw - v.x, r * ch - v.y);
          if (partial.has(page)) tails.push([c * cw - v.x, r * ch - v.y, partial.get(page)[1] / p]);
          if (ahead.has(page)) spans.push([c * cw - v.x, r * ch - v.y, ...ahead.get(page)]);
        }
      }
      for (const [colour, xy] of byColour) {  // one path per colour: thousands of cells, few fills
        ctx.fillStyle = colour;
        ctx.beginPath();
        for (let i = 0; i < xy.length; i += 2) ctx.rect(xy[i], xy[i + 1], cw - gap, ch - gap);
        ctx.fill();
      }
      ctx.fillStyle = tailPattern(ctx, colours);  // the unused part of a partly written last page
      for (const [x, y, f] of tails) ctx.fillRect(x + (cw - gap) * f, y, (cw - gap) * (1 - f), ch - gap);
      ctx.fillStyle = colours.ahead;
      for (const [x, y, from, to] of spans) {
        const [x0, x1] = aheadRect(x, cw - gap, from, to, p);
        ctx.fillRect(x0, y, x1 - x0, ch - gap);
      }
      if (gap) {  // free pages: a dashed outline, so they read as empty slots
        ctx.strokeStyle = grid;
        ctx.lineWidth = 1;
        ctx.setLineDash(cw >= 12 ? [3, 2] : []);
        ctx.beginPath();
        for (let i = 0, xy = byColour.get(free) || []; i < xy.length; i += 2) ctx.rect(xy[i] + 0.5, xy[i + 1] + 0.5, cw - gap - 1, ch - gap - 1);
        ctx.stroke();
        ctx.setLineDash([]);
      }
      if (fitsLabels(ctx, cw, total - 1)) {
        ctx.textAlign = "center";
        ctx.lineWidth = 3;
        for (let r = r0; r < r1; r++) {
          for (let c = c0; c < c1 && r * cols + c < total; c++) {
            labelCell(ctx, String(r * cols + c), c * cw - v.x + cw / 2, r * ch - v.y + ch / 2 + 4, ink, halo);
          }
        }
      }
    },
    inspect(col, row) {
      const page = row * cols + col;
      if (page >= total) return "";
      if (page === 0) return "page 0: never handed out (padded and dummy tokens write there)";
      const o = owners[page], tail = partial.get(page), span = ahead.get(page);
      const used = o >= 0 ? `, ${tail ? tail[1] : p} of ${p} tokens` : "";
      const done = unseen.has(o) ? `; request ${o} has finished on the GPU, not yet seen (its KV is freed at the next step)` : "";
      return `page ${page}: ${ownerText(o)}${used}${aheadText(span ? span[1] - span[0] : 0)}${done}`;
    },
  };
}

function pageLegend() {
  return legendHtml([["a request's own page (a colour per request)", "linear-gradient(90deg,hsl(0 70% 52%) 0 33%,hsl(137 70% 52%) 33% 66%,hsl(275 70% 52%) 66%)"],
    [OWNER_NAMES[SHARED], OWNER_COLOURS[SHARED]], [OWNER_NAMES[CACHED], OWNER_COLOURS[CACHED]],
    ["free (a dashed outline)", "var(--pkv-free)"], ["partly written last page (the unused part hatched)", "linear-gradient(90deg,#0072B2 0 60%,transparent 60%)," + HATCH_CSS],
    ["page 0 (padding)", PADDING_PAGE],
    ["allocated ahead: slots the batch in flight has not written yet (overlap loop; a bar of at least 2 px)", "var(--pkv-ahead)"],
    ["✓ req N (page table): finished on the GPU, not yet seen; its KV is freed at the next step", null]]);
}
