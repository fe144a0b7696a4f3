// pagedkv memory visualizer, part 1 of 4: decoding a run (twin of widgets/encoding.py
// decode_run and widgets/page_encoding.py decode_pages). It plays back what the scheduler
// recorded; it never simulates.
//
// The four parts (decode, draw, pagemap, viewer) are one ES module: widgets/widget.py joins
// them, the static page inlines the result and anywidget loads it.

const FREE = -1, CACHED = -2, SHARED = -3;  // page owners besides request ids (page_recorder.py)

function undelta(values, Type = Int32Array) {
  const out = new Type(values.length);
  let acc = 0;
  for (let i = 0; i < values.length; i++) out[i] = acc += values[i];
  return out;
}

// Sorted steps at which something happens: the trace's events, and evictions (the radix
// cache shrinking: nothing else makes it smaller).
function eventMarks(run) {
  const marks = {};
  for (const [kind, { steps }] of Object.entries(run.events)) marks[kind] = [...new Set(steps)];
  const evict = [];
  for (let s = 1; s < run.n; s++) {
    if (run.evictable[s] + run.protected[s] < run.evictable[s - 1] + run.protected[s - 1]) evict.push(s);
  }
  marks.evict = evict;
  return marks;
}

function decodeRunData(enc) {
  const run = { meta: enc.meta, hbm: enc.hbm, n: enc.n, kind: enc.kind, open: enc.open || 0 };
  for (const key of ["used", "reserved", "free", "evictable", "protected", "running", "waiting"]) {
    run[key] = undelta(enc[key]);
  }
  run.time = undelta(enc.time, Float64Array).map((v) => v / 1000);
  run.ratio = undelta(enc.ratio, Float64Array).map((v) => v / 1000);
  // decoded[s]: decode steps among 0..s (a decode step adds a token to every running request)
  run.decoded = new Int32Array(enc.n);
  for (let s = 0, acc = 0; s < enc.n; s++) run.decoded[s] = acc += enc.kind[s] === "d" ? 1 : 0;
  run.events = {};
  for (const [kind, [steps, rids]] of Object.entries(enc.ev)) {
    run.events[kind] = { steps: Array.from(undelta(steps)), rids };
  }
  run.marks = eventMarks(run);
  run.pages = enc.pages ? decodePages(enc.pages, run) : null;
  return run;
}

// Decoded once per encoded run: going back to a setting only redraws.
const decodedRuns = new WeakMap();
function decodeRun(enc) {
  if (!decodedRuns.has(enc)) decodedRuns.set(enc, decodeRunData(enc));
  return decodedRuns.get(enc);
}

// ---------- the page record ----------

// Tokens of a lifetime after step s (start <= s < end): its last recorded count plus one per
// decode step since.
function tokensAt(life, decoded, s) {
  let at = life.start, tokens = life.tokens;
  for (const [step, t] of life.exc) {
    if (step > s) break;
    at = step;
    tokens = t;
  }
  return tokens + decoded[s] - decoded[at];
}

function pagesAt(life, s) {
  if (!life.fixes.length) return life.pages;
  const row = Int32Array.from(life.pages);
  for (const [step, k, page] of life.fixes) if (step <= s) row[k] = page;
  return row;
}

function decodeLifetimes(enc, run) {
  const p = run.meta.page_size, lives = [];
  let start = 0;
  for (const [rid, ds, span, tokens, exc, pages] of enc.life) {
    start += ds;
    const life = { rid, start, end: span < 0 ? run.n : start + span, tokens, exc: [],
      pages: undelta(pages), fixes: [] };
    for (let j = 0, at = start; j < exc.length; j += 2) life.exc.push([at += exc[j], exc[j + 1]]);
    // the step each row entry appears at: the first step whose token count needs it
    life.appear = new Int32Array(life.pages.length);
    for (let s = start, k = 0; k < life.pages.length && s < life.end; s++) {
      const need = Math.ceil(tokensAt(life, run.decoded, s) / p);
      while (k < need && k < life.pages.length) life.appear[k++] = s;
    }
    lives.push(life);
  }
  for (let j = 0; j < enc.fix.length; j += 4) {
    lives[enc.fix[j]].fixes.push([enc.fix[j + 1], enc.fix[j + 2], enc.fix[j + 3]]);
  }
  return lives;
}

