// HBM budget explorer (chapter 1). Data flow: Python (pagedkv.sizing) precomputed one row per
// combination of the four controls into the JSON block next to the chart; this script only
// reads the controls, looks the row up and redraws. No formula lives here.
function pagedkvBudget(uid) {
  const root = document.getElementById(uid);
  const spec = JSON.parse(document.getElementById(uid + "-data").textContent);
  const el = (tag, attrs, text) => {
    const e = document.createElement(tag);
    Object.assign(e, attrs || {});
    if (text !== undefined) e.textContent = text;
    return e;
  };
  const select = (label, values, value, fmt) => {
    const s = el("select", { className: "pagedkv-" + label.replace(/\W+/g, "-").toLowerCase() });
    values.forEach((v) => s.appendChild(el("option", { value: v, selected: String(v) === String(value) }, fmt ? fmt(v) : v)));
    const wrap = el("label", {}, label + " ");
    wrap.style.marginRight = "1.2em";
    wrap.appendChild(s);
    return [wrap, s];
  };
  const range = (label, values, value, fmt) => {
    const r = el("input", { type: "range", min: 0, max: values.length - 1, step: 1,
      value: Math.max(0, values.map(String).indexOf(String(value))) });
    r.className = "pagedkv-" + label.replace(/\W+/g, "-").toLowerCase();
    const out = el("span", {});
    const wrap = el("label", {}, label + " ");
    wrap.style.marginRight = "1.2em";
    wrap.append(r, out);
    const sync = () => { out.textContent = " " + fmt(values[r.value]); };
    r.addEventListener("input", sync);
    sync();
    return [wrap, r];
  };
  const kTok = (c) => (c >= 1024 ? c / 1024 + "K" : c) + " tokens";
  const [mWrap, mSel] = select("model", spec.models, spec.initial[0]);
  const [gWrap, gSel] = select("GPU", spec.gpus, spec.initial[1]);
  const [fWrap, fRange] = range("mem_fraction_static", spec.fractions, spec.initial[2], (v) => Number(v));
  const [cWrap, cRange] = range("context", spec.contexts, spec.initial[3], kTok);
  const controls = el("div", { className: "pagedkv-controls" });
  controls.append(mWrap, gWrap, fWrap, cWrap);
  const chart = el("div", { className: "pagedkv-budget-chart" });
  const readout = el("p", { className: "pagedkv-readout" });
  root.append(controls, chart, readout);

  const colors = ["#4477AA", "#CCBB44", "#228833"];
  const names = ["weights", "reserve: 1 - mem_fraction_static (activations, CUDA graphs)", "KV pool"];
  function draw() {
    const f = spec.fractions[fRange.value], c = spec.contexts[cRange.value];
    const row = spec.table[[mSel.value, gSel.value, f, c].join("|")];
    if (row === "context") {
      Plotly.purge(chart);
      readout.textContent = `${mSel.value} was trained for shorter contexts than ${kTok(c)}: `
        + "SGLang refuses a longer --context-length unless told to override it.";
      return;
    }
    if (!row) {
      Plotly.purge(chart);
      readout.textContent = "The weights do not fit: SGLang stops at start-up with 'Not enough memory'. "
        + "Raise mem_fraction_static or pick a larger GPU.";
      return;
    }
    const traces = names.map((name, i) => ({
      type: "bar", orientation: "h", name, x: [Math.max(row[i], 0)], y: ["HBM"], marker: { color: colors[i] },
      hovertemplate: name + ": %{x:.2f} GiB<extra></extra>",
    }));
    Plotly.react(chart, traces, {
      barmode: "stack", height: 220, margin: { l: 50, r: 10, t: 10, b: 40 },
      xaxis: { title: { text: "GiB (2^30 bytes)" } }, legend: { orientation: "h", y: -0.5, traceorder: "normal" },
    }, { displayModeBar: false, responsive: true });
    readout.textContent = `KV pool ${row[2].toFixed(2)} GiB = ${row[3].toLocaleString("en-US")} tokens`
      + ` (max_total_num_tokens); B_max at ${kTok(c)}: ${row[4]} requests.`;
  }
  [mSel, gSel, fRange, cRange].forEach((e) => e.addEventListener("input", draw));
  draw();
}
