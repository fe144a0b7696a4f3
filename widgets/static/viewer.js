// pagedkv memory visualizer, part 4 of 4: the viewer (controls, step player, linking) and its
// entry points.
//
// Data flow. Python (pagedkv_widgets) runs pagedkv.entrypoints.simulate for each setting of
// the controls and encodes the run (widgets/encoding.py); a chapter's views all draw from
// that one run (the card run; chapter 3's teaching pool is a run of its own):
//   - live (Jupyter, anywidget): `render({model, el})`. The controls write the `settings`
//     trait; Python re-simulates and sets the `scene` trait, which redraws.
//   - static (the built book): `mountAll` finds each <div class="pkv-static">, reads its
//     index (which run each setting is) and the runs: inline, or (the book build moves all but
//     the opening one out of the page) fetched the first time they are needed, together with
//     the runs next to them on the controls.
// A run that cannot happen at a setting arrives as {error, fix} (widgets/limits.py): the
// viewer says why in words and greys the views out.
//
// The step control moves one real scheduler step; the jump buttons move to the previous or
// next step with an event of the chosen kind.

// A fraction as SGLang prints it: two decimals, three where its default has them (0.897).
const fraction = (v) => Number(v).toFixed(Math.abs(v * 100 - Math.round(v * 100)) > 1e-6 ? 3 : 2);
const UNITS = { mem_fraction_static: fraction, page_size: (v) => `${v} ${v === 1 ? "token" : "tokens"}` };
const JUMPS = [["admit", "admission", ["admit", "reprefill"]], ["retract", "retraction", ["retract"]],
  ["finish", "finish", ["finish", "abort"]], ["evict", "eviction", ["evict"]]];
const SPEEDS = [1, 10, 100, 1000];
const TICK_MS = 100;

function controlsHtml(config) {
  const { axes, controls } = config;
  // A control with one value offers no choice: shown, but not operable.
  const select = (role) => `<select data-role="${role}"${axes[role].length === 1 ? ` disabled title="the only ${CONTROL_LABELS[role]} this view runs"` : ""}>${axes[role].map(([v, l]) => `<option value="${esc(v)}">${esc(l)}</option>`).join("")}</select>`;
  const range = (role) => `<input type="range" data-role="${role}" min="0" max="${axes[role].length - 1}" step="1"><output data-role="${role}-value"></output>`;
  return controls.filter((c) => CONTROL_LABELS[c]).map((c) =>
    `<label class="pkv-control">${CONTROL_LABELS[c]} ${axes[c].length && Array.isArray(axes[c][0]) ? select(c) : range(c)}</label>`).join("");
}

const CONTROL_LABELS = { mem_fraction_static: "mem_fraction_static", page_size: "page size", model: "model", gpu: "GPU", workload: "workload", loop: "scheduler loop" };

// On the config's planes (each a set of controls that move together while the others stay at
// the opening setting): the setting that keeps control `keep` at s's value and moves the
// fewest others (those outside a plane holding `keep` go back to the opening setting); null
// if no plane holds `keep`.
function nearestInGrid(config, s, keep) {
  let best = null, cost = Infinity;
  for (const plane of config.planes || []) {
    if (!plane.includes(keep)) continue;
    // settings no control shows (a chapter without the loop control) stay as they are
    const near = { ...s, ...Object.fromEntries(config.controls.map((k) => [k, plane.includes(k) ? s[k] : config.settings[k]])) };
    const moved = config.controls.filter((k) => String(near[k]) !== String(s[k])).length;
    if (moved < cost) [best, cost] = [near, moved];
  }
  return best;
}