// Every owner change as flat arrays in step order: per step, the rule (a row's new page
// becomes its request's own) first, then the groups, so the groups win.
function ownerChanges(enc, lives, n) {
  const steps = [], pages = [], owners = [];
  const push = (s, page, owner) => { steps.push(s); pages.push(page); owners.push(owner); };
  lives.forEach((life) => life.appear.forEach((s, k) => { if (s > life.start) push(s, life.pages[k], life.rid); }));
  const rules = steps.length;
  const g = enc.grp;
  for (let i = 0, s = 0; i < g.length;) {
    s += g[i];
    const groups = g[i + 1];
    i += 2;
    for (let q = 0; q < groups; q++) {
      const owner = g[i], slices = g[i + 1];
      i += 2;
      for (let j = 0; j < slices; j++, i += 3) {
        const row = pagesAt(lives[g[i]], s);
        for (let k = g[i + 1]; k < g[i + 1] + g[i + 2]; k++) push(s, row[k], owner);
      }
      const explicit = g[i++];
      for (let j = 0; j < explicit; j++) push(s, g[i++], owner);
    }
  }
  // counting sort by step, keeping the order within a step (rules before groups)
  const offset = new Int32Array(n + 1);
  for (const s of steps) offset[s + 1]++;
  for (let s = 0; s < n; s++) offset[s + 1] += offset[s];
  const fill = offset.slice(0, n), order = new Int32Array(steps.length);
  const stable = (i) => { order[fill[steps[i]]++] = i; };
  for (let i = 0; i < rules; i++) stable(i);
  for (let i = rules; i < steps.length; i++) stable(i);
  return { offset, page: Int32Array.from(order, (i) => pages[i]), owner: Int32Array.from(order, (i) => owners[i]) };
}

// What the overlap loop leaves half done after a step (widgets/in_flight_encoding.py): per step,
// the recorded exceptions to the rule "after a decode step every row's last slot is allocated
// ahead" ({rid: slots ahead}), and the requests finished but not yet seen.
function decodeInFlight(enc) {
  const ahead = new Map(), unseen = new Map(), flat = enc.ahead || [], done = enc.unseen || [];
  for (let i = 0, s = 0; i < flat.length; i += 3) {
    s += flat[i];
    if (!ahead.has(s)) ahead.set(s, new Map());
    ahead.get(s).set(flat[i + 1], flat[i + 2]);
  }
  for (let i = 0, s = 0; i < done.length; i += 2) {
    s += done[i];
    if (!unseen.has(s)) unseen.set(s, new Set());
    unseen.get(s).add(done[i + 1]);
  }
  return { overlap: enc.loop === "overlap", ahead, unseen };
}

// One pool's owners over the run: its changes ({offset, page, owner}, offset by step) and
// snapshots of every page's owner every `every` steps (a few MB at most), so any step is a
// snapshot plus a few hundred steps of changes away.
function ownerTrack(changes, numPages, n) {
  const every = Math.max(32, Math.ceil((n * (numPages + 1)) / 2e6));
  const snapshots = [], owners = new Int32Array(numPages + 1).fill(FREE);
  for (let s = 0; s < n; s++) {
    if (s % every === 0) snapshots.push(owners.slice());  // the owners before step s
    for (let i = changes.offset[s]; i < changes.offset[s + 1]; i++) owners[changes.page[i]] = changes.owner[i];
  }
  return { changes, every, snapshots, numPages, cursor: null };
}

// A sliding-window hybrid's SWA pool (widgets/swa_encoding.py): its owner changes, sorted
// by step, as a track's changes.
function decodeSwa(enc, n) {
  const steps = undelta(enc.step), offset = new Int32Array(n + 1);
  for (const s of steps) offset[s + 1]++;
  for (let s = 0; s < n; s++) offset[s + 1] += offset[s];
  return { offset, page: Int32Array.from(enc.page), owner: Int32Array.from(enc.owner) };
}

