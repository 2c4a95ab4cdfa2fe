// The page of `sonde report` (report/src/page.cpp inlines it after Vega, Vega-Lite and
// vega-embed, and the data as JSON in #sonde-data). Each panel is a <section data-panel=KIND>;
// every plot is a Vega-Lite spec drawn as SVG, and each mark's aria-label carries its values
// (encoding "description"), so what the page shows can be read back from its DOM.
// window.sondeReport.ready resolves once every plot is drawn.
(function () {
  "use strict";
  const data = JSON.parse(document.getElementById("sonde-data").textContent);
  const report = (window.sondeReport = { data, views: {}, ready: null });
  const main = document.getElementById("main");
  const pending = [];

  // Control characters of a token are shown escaped; a token is never empty on the page.
  const printable = (s) => s.replace(/[\x00-\x1f\x7f]/g, (c) => "\\x" + c.charCodeAt(0).toString(16).padStart(2, "0"));
  const tok = (id) => printable(data.tokens[String(id)] ?? "#" + id) || "\u2205";
  const fmt = (x, d = 4) => (x === null || x === undefined ? "-" : Number(x).toPrecision(d));

  function el(tag, attrs = {}, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs)) {
      if (v === undefined || v === null) continue;
      if (k === "text") e.textContent = v;
      else e.setAttribute(k, v);
    }
    for (const c of children) if (c !== null && c !== undefined) e.append(c);
    return e;
  }

  function panel(kind, title, help) {
    const s = el("section", { class: "panel", "data-panel": kind, id: "panel-" + kind },
      el("h2", { text: title }), help ? el("p", { class: "help", text: help }) : null);
    main.append(s);
    return s;
  }

  function plot(container, name, spec) {
    const div = el("div", { class: "plot", "data-plot": name });
    container.append(div);
    const full = Object.assign({ $schema: "https://vega.github.io/schema/vega-lite/v6.json", config: { view: { stroke: null } } }, spec);
    const p = vegaEmbed(div, full, { renderer: "svg", actions: false }).then((r) => {
      report.views[name] = r.view;
      return r.view;
    });
    pending.push(p);
    return p;
  }

  // A range input over `values` (the steps kept); calls on(value) now and on each move.
  function slider(container, name, values, label, on) {
    const out = el("span", { class: "slider-value" });
    const input = el("input", { type: "range", min: 0, max: values.length - 1, value: values.length - 1, step: 1, "data-slider": name });
    const update = () => {
      const v = values[Number(input.value)];
      out.textContent = `${label} ${v}`;
      on(v);
    };
    input.addEventListener("input", update);
    container.append(el("div", { class: "slider" }, input, out));
    update();
    return input;
  }

  // Column label of position p: "p token" (unique, so Vega keeps one column per position).
  const column = (tokens, p, bin) => `${p} ${tok(tokens[p] ?? -1)}${bin > 1 ? "\u2026" : ""}`;
  const promptTitle = (p) => `prompt ${p.id} (index ${p.prompt_idx})`;

  function runCard() {
    const r = data.run;
    const s = panel("run", "Run", `${r.file}: ${r.kind} file`);
    const keys = ["model_arch", "model_path", "backend", "compute", "compute_dtype", "storage_dtype", "weight_processing",
      "sonde_version", "run_config_sha256", "tokenizer_sha256", "diffusion_mode", "diffusion_cache", "block_size",
      "threshold", "tokens_per_step", "refresh_every", "kind", "complete", "schema"];
    const table = el("table", { class: "card" });
    const row = (k, v) => table.append(el("tr", { "data-key": k }, el("th", { text: k }), el("td", { text: String(v) })));
    for (const k of keys) if (k in r.attrs) row(k, r.attrs[k]);
    row("edits", r.attrs.edits_json ?? "none");
    for (const [k, v] of Object.entries(r.attrs))
      if (!keys.includes(k) && !["edits_json", "run_config_json", "config_json", "layout"].includes(k)) row(k, v);
    s.append(table);
    for (const k of ["run_config_json", "config_json"]) {
      if (!(k in r.attrs)) continue;
      let text = r.attrs[k];
      try { text = JSON.stringify(JSON.parse(text), null, 2); } catch (e) { /* shown as written */ }
      s.append(el("details", { "data-key": k }, el("summary", { text: k === "run_config_json" ? "options (run_config_json)" : "model config (config_json)" }), el("pre", { text })));
    }
    for (const f of data.others) s.append(el("p", { class: "other", text: `${f.role}: ${f.file} (${f.attrs.model_arch ?? "?"}, ${f.attrs.kind ?? f.attrs.schema ?? ""})` }));
    const notes = data.notes.concat(data.tokenizer ? [] : ["no tokenizer found (--model DIR): tokens shown as #id"]);
    if (notes.length) s.append(el("ul", { class: "notes" }, ...notes.map((n) => el("li", { text: n }))));
  }

  function timelinePanel(prompts) {
    const s = panel("timeline", "Diffusion timeline",
      "Generated slots (x) by denoising step (y): masked, committed at this step (coloured by the confidence it was committed with; when steps are sampled, since the previous step shown), committed earlier; \u00d7 marks rows served from the cache (fresh = 0). The slider shows the canvas after that step.");
    for (const p of prompts) {
      const t = p.timeline;
      const tokens = t.canvas[t.canvas.length - 1];
      const cells = [];
      // With steps sampled (docs/report.md), "now" is: since the previous step shown.
      const since = (i) => (i > 0 ? t.steps[i - 1] : -Infinity);
      t.steps.forEach((step, i) => {
        for (let q = t.prompt_len; q < tokens.length; q++) {
          const masked = t.canvas[i][q] === t.mask_id;
          const now = t.commit_step[q] > since(i) && t.commit_step[q] <= step;
          const state = masked ? "masked" : now ? "committed now" : "committed earlier";
          const confidence = now ? t.confidence[q] : null;
          cells.push({ step, pos: q, col: column(tokens, q, 1), state, confidence,
            desc: `step ${step}; pos ${q}; ${state}; token ${t.canvas[i][q]}; commit step ${t.commit_step[q]}; confidence ${confidence ?? "none"}` });
        }
      });
      const stale = t.stale.filter(([st, q]) => t.steps.includes(st) && q >= t.prompt_len)
        .map(([step, pos]) => ({ step, pos, col: column(tokens, pos, 1), desc: `stale step ${step}; pos ${pos}` }));
      const name = `timeline-${p.entry}`;
      const x = { field: "col", type: "ordinal", sort: { field: "pos", op: "min" }, title: "position and final token", axis: { labelAngle: -60, labelLimit: 80 } };
      const y = { field: "step", type: "ordinal", title: "step" };
      const sub = el("div", { class: "prompt", "data-entry": p.entry }, el("h3", { text: promptTitle(p) }));
      s.append(sub);
      plot(sub, name, {
        params: [{ name: "cur", value: t.steps[t.steps.length - 1] }],
        layer: [
          { data: { values: cells }, mark: { type: "rect" }, encoding: { x, y,
            color: { field: "state", type: "nominal", scale: { domain: ["masked", "committed earlier", "committed now"], range: ["#d9d9d9", "#9ecae1", "#08519c"] }, title: "slot" },
            description: { field: "desc" }, tooltip: [{ field: "pos" }, { field: "step" }, { field: "state" }, { field: "confidence", format: ".3f" }] } },
          { data: { values: cells.filter((c) => c.confidence !== null) }, mark: { type: "rect" }, encoding: { x, y,
            color: { field: "confidence", type: "quantitative", scale: { scheme: "viridis" }, title: "commit confidence" },
            description: { field: "desc" }, tooltip: [{ field: "pos" }, { field: "step" }, { field: "confidence", format: ".3f" }] } },
          { data: { values: stale }, mark: { type: "point", shape: "cross", color: "#e6550d", size: 40, filled: true },
            encoding: { x, y, description: { field: "desc" } } },
          { data: { values: t.steps.map((step) => ({ step })) }, transform: [{ filter: "datum.step == cur" }],
            mark: { type: "rule", color: "#e6550d", strokeWidth: 2 }, encoding: { y } },
        ],
        width: Math.max(240, 14 * (tokens.length - t.prompt_len)), height: Math.max(120, 12 * t.steps.length),
      });
      const text = el("div", { class: "canvas-text", "data-canvas": p.entry });
      slider(sub, name, t.steps, "canvas after step", (step) => {
        const i = t.steps.indexOf(step);
        text.replaceChildren(...t.canvas[i].map((id, q) => {
          const masked = id === t.mask_id, prompt = q < t.prompt_len;
          const cls = prompt ? "prompt" : masked ? "masked" : t.commit_step[q] > since(i) && t.commit_step[q] <= step ? "now" : "committed";
          return el("span", { class: "slot " + cls, "data-pos": q, "data-id": id, "data-commit-step": t.commit_step[q],
            "data-confidence": t.confidence[q] ?? "", title: `pos ${q}, committed at step ${t.commit_step[q]}`, text: masked ? "\u2591" : tok(id) });
        }));
        const view = report.views[name];
        if (view) view.signal("cur", step).runAsync();
      });
      sub.append(text);
    }
  }

  function normsPanel(prompts) {
    const s = panel("norms", "Row norms per hook", "The L2 norm of every captured row: layer (y) by position (x), the token under each column; diffusion dumps with several rows per position add a step slider.");
    for (const p of prompts) {
      const sub = el("div", { class: "prompt", "data-entry": p.entry }, el("h3", { text: promptTitle(p) }));
      s.append(sub);
      p.norms.forEach((g, gi) => {
        const c = g.cells;
        const values = c.norm.map((norm, i) => ({ layer: c.layer[i], pos: c.pos[i], step: c.step[i], norm, fresh: c.fresh[i],
          col: column(p.tokens, c.pos[i], g.bin),
          desc: `${g.hook}; layer ${c.layer[i]}; pos ${c.pos[i]}; step ${c.step[i]}; norm ${norm}; fresh ${c.fresh[i]}` }));
        const steps = [...new Set(c.step)].sort((a, b) => a - b);
        const name = `norms-${p.entry}-${gi}`;
        const x = { field: "col", type: "ordinal", sort: { field: "pos", op: "min" }, title: "position and token", axis: { labelAngle: -60, labelLimit: 80 } };
        const y = { field: "layer", type: "ordinal", sort: { field: "layerNo", op: "min" }, title: "layer" };
        values.forEach((v) => (v.layerNo = Number(v.layer) || 0));
        const cols = new Set(values.map((v) => v.pos)).size;
        const box = el("div", { class: "hook", "data-hook": g.hook }, el("h4", { text: g.hook + (g.bin > 1 ? ` (positions in bins of ${g.bin})` : "") }));
        sub.append(box);
        const filter = g.by_step ? [{ filter: "datum.step == cur" }] : [];
        plot(box, name, {
          params: [{ name: "cur", value: steps[steps.length - 1] }],
          data: { values }, transform: filter,
          layer: [
            { mark: "rect", encoding: { x, y, color: { field: "norm", type: "quantitative", scale: { scheme: "viridis" }, title: "norm" },
              description: { field: "desc" }, tooltip: [{ field: "layer" }, { field: "pos" }, { field: "col", title: "token" }, { field: "step" }, { field: "norm", format: ".4g" }, { field: "fresh" }] } },
            { transform: [{ filter: "datum.fresh == 0" }], mark: { type: "point", shape: "cross", color: "#e6550d", size: 30, filled: true }, encoding: { x, y } },
          ],
          width: Math.max(240, 14 * cols), height: Math.max(40, 16 * g.layers.length),
        });
        if (g.by_step) slider(box, name, steps, "step", (step) => {
          const view = report.views[name];
          if (view) view.signal("cur", step).runAsync();
        });
      });
    }
  }

  // Colours from the plotting library's own scheme, low scores dark: log-probabilities from -10
  // to 0; confidences between the prompt's lowest and highest (an algorithm's confidence may be a
  // probability, a margin or a negative entropy).
  function scaler(scored, kind) {
    if (kind === "log-probability") return (x) => Math.min(1, Math.max(0, 1 + x / 10));
    const xs = scored.map((t) => t.score), lo = Math.min(...xs), hi = Math.max(...xs);
    return (x) => (hi > lo ? (x - lo) / (hi - lo) : 1);
  }
  const colour = (t) => vega.scheme("viridis")(0.15 + 0.85 * t);

  function textPanel(prompts) {
    const s = panel("text", "Generated text", "Each generated token coloured by its log-probability (autoregressive, from hook_logits; dark at -10 and below, bright at 0) or the confidence it was committed with (diffusion, from diffusion.hook_confidence; dark at the prompt's lowest, bright at its highest); hover for the value and the top alternatives.");
    for (const p of prompts) {
      const scored = new Map(p.scored.map((t) => [t.pos, t]));
      const scale = scaler(p.scored, p.score_kind);
      const first = p.scored.length ? Math.min(...p.scored.map((t) => t.pos)) : p.tokens.length;
      const box = el("div", { class: "scored-text", "data-entry": p.entry, "data-score-kind": p.score_kind });
      const ids = p.timeline ? p.timeline.canvas[p.timeline.canvas.length - 1] : p.tokens;
      ids.forEach((id, q) => {
        const t = scored.get(q);
        if (!t) return box.append(el("span", { class: q < first ? "tok prompt" : "tok", "data-pos": q, "data-id": id, text: tok(id) }));
        const alts = t.alts.map(([a, pr]) => `${tok(a)} ${fmt(pr, 3)}`).join(", ");
        const tip = `${p.score_kind} ${fmt(t.score)}` + (alts ? `; top: ${alts}` : "");
        const span = el("span", { class: "tok scored", "data-pos": q, "data-id": t.id, "data-score": t.score, title: tip, text: tok(t.id) });
        span.style.background = colour(scale(t.score));
        span.style.color = scale(t.score) < 0.5 ? "#fff" : "#000";
        box.append(span);
      });
      s.append(el("div", { class: "prompt", "data-entry": p.entry }, el("h3", { text: promptTitle(p) + ": " + p.score_kind }), box));
    }
  }

  function lensPanel(lens, li) {
    const s = panel("lens", "Logit lens", `${lens.file}: each layer's most probable next token (text) and its probability (colour) at each position; hover for the top 3.`);
    const L = lens.layers, T = lens.positions;
    const steps = lens.steps.length ? lens.steps : [0];
    const values = [];
    steps.forEach((step, si) => {
      for (let l = 0; l < L; l++) for (let t = 0; t < T; t++) {
        const c = (si * L + l) * T + t, ids = lens.top_ids[c], probs = lens.top_probs[c];
        values.push({ step, layer: l, pos: t, col: column(lens.tokens, t, 1), top: tok(ids[0]), top_id: ids[0], prob: probs[0],
          alts: ids.map((id, k) => `${tok(id)} ${fmt(probs[k], 3)}`).join(", "),
          desc: `step ${step}; layer ${l}; pos ${t}; top ${ids[0]}; prob ${probs[0]}` });
      }
    });
    const name = `lens-${li}`;
    const x = { field: "col", type: "ordinal", sort: { field: "pos", op: "min" }, title: "position and input token", axis: { labelAngle: -60, labelLimit: 80 } };
    const y = { field: "layer", type: "ordinal", sort: "descending", title: "layer" };
    plot(s, name, {
      params: [{ name: "cur", value: steps[steps.length - 1] }],
      data: { values }, transform: [{ filter: "datum.step == cur" }],
      encoding: { x, y },
      layer: [
        { mark: "rect", encoding: { color: { field: "prob", type: "quantitative", scale: { scheme: "blues", domain: [0, 1] }, title: "top probability" },
          description: { field: "desc" }, tooltip: [{ field: "layer" }, { field: "pos" }, { field: "alts", title: "top tokens" }] } },
        { mark: { type: "text", fontSize: 9, limit: 44 }, encoding: { text: { field: "top" }, color: { condition: { test: "datum.prob > 0.5", value: "white" }, value: "black" } } },
      ],
      width: Math.max(240, 48 * T), height: Math.max(60, 18 * L),
    });
    if (lens.steps.length) slider(s, name, steps, "step", (step) => {
      const view = report.views[name];
      if (view) view.signal("cur", step).runAsync();
    });
  }

  function statsPanel(st, si) {
    const s = panel("stats", "Statistics", `${st.file}: per feature the mean and variance over every row seen; outliers (modified z-score above 3.5 in either, Iglewicz and Hoaglin 1993) in orange.`);
    st.hooks.forEach((h, hi) => {
      const values = h.feature.map((f, i) => ({ feature: f, mean: h.mean[i], var: h.var[i], outlier: h.outlier[i] ? "outlier" : "typical",
        desc: `feature ${f}; mean ${h.mean[i]}; var ${h.var[i]}; outlier ${h.outlier[i]}` }));
      const box = el("div", { class: "hook", "data-hook": h.hook, "data-outliers": h.outliers.join(",") },
        el("h4", { text: `${h.hook}: ${h.count} rows, ${h.features} features, ${h.outliers.length} outliers` + (h.outliers.length ? ` (${h.outliers.slice(0, 20).join(", ")}${h.outliers.length > 20 ? ", \u2026" : ""})` : "") }));
      s.append(box);
      const chart = (field, title) => ({
        mark: { type: "point", filled: true, size: 12 }, width: 420, height: 160,
        encoding: { x: { field: "feature", type: "quantitative", title: "feature" }, y: { field, type: "quantitative", title },
          color: { field: "outlier", type: "nominal", scale: { domain: ["typical", "outlier"], range: ["#4c78a8", "#f58518"] }, title: null },
          description: { field: "desc" }, tooltip: [{ field: "feature" }, { field: "mean", format: ".4g" }, { field: "var", format: ".4g" }] },
      });
      plot(box, `stats-${si}-${hi}`, { data: { values }, hconcat: [chart("mean", "mean"), chart("var", "variance")] });
    });
  }

  runCard();
  const prompts = data.acts ? data.acts.prompts : [];
  if (prompts.some((p) => p.timeline)) timelinePanel(prompts.filter((p) => p.timeline));
  if (prompts.some((p) => p.norms.length)) normsPanel(prompts.filter((p) => p.norms.length));
  if (prompts.some((p) => p.scored && p.scored.length)) textPanel(prompts.filter((p) => p.scored && p.scored.length));
  data.lens.forEach(lensPanel);
  data.stats.forEach(statsPanel);
  report.ready = Promise.all(pending).then(() => document.body.setAttribute("data-ready", "1"));
})();