function layoutHtml(config) {
  const has = (v) => config.views.includes(v);
  const pages = has("pagetable") || has("pool") || has("swapool");
  const teaching = config.teaching;
  return `<div class="pkv-title">${esc(config.title)}</div>
<div class="pkv-sticky">
<div class="pkv-controls">${controlsHtml(config)}</div>
<div class="pkv-problem" data-role="problem" role="status" aria-live="polite"></div>
<p class="pkv-note" data-role="note" role="status" aria-live="polite"></p>
<div class="pkv-player">
<button type="button" data-role="play">▶ play</button>
<label class="pkv-control">speed <select data-role="speed">${SPEEDS.map((k) => `<option value="${k}">${k} ${k === 1 ? "step" : "steps"} a tick</option>`).join("")}</select></label>
<span class="pkv-pair"><button type="button" data-role="back" aria-label="previous step">◂</button><button type="button" data-role="step" aria-label="next step">▸</button></span>
<label class="pkv-scrub">step <input type="range" data-role="scrub" min="0" max="0" step="1"></label></div>
<div class="pkv-player"><label class="pkv-control">jump to <select data-role="jump">${JUMPS.map(([k, l]) => `<option value="${k}">${l}</option>`).join("")}</select></label>
<button type="button" data-role="prev-event">◂ previous</button><button type="button" data-role="next-event">next ▸</button>
<span class="pkv-status" data-role="status"></span></div>
<div class="pkv-readout" data-role="step-label" aria-live="polite"></div></div>
<section class="pkv-panel" data-part="run">
${teaching ? "" : `<h3>The run: <span data-role="run-name"></span> <small>(GiB = 2<sup>30</sup> bytes)</small></h3>`}
${has("hbm") ? `<h4>HBM at card scale</h4><div class="pkv-scroll" data-view="hbm"></div>` : ""}
${has("timeline") ? `<h4>Timeline <small data-role="card-step"></small></h4><div class="pkv-scroll" data-view="timeline"></div>` : ""}
${pages ? `${teaching ? `<h3>Teaching pool: <span data-role="pool-size"></span> <small>(a toy card with the same mem_fraction_static, small enough to read page by page: a run of its own, not a card's)</small></h3>` : `<h4>${has("swapool") ? "The FULL and SWA pools' maps" : "Page table and pool map"} of the same run, at the same step</h4>`}
${has("pagetable") ? `<h4>Page table (req_to_token): a row per running request, a cell per page of its row</h4><div data-view="pagetable"></div>` : ""}
${has("pool") ? `<h4>Pool map: every physical page, in page-id order, coloured by owner</h4><div data-view="pool"></div>` : ""}
${has("slots") ? `<h4>State slots (linear-attention layers): <span data-role="slots-size"></span></h4><div class="pkv-scroll" data-view="slots"></div>` : ""}
${has("swapool") ? `<h4>FULL pool (full-attention layers): <span data-role="full-pool-size"></span></h4><div data-view="pool"></div>` +
  `<h4>SWA pool (sliding-window layers): <span data-role="swa-pool-size"></span></h4><div data-view="swapool"></div>` : ""}
<div class="pkv-caption" data-role="pool-caption"></div>
${pageLegend()}` : ""}</section>
${config.caption ? `<p class="pkv-figcaption"><strong>Figure:</strong> ${esc(config.caption)}</p>` : ""}`;
}

// The panel's headings (h3, h4) one and two levels under the page's heading before the
// visualizer (a chapter's title or a section's), so no level is skipped.
function nestHeadings(el) {
  const before = [...document.querySelectorAll("h1, h2, h3, h4, h5, h6")].filter((h) =>
    !el.contains(h) && h.compareDocumentPosition(el) & Node.DOCUMENT_POSITION_FOLLOWING).pop();
  const top = before ? Math.min(5, Number(before.tagName[1]) + 1) : 3;
  el.querySelectorAll("h3, h4").forEach((h) => h.setAttribute("aria-level", String(top + Number(h.tagName[1]) - 3)));
}