function decodePages(enc, run) {
  const lives = decodeLifetimes(enc, run);
  const track = ownerTrack(ownerChanges(enc, lives, run.n), run.meta.num_pages, run.n);
  const swa = enc.swa ? ownerTrack(decodeSwa(enc.swa, run.n), run.meta.swa_num_pages, run.n) : null;
  const slots = enc.state_slots ? decodeStateSlots(enc.state_slots) : null;
  return { lives, ...track, pageSize: run.meta.page_size, swa, slots, ...decodeInFlight(enc) };
}

// A linear-attention hybrid's state slots (widgets/state_slots.py): the state pool's parts
// after each step whose counts changed (free: the pool minus the rest).
function decodeStateSlots(enc) {
  return { slots: enc.slots, step: undelta(enc.step), live: enc.live, track: enc.track, tree: enc.tree };
}

// The state pool's parts after step s ({live, track, tree, free}; twin of slots_at), or
// null without state slots.
function slotsAt(run, s) {
  const ss = run.pages?.slots;
  if (!ss) return null;
  let lo = 0, hi = ss.step.length;  // the first change after s
  while (lo < hi) { const mid = (lo + hi) >> 1; if (ss.step[mid] <= s) lo = mid + 1; else hi = mid; }
  const i = lo - 1;
  if (i < 0) return { live: 0, track: 0, tree: 0, free: ss.slots };
  return { live: ss.live[i], track: ss.track[i], tree: ss.tree[i], free: ss.slots - ss.live[i] - ss.track[i] - ss.tree[i] };
}

// Every page's owner of a track after step s (Int32Array [num_pages + 1]); the array is
// reused by the next call, so copy it to keep it.
function trackAt(track, s) {
  const ch = track.changes;
  let cur = track.cursor;
  if (!cur || cur.step > s || s - cur.step > track.every) {
    const k = Math.floor(s / track.every);
    cur = track.cursor = { step: k * track.every - 1, owners: track.snapshots[k].slice() };
  }
  for (let t = cur.step + 1; t <= s; t++) {
    for (let i = ch.offset[t]; i < ch.offset[t + 1]; i++) cur.owners[ch.page[i]] = ch.owner[i];
  }
  cur.step = s;
  return cur.owners;
}

// Every page's owner after step s (the full pool's on a sliding-window hybrid).
function ownersAt(run, s) {
  return trackAt(run.pages, s);
}

// The SWA pool's pages held after step s (not free), or null for one pool.
function swaHeldAt(run, s) {
  const swa = run.pages?.swa;
  if (!swa) return null;
  const owners = trackAt(swa, s);
  let held = 0;
  for (let page = 1; page < owners.length; page++) if (owners[page] !== FREE) held++;
  return held;
}

// The rows of every request holding KV after step s, in the order they were admitted:
// [{rid, tokens, pages: Int32Array (row entries 0 .. ceil(tokens / page_size) - 1), ahead
// (its last `ahead` slots are allocated but not yet written), unseen (finished, not yet seen)}].
function rowsAt(run, s) {
  const pg = run.pages, rows = [];
  const rule = pg.overlap && run.kind[s] === "d" ? 1 : 0, except = pg.ahead.get(s), done = pg.unseen.get(s);
  for (const life of pg.lives) {
    if (life.start > s || s >= life.end) continue;
    const tokens = tokensAt(life, run.decoded, s);
    rows.push({ rid: life.rid, tokens, pages: pagesAt(life, s).subarray(0, Math.ceil(tokens / pg.pageSize)),
      ahead: except?.get(life.rid) ?? rule, unseen: Boolean(done?.has(life.rid)) });
  }
  return rows;
}

// Where a row's slots allocated ahead lie: [[row entry k, first, end) token offsets in that page], ...].
function aheadSpans(row, p) {
  const out = [];
  if (!row.ahead) return out;
  const from = row.tokens - row.ahead;
  for (let k = Math.floor(from / p); k < row.pages.length; k++) {
    out.push([k, Math.max(0, from - k * p), Math.min(p, row.tokens - k * p)]);
  }
  return out;
}

// The static grid's runs: JSON, gzip, base64 (widgets/static_page.py pack).
async function readPayload(text) {
  const bytes = Uint8Array.from(atob(text.trim()), (c) => c.charCodeAt(0));
  const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"));
  return JSON.parse(await new Response(stream).text());
}
