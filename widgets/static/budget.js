// HBM budget explorer (chapter 1). Data flow: Python (pagedkv.sizing) precomputed one row per
// combination of the four controls into the JSON block next to the chart; this script only
// reads the controls, looks the row up and redraws. No formula lives here. Models and GPUs
// show by name (spec.labels); each slider reads out its value in its unit, and the readout
// under the bar is announced when it changes.
function pagedkvBudget(uid) {
  const root = document.getElementById(uid);
  const spec = JSON.parse(document.getElementById(uid + "-data").textContent);
  const name = (id) => spec.labels?.[id] || id;
  const el = (tag, attrs, text) => {
    const e = document.createElement(tag);
    Object.assign(e, attrs || {});
    if (text !== undefined) e.textContent = text;
    return e;
  };
  const labelled = (label, control, extra) => {
    const wrap = el("label", {}, label + " ");
    wrap.append(control, ...(extra ? [extra] : []));
    return wrap;
  };
  const select = (label, values, value) => {
    const s = el("select", { className: "pagedkv-" + label.replace(/\W+/g, "-").toLowerCase() });
    values.forEach((v) => s.appendChild(el("option", { value: v, selected: String(v) === String(value) }, name(v))));
    return [labelled(label, s), s];
  };
  const range = (label, values, value, fmt) => {
    const r = el("input", { type: "range", min: 0, max: values.length - 1, step: 1,
      value: Math.max(0, values.map(String).indexOf(String(value))) });
    r.className = "pagedkv-" + label.replace(/\W+/g, "-").toLowerCase();
    const out = el("output", {});
    const sync = () => {
      out.textContent = fmt(values[r.value]);
      r.setAttribute("aria-valuetext", fmt(values[r.value]));
    };
    r.addEventListener("input", sync);
    sync();
    return [labelled(label, r, out), r];
  };
  const kTok = (c) => (c >= 1024 ? c / 1024 + "K" : c) + " tokens";
  const [mWrap, mSel] = select("model", spec.models, spec.initial[0]);
  const [gWrap, gSel] = select("GPU", spec.gpus, spec.initial[1]);
  const [fWrap, fRange] = range("mem_fraction_static", spec.fractions, spec.initial[2], (v) => String(Number(v)));
  const [cWrap, cRange] = range("context", spec.contexts, spec.initial[3], kTok);
  const controls = el("div", { className: "pagedkv-controls" });
  controls.append(mWrap, gWrap, fWrap, cWrap);
  const chart = el("div", { className: "pagedkv-budget-chart" });
  const readout = el("p", { className: "pagedkv-readout" });
  readout.setAttribute("aria-live", "polite");
  root.append(controls, chart, readout);

  const colors = ["#4477AA", "#CCBB44", "#228833"];
  const names = ["weights", "reserve (1 - mem_fraction_static)", "KV pool"];
  function draw() {
    const f = spec.fractions[fRange.value], c = spec.contexts[cRange.value];
    const row = spec.table[[mSel.value, gSel.value, f, c].join("|")];
    if (row === "context") {
      Plotly.purge(chart);
      readout.textContent = `${name(mSel.value)} was trained for shorter contexts than ${kTok(c)}: `
        + "SGLang refuses a longer --context-length unless told to override it.";
      return;
    }
    if (!row) {
      Plotly.purge(chart);
      readout.textContent = `${name(mSel.value)}'s weights do not fit in ${Number(f)} of the ${name(gSel.value)}: `
        + "SGLang stops at start-up with 'Not enough memory'. Raise mem_fraction_static or pick a larger GPU.";
      return;
    }
    const traces = names.map((label, i) => ({
      type: "bar", orientation: "h", name: label, x: [Math.max(row[i], 0)], y: ["HBM"], marker: { color: colors[i] },
      hovertemplate: label + ": %{x:.2f} GiB<extra></extra>",
    }));
    Plotly.react(chart, traces, {
      barmode: "stack", height: 240, margin: { l: 50, r: 10, t: 10, b: 40 },
      xaxis: { title: { text: "GiB (2^30 bytes)" } },
      legend: { orientation: "h", y: -0.5, traceorder: "normal", itemclick: false, itemdoubleclick: false },
    }, { displayModeBar: false, responsive: true });
    window.pagedkvFigures?.enhance(chart);  // the book's dark theme and phone layout
    readout.textContent = `KV pool ${row[2].toFixed(2)} GiB = ${row[3].toLocaleString("en-US")} tokens`
      + ` (max_total_num_tokens); B_max at ${kTok(c)}: ${row[4]} requests.`;
  }
  [mSel, gSel, fRange, cRange].forEach((e) => e.addEventListener("input", draw));
  draw();
}