// `source.request(settings)` returns the scene ({card, pool}: encoded runs or {error, fix}),
// a Promise of it (a static run still to fetch), or null (live: it arrives via show()).
export function createViewer(el, config, source) {
  el.classList.add("pkv-root");
  el.innerHTML = layoutHtml(config);
  nestHeadings(el);
  const q = (sel) => el.querySelector(sel);
  const views = Object.fromEntries([...el.querySelectorAll("[data-view]")].map((n) => [n.dataset.view, n]));
  const part = config.teaching ? "pool" : "card";
  const settings = { ...config.settings };
  const grids = {};
  for (const view of ["pagetable", "pool", "swapool"]) {
    if (!views[view]) continue;
    grids[view] = canvasGrid(views[view], { pool: "pool map", swapool: "SWA pool map", pagetable: "page table" }[view]);
    grids[view].onZoom(() => drawStep());
  }
  let run = null, index = 0, timer = null, opened = false, width = 0, asked = 0;
  let place = null;  // how far into its run the last shown step was (0 to 1): kept across a setting that cannot run
  let colours = null;  // the theme's, read again when the page's theme changes

  const labelOf = (role, v) => (config.axes[role].find(([x]) => x === v) || [v, v])[1];
  const drawWidth = (px = el.clientWidth) => clamp(Math.floor(px) - 26, 280, 720);
  const speed = () => Number(q("[data-role=speed]").value);
  const jumpMarks = () => {
    const kinds = JUMPS.find(([k]) => k === q("[data-role=jump]").value)[2];
    return [...new Set(kinds.flatMap((k) => run?.marks[k] || []))].sort((a, b) => a - b);
  };

  // "this step: retract × 1, eviction" (empty when nothing happened at step s).
  function happenedAt(s) {
    const happened = [...EVENT_MARKS, ["abort", "abort"]].map(([kind, label]) =>
      [label, run.events[kind]?.steps.filter((t) => t === s).length]).filter(([, k]) => k);
    const text = happened.map(([l, k]) => `${l} × ${k}`);
    if (run.marks.evict.includes(s)) text.push("eviction");
    return text.length ? ` · this step: ${text.join(", ")}` : "";
  }

  function readout(s) {
    const kind = { p: "prefill", d: "decode", i: "idle" }[run.kind[s]];
    return `step ${num(s)} of ${num(run.n - 1)} · ${kind} · ${run.running[s]} running, ${run.waiting[s]} waiting · ` +
      `${run.time[s].toFixed(2)} s${happenedAt(s)}`;
  }

  function drawPages(s) {
    const pg = run.pages;
    colours ??= themeColours(el);
    if (grids.pagetable) grids.pagetable.layout(pageTableSpec(run, s, width, grids.pagetable.zoom(), colours));
    const pool = poolMapSpec(run, s, width, grids.pool ? grids.pool.zoom() : 1, colours);
    if (grids.pool) grids.pool.layout(pool);
    const c = pool.counts, held = rowsAt(run, s);
    q("[data-role=pool-caption]").textContent = `step ${num(s)}: ${held.length} requests hold pages · of ${num(pg.numPages)} ${pg.swa ? "FULL pool " : ""}pages (${pg.pageSize} tokens each): ` +
      `${num(c.own)} requests' own, ${num(c[SHARED])} shared (locked in the radix cache), ${num(c[CACHED])} cached (evictable), ${num(c[FREE])} free` +
      (run.reserved[s] ? ` (admission holds ${num(run.reserved[s])} tokens of room as reserved for running requests)` : "") + swaText(s) + slotsText(s) + inFlightText(held, pg.overlap) + happenedAt(s);
  }

  // A sliding-window hybrid's SWA pool at step s, in words (and its map, if shown).
  function swaText(s) {
    const pg = run.pages, m = run.meta;
    if (!pg.swa) return "";
    const spec = poolMapSpec(run, s, width, grids.swapool ? grids.swapool.zoom() : 1, colours, "swa"), c = spec.counts;
    if (grids.swapool) grids.swapool.layout(spec);
    const size = (tokens, pages) => `${num(tokens)} tokens in ${num(pages)} pages of ${pg.pageSize}`;
    const full = q("[data-role=full-pool-size]"), swa = q("[data-role=swa-pool-size]");
    if (full) full.textContent = size(m.max_total_num_tokens, m.num_pages);
    if (swa) swa.textContent = `${size(m.swa_max_total_num_tokens, m.swa_num_pages)}, window ${num(m.sliding_window)} tokens`;
    return ` · of ${num(pg.swa.numPages)} SWA pool pages: ${num(c.own)} requests' own (their windows), ${num(c[SHARED])} shared, ${num(c[CACHED])} cached, ${num(c[FREE])} free`;
  }

  // A linear-attention hybrid's state slots at step s, in words.
  function slotsText(s) {
    const c = slotsAt(run, s), m = run.meta;
    if (!c) return "";
    const size = q("[data-role=slots-size]");
    if (size) size.textContent = `${num(m.mamba_slots)} slots of ${(m.state_bytes / 2 ** 20).toFixed(1)} MiB each (every linear-attention layer's state of one request)`;
    return ` · of ${num(m.mamba_slots)} state slots: ${num(c.live)} held by running requests, ${num(c.track)} track slots, ${num(c.tree)} states in the radix cache, ${num(c.free)} free`;
  }

  // The overlap loop's half-done work after the step, in words (the normal loop has none).
  function inFlightText(held, overlap) {
    if (!overlap) return " · normal loop: every slot is written by the end of its step";
    const slots = held.reduce((n, r) => n + r.ahead, 0), unseen = held.filter((r) => r.unseen).map((r) => r.rid);
    return ` · overlap loop: ${num(slots)} ${slots === 1 ? "slot" : "slots"} of ${held.filter((r) => r.ahead).length} requests allocated ahead (the batch in flight writes them)` +
      (unseen.length ? `; finished but not yet seen: ${unseen.map((r) => `request ${r}`).join(", ")} (freed at the next step)` : "");
  }

  function drawStep() {
    if (!run) return;
    const s = index;
    if (views.hbm) views.hbm.innerHTML = hbmView(run, s, width);
    if (views.slots) views.slots.innerHTML = slotsView(run, s, width);
    if (views.timeline) {
      const cursor = views.timeline.querySelector("[data-role=cursor]"), x = tlX(run, width, s);
      cursor.setAttribute("x1", x);
      cursor.setAttribute("x2", x);
      q("[data-role=card-step]").textContent = `· step ${num(s)} of ${num(run.n - 1)}`;
    }
    if (run.pages) drawPages(s);
    const scrub = q("[data-role=scrub]"), text = readout(s);
    scrub.value = s;
    scrub.setAttribute("aria-valuetext", `step ${num(s)} of ${num(run.n - 1)}`);
    q("[data-role=step-label]").textContent = text;
    const marks = jumpMarks(), name = q("[data-role=jump]").selectedOptions[0].textContent;
    const prev = q("[data-role=prev-event]"), next = q("[data-role=next-event]");
    prev.disabled = !marks.some((k) => k < s);
    next.disabled = !marks.some((k) => k > s);
    prev.setAttribute("aria-label", `previous ${name}`);
    next.setAttribute("aria-label", `next ${name}`);
    q("[data-role=back]").disabled = s <= 0;
    q("[data-role=step]").disabled = s >= run.n - 1;
  }

  // A run that cannot happen: its reason, a fix, and the views greyed out and inert (no
  // stale picture of the previous setting stays readable as if current).
  function showProblem(entry) {
    const box = q("[data-role=problem]"), off = Boolean(entry?.error);
    const text = off ? `<p><strong>This setting cannot run.</strong> ${esc(entry.error)} ${esc(entry.fix || "")}</p>` : "";
    if (box.innerHTML !== text) box.innerHTML = text;
    const panel = q("[data-part]");
    if (off === panel.inert) return;
    panel.classList.toggle("pkv-off", off);
    panel.inert = off;
    panel.setAttribute("aria-hidden", String(off));
    if (!off) return;
    // Each view becomes an empty box of the same height (the page does not jump).
    panel.querySelectorAll("[data-view=hbm], [data-view=timeline], [data-view=slots]").forEach((view) => {
      view.innerHTML = `<div class="pkv-blank" style="height:${Math.max(40, view.offsetHeight)}px"></div>`;
    });
    Object.values(grids).forEach((g) => g.layout({ cols: 0, rows: 0, cw: 1, ch: 1, gutter: 0, height: 40,
      label: "no run", colours: colours ??= themeColours(el), paint() {}, inspect: () => "" }));
    panel.querySelectorAll("[data-role=card-step], [data-role=pool-caption], [data-role=inspect]").forEach((n) => { n.textContent = ""; });
  }

  function nameRun() {
    const m = run?.meta, f = fraction(settings.mem_fraction_static);
    const name = q("[data-role=run-name]"), size = q("[data-role=pool-size]");
    if (name) {
      name.textContent = `${labelOf("model", settings.model)} on ${labelOf("gpu", settings.gpu)} · mem_fraction_static ${f} · ${settings.loop === "normal" ? "normal" : "overlap"} loop · ` +
        (m ? `${num(m.max_total_num_tokens)}-token pool in ${num(m.num_pages)} pages of ${m.page_size} · SGLang ${m.sglang_version}'s scheduler` : "cannot run");
    }
    if (size) {
      size.textContent = m ? `${m.num_pages} pages × ${m.page_size} ${m.page_size === 1 ? "token" : "tokens"} = ${m.max_total_num_tokens} tokens`
        : `mem_fraction_static ${f}, pages of ${settings.page_size} tokens · cannot run`;
    }
  }

  function show(scene) {
    const entry = scene?.[part];
    q("[data-role=status]").textContent = entry ? "" : "this combination was not precomputed";
    if (!entry) return;
    const before = run;
    if (before) place = index / Math.max(1, before.n - 1);
    showProblem(entry);
    run = entry.error ? null : decodeRun(entry);
    nameRun();
    el.classList.toggle("pkv-nothing", !run);
    el.querySelectorAll(".pkv-player button, .pkv-player input, .pkv-player select").forEach((c) => { c.disabled = !run; });
    if (!run) {
      pause();
      q("[data-role=step-label]").textContent = "";
      return;
    }
    q("[data-role=scrub]").max = run.n - 1;
    if (!opened) q("[data-role=speed]").value = String(SPEEDS.reduce((a, b) => (Math.abs(Math.log10(b * 400 / run.n)) < Math.abs(Math.log10(a * 400 / run.n)) ? b : a)));
    // First view: an interesting step (widgets/encoding.py opening_step); later settings
    // keep the same point of the run, so two settings compare at the same moment (also after
    // a setting that could not run in between, which has no step of its own).
    index = place === null ? clamp(run.open, 0, run.n - 1) : clamp(Math.round(place * (run.n - 1)), 0, run.n - 1);
    opened = true;
    if (!width) width = drawWidth();  // later widths come from the ResizeObserver, no forced layout
    if (views.timeline && run !== before) drawTimelineOf(run);
    drawStep();
    source.prefetch?.(settings);
  }

  // The timeline's frame is made for a width; a run only fills it in.
  function drawTimelineOf(r) {
    const view = views.timeline;
    if (view.dataset.width !== String(width) || !view.querySelector("[data-line]")) {
      view.innerHTML = timelineFrame(width);
      view.dataset.width = width;
    }
    drawTimeline(view, r, width);
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
    const ticket = ++asked, answer = source.request({ ...settings });
    if (answer && typeof answer.then === "function") {
      q("[data-role=status]").textContent = "loading this setting's run…";
      answer.then((scene) => { if (ticket === asked) show(scene); },
        (err) => { if (ticket === asked) q("[data-role=status]").textContent = `could not load this setting's run (${err.message}); the book must be served over http(s)`; });
    } else if (answer) {
      show(answer);
    } else {
      q("[data-role=status]").textContent = "re-simulating…";
    }
  }

  // The static book may hold only some of the controls' combinations (config.planes, see
  // widgets/chapters.py); a move off them takes the other controls to the nearest setting
  // that it holds and keeps the one just moved, and says so.
  function snap(role) {
    const note = q("[data-role=note]");
    note.textContent = "";
    if (!source.has || source.has(settings)) return;
    const near = nearestInGrid(config, settings, role);
    if (!near || !source.has(near)) return;
    const moved = Object.keys(near).filter((k) => String(near[k]) !== String(settings[k]));
    Object.assign(settings, near);
    const says = moved.map((k) => `${CONTROL_LABELS[k]} ${UNITS[k] ? UNITS[k](near[k]) : labelOf(k, near[k])}`);
    note.textContent = `Not every combination is precomputed in the book: ${says.join(", ")} moved with your ${CONTROL_LABELS[role]} ` +
      "to the nearest one that is. Run this notebook in Jupyter or Colab for any combination.";
  }

  function setIndex(i) {
    if (!run) return;
    index = clamp(i, 0, run.n - 1);
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
    if (run && index >= run.n - 1) setIndex(0);
    q("[data-role=play]").textContent = "‖ pause";
    readoutLive(false);  // a readout every tick would drown a screen reader
    timer = setInterval(() => (index >= run.n - 1 ? pause() : setIndex(index + speed())), TICK_MS);
  }

  function jump(direction) {
    pause();
    const marks = jumpMarks();
    const k = direction > 0 ? marks.find((s) => s > index) : marks.reverse().find((s) => s < index);
    if (k !== undefined) setIndex(k);
  }

  q("[data-role=play]").addEventListener("click", play);
  q("[data-role=step]").addEventListener("click", () => { pause(); setIndex(index + 1); });
  q("[data-role=back]").addEventListener("click", () => { pause(); setIndex(index - 1); });
  q("[data-role=next-event]").addEventListener("click", () => jump(1));
  q("[data-role=prev-event]").addEventListener("click", () => jump(-1));
  q("[data-role=jump]").addEventListener("input", () => drawStep());
  q("[data-role=scrub]").addEventListener("input", (e) => { pause(); setIndex(Number(e.target.value)); });
  for (const [role, values] of Object.entries(config.axes)) {
    const input = q(`[data-role=${role}]`);
    if (!input) continue;
    input.addEventListener("input", () => {
      settings[role] = input.tagName === "SELECT" ? values.find(([v]) => String(v) === input.value)[0] : values[Number(input.value)];
      snap(role);
      request();
    });
  }
  if (views.timeline) {
    views.timeline.addEventListener("click", (e) => {
      if (!run) return;
      const box = views.timeline.firstElementChild.getBoundingClientRect();
      const x = ((e.clientX - box.left) / box.width) * width;
      setIndex(Math.round(((x - TL.L) / (tlRight(width) - TL.L)) * (run.n - 1)));
    });
  }
  // The drawings follow the panel's width (a phone gets narrower bars, not smaller text).
  const resized = new ResizeObserver(([entry]) => {
    const next = drawWidth(entry.borderBoxSize?.[0]?.inlineSize ?? el.clientWidth);
    if (!run || next === width) return;
    width = next;
    if (views.timeline) drawTimelineOf(run);
    drawStep();
  });
  resized.observe(el);
  // The page's light/dark switch (pydata-sphinx-theme) repaints the canvases in its colours.
  const themed = new MutationObserver(() => {
    colours = null;
    drawStep();
  });
  themed.observe(document.documentElement, { attributes: true, attributeFilter: ["data-theme"] });
  // Settings changed elsewhere (another view of the same live widget): adopt them.
  function setSettings(next) {
    Object.assign(settings, next);
    syncControls();
  }

  request();
  return { show, setSettings, pause, settings: () => ({ ...settings }),
    destroy: () => { pause(); resized.disconnect(); themed.disconnect(); } };
}

// ---------- entry points ----------

const sceneKeys = (s) => ({
  card: [s.model, s.gpu, s.workload, Number(s.mem_fraction_static).toFixed(2), s.page_size, s.loop].join("|"),
  pool: [s.workload, Number(s.mem_fraction_static).toFixed(2), s.page_size, s.loop].join("|"),
});

// The static page's runs: inline, or in a file of their own (data-src) fetched once.
function staticSource(el, config, grid) {
  const scripts = new Map([...el.querySelectorAll("script[data-pkv-run]")].map((s) => [s.dataset.pkvRun, s]));
  const loaded = new Map(), pending = new Map();
  const part = config.teaching ? "pool" : "card";
  const entryOf = (s) => grid[part]?.[sceneKeys(s)[part]];

  function load(id) {
    if (!pending.has(id)) {
      const script = scripts.get(id);
      const text = script.dataset.src
        ? fetch(new URL(script.dataset.src, document.baseURI)).then((r) => {
          if (!r.ok) throw new Error(`HTTP ${r.status}`);
          return r.text();
        })
        : Promise.resolve(script.textContent);
      const done = text.then(readPayload).then((enc) => { loaded.set(id, enc); return enc; });
      done.catch(() => pending.delete(id));
      pending.set(id, done);
    }
    return pending.get(id);
  }

  // The runs one move of a control away, fetched and decoded while the reader looks.
  function neighbours(s) {
    const out = [];
    for (const role of config.controls) {
      const values = config.axes[role].map((v) => (Array.isArray(v) ? v[0] : v));
      const k = values.findIndex((v) => String(v) === String(s[role]));
      const near = values.length <= 3 ? values.filter((_, j) => j !== k) : [values[k - 1], values[k + 1]];
      for (const v of near) if (v !== undefined) out.push({ ...s, [role]: v });
    }
    return out;
  }
  let warm = false;
  const idle = window.requestIdleCallback || ((f) => setTimeout(f, 50));

  return {
    has: (s) => Boolean(entryOf(s)),
    request(s) {
      const entry = entryOf(s);
      if (!entry) return { [part]: null };
      if (entry.error) return { [part]: entry };
      if (loaded.has(entry.id)) return { [part]: loaded.get(entry.id) };
      return load(entry.id).then((enc) => ({ [part]: enc }));
    },
    prefetch(s) {
      if (!warm) return;
      for (const near of neighbours(s)) {
        const entry = entryOf(near);
        if (entry?.id && !loaded.has(entry.id)) idle(() => load(entry.id).then((enc) => idle(() => decodeRun(enc)), () => {}));
        else if (entry?.id) idle(() => decodeRun(loaded.get(entry.id)));
      }
    },
    // Fetching starts once the reader reaches for the visualizer, not on page load.
    warmUp(s) {
      if (warm) return;
      warm = true;
      this.prefetch(s);
    },
  };
}

export async function mountStatic(el) {
  if (el.dataset.mounted) return;
  el.dataset.mounted = "1";
  const { config, grid } = await readPayload(el.querySelector("script[data-pkv=index]").textContent);
  const source = staticSource(el, config, grid);
  const mount = el.querySelector(".pkv-mount");
  const viewer = createViewer(mount, config, source);
  const warm = () => source.warmUp(viewer.settings());
  mount.addEventListener("pointerenter", warm, { once: true });
  mount.addEventListener("focusin", warm, { once: true });
  return viewer;
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
