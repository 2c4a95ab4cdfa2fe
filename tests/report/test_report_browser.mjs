// sonde report's pages in a real browser (issue 32): Debian's chromium, driven by puppeteer-core
// (pinned in tests/report/node; `npm ci --prefix tests/report/node` installs it, no browser is
// downloaded). Files from the tiny presets: a Qwen2 generate dump (with hook_logits), a Dream
// dump with --diffusion-capture all in block-cache mode (reused rows), a lens file and a stats
// file. For each page: no console error, no request but the page itself (every other one is
// blocked and counted), every expected panel, the DOM's values equal to what
// tests/report/expect.py reads from the files with h5py, and one screenshot per panel, checked
// non-blank, written to SCREENSHOT_DIR (docs/report.md shows them).
// Usage: node test_report_browser.mjs SONDE_BIN SCREENSHOT_DIR. Exit 0 pass, 1 fail, 77 skip.
import { execFileSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import assert from "node:assert/strict";

const here = dirname(fileURLToPath(import.meta.url));
const [sonde, shotDir] = process.argv.slice(2);
const chromium = "/usr/bin/chromium";
const skip = (why) => {
  console.log(`test_report_browser: Skipped\nskipped: missing package ${why}\n[  SKIPPED ] test_report_browser`);
  process.exit(77);
};
if (!existsSync(chromium)) skip("chromium (apt-get install -y chromium)");
let puppeteer;
try {
  puppeteer = createRequire(join(here, "node", "package.json"))("puppeteer-core");
} catch (e) {
  skip("npm puppeteer-core (run npm ci --prefix tests/report/node)");
}
const watchdog = setTimeout(() => {
  console.error("test_report_browser: no end after 240 s");
  process.exit(1);
}, 240_000);

const python = existsSync("/usr/bin/python3") ? "/usr/bin/python3" : "python3";
const root = mkdtempSync(join(tmpdir(), "sonde-report-"));
const at = (name) => join(root, name);
const run = (...args) => execFileSync(sonde, args, { encoding: "utf8", timeout: 120_000 });
const expect = (kind, file) => JSON.parse(execFileSync(python, [join(here, "expect.py"), kind, file], { encoding: "utf8", maxBuffer: 1 << 28 }));
mkdirSync(shotDir, { recursive: true });

// The files, from the tiny presets.
run("make-model", "--arch", "qwen2", "--preset", "tiny", "--out", at("qwen2"));
run("make-model", "--arch", "dream", "--preset", "tiny", "--out", at("dream"));
run("generate", "--model", at("qwen2"), "--prompt", "def add(a, b):", "--max-new-tokens", "6", "--temperature", "0",
  "--hooks", "blocks.*.hook_resid_post,hook_logits", "--out", at("gen.h5"));
run("generate", "--model", at("dream"), "--prompt", "def f(x):", "--max-new-tokens", "12", "--steps", "6",
  "--diffusion-capture", "all", "--diffusion-mode", "block-cache", "--block-size", "4",
  "--hooks", "blocks.*.hook_resid_post,diffusion.hook_confidence", "--out", at("dream.h5"));
run("lens", "--model", at("qwen2"), "--text", "def add(a, b):", "--out", at("lens.h5"));
run("generate", "--model", at("qwen2"), "--prompt", "def add(a, b): return", "--max-new-tokens", "4",
  "--hooks", "blocks.*.hook_resid_post", "--stats", at("stats.h5"));
const printed = run("report", at("gen.h5"), "--lens", at("lens.h5"), "--stats", at("stats.h5"), "--out", at("gen.html"));
assert.match(printed, /panels: run, norms, text, lens, stats\)/);
assert.match(run("report", at("dream.h5"), "--out", at("dream.html")), /panels: run, timeline, norms, text\)/);

const browser = await puppeteer.launch({
  executablePath: chromium, headless: true,
  args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", `--user-data-dir=${at("chromium-profile")}`],
});
let failed = false;
async function check(name, fn) {
  try {
    await fn();
    console.log(`ok   ${name}`);
  } catch (e) {
    failed = true;
    console.log(`FAIL ${name}: ${e.stack || e}`);
  }
}

// Opens a page with every request but its own blocked; returns the page and its problems.
async function open(file) {
  const page = await browser.newPage();
  const problems = { console: [], blocked: [] };
  page.on("console", (m) => { if (m.type() === "error" || m.type() === "warn") problems.console.push(`${m.type()}: ${m.text()}`); });
  page.on("pageerror", (e) => problems.console.push(`pageerror: ${e.message}`));
  await page.setRequestInterception(true);
  page.on("request", (r) => {
    if (r.url() === `file://${file}`) return r.continue();
    problems.blocked.push(r.url().slice(0, 120));
    r.abort();
  });
  await page.setViewport({ width: 1200, height: 800 });
  await page.goto(`file://${file}`, { waitUntil: "load" });
  await page.evaluate(() => window.sondeReport.ready);
  return { page, problems };
}

// "k v; k v; ..." of a mark's aria-label (report.js writes every value in full).
const parse = (label) => Object.fromEntries(label.split("; ").map((kv) => { const i = kv.lastIndexOf(" "); return [kv.slice(0, i), kv.slice(i + 1)]; }));
// The marks' labels of one plot (axes and legends have labels of their own: "X-axis titled ...").
const labels = (page, plot, prefix) => page.$$eval(`[data-plot="${plot}"] [aria-label]`,
  (els, prefix) => els.map((e) => e.getAttribute("aria-label")).filter((l) => l.startsWith(prefix)), prefix);
const close = (a, b, tol, what) => assert.ok(Math.abs(Number(a) - b) <= tol * Math.max(1, Math.abs(b)), `${what}: page ${a}, file ${b}`);
async function moveSlider(page, name, index) {
  await page.$eval(`[data-slider="${name}"]`, (el, i) => { el.value = String(i); el.dispatchEvent(new Event("input")); }, index);
  await page.evaluate((n) => window.sondeReport.views[n].runAsync(), name);
}

// A screenshot of each panel, non-blank: at least 2% of its pixels differ from the corner's
// colour and it has at least 8 colours (decoded in the browser from the PNG itself).
async function screenshots(page, prefix, panels) {
  const shots = [];
  for (const p of panels) {
    const el = await page.$(`section[data-panel="${p}"]`);
    const path = join(shotDir, `${prefix}-${p}.png`);
    const png = await el.screenshot({ encoding: "base64" });
    writeFileSync(path, Buffer.from(png, "base64"));
    shots.push([path, png]);
  }
  // Decoded on a page of its own (the report's page blocks every other request, data: URLs too),
  // opened after the screenshots: a page in the background is not painted.
  const viewer = await browser.newPage();
  for (const [path, png] of shots) {
    const { inked, colours } = await viewer.evaluate(async (b64) => {
      const img = new Image();
      img.src = "data:image/png;base64," + b64;
      await img.decode();
      const c = document.createElement("canvas");
      c.width = img.width;
      c.height = img.height;
      const g = c.getContext("2d");
      g.drawImage(img, 0, 0);
      const d = g.getImageData(0, 0, c.width, c.height).data;
      const seen = new Set();
      let inked = 0;
      for (let i = 0; i < d.length; i += 4) {
        if (Math.abs(d[i] - d[0]) + Math.abs(d[i + 1] - d[1]) + Math.abs(d[i + 2] - d[2]) > 30) inked++;
        seen.add((d[i] << 16) | (d[i + 1] << 8) | d[i + 2]);
      }
      return { inked: inked / (d.length / 4), colours: seen.size };
    }, png);
    assert.ok(inked > 0.02 && colours >= 8, `${path} looks blank: ${(100 * inked).toFixed(1)}% inked, ${colours} colours`);
  }
  await viewer.close();
}

try {
  await check("qwen2 generate dump + lens + stats: panels, run card, norms, log-probs, lens, stats, offline", async () => {
    const { page, problems } = await open(at("gen.html"));
    const panels = await page.$$eval("section[data-panel]", (s) => s.map((x) => x.dataset.panel));
    assert.deepEqual(panels, ["run", "norms", "text", "lens", "stats"]);
    const acts = expect("acts", at("gen.h5"));
    for (const k of ["model_arch", "backend", "sonde_version", "run_config_sha256", "tokenizer_sha256", "storage_dtype"])
      assert.equal(await page.$eval(`tr[data-key="${k}"] td`, (e) => e.textContent), String(acts.attrs[k]), k);
    // Every heatmap cell's norm (one row per position: no step axis).
    const cells = (await labels(page, "norms-0-0", "blocks")).map(parse);
    const want = acts.prompts[0].norms;
    assert.equal(cells.length, want.length);
    for (const w of want) {
      const c = cells.find((c) => c.layer === w.layer && Number(c.pos) === w.pos);
      assert.ok(c, `no cell layer ${w.layer} pos ${w.pos}`);
      close(c.norm, w.norm, 1e-5, `norm layer ${w.layer} pos ${w.pos}`);
    }
    // Each generated token's log-probability.
    const lp = acts.prompts[0].logprob;
    assert.ok(Object.keys(lp).length >= 5);
    for (const [pos, v] of Object.entries(lp))
      close(await page.$eval(`.scored-text span[data-pos="${pos}"]`, (e) => e.dataset.score), v, 1e-5, `log-prob at ${pos}`);
    // The lens: top token and probability of every layer and position.
    const lens = expect("lens", at("lens.h5"));
    const lcells = (await labels(page, "lens-0", "step")).map(parse);
    assert.equal(lcells.length, lens.cells.length);
    for (const w of lens.cells) {
      const c = lcells.find((c) => Number(c.layer) === w.layer && Number(c.pos) === w.pos);
      assert.equal(Number(c.top), w.top, `lens top at layer ${w.layer} pos ${w.pos}`);
      close(c.prob, w.prob, 1e-6, `lens prob at layer ${w.layer} pos ${w.pos}`);
    }
    // Statistics: outliers and every feature's mean and variance.
    const stats = expect("stats", at("stats.h5"));
    for (const [hook, s] of Object.entries(stats)) {
      assert.equal(await page.$eval(`[data-panel="stats"] [data-hook="${hook}"]`, (e) => e.dataset.outliers), s.outliers.join(","), hook);
      const hi = Object.keys(stats).indexOf(hook);
      const marks = (await labels(page, `stats-0-${hi}`, "feature")).map(parse);
      for (const f of [0, 7, s.mean.length - 1]) {
        const m = marks.find((m) => Number(m.feature) === f);
        close(m.mean, s.mean[f], 1e-9, `${hook} mean ${f}`);
        close(m.var, s.var[f], 1e-9, `${hook} var ${f}`);
        assert.equal(Number(m.outlier), s.outliers.includes(f) ? 1 : 0);
      }
    }
    await screenshots(page, "qwen2", panels);
    assert.deepEqual(problems, { console: [], blocked: [] });
    await page.close();
  });

  await check("dream block-cache dump: timeline commit steps, confidence, canvas at a step, stale rows, norms per step", async () => {
    const { page, problems } = await open(at("dream.html"));
    const panels = await page.$$eval("section[data-panel]", (s) => s.map((x) => x.dataset.panel));
    assert.deepEqual(panels, ["run", "timeline", "norms", "text"]);
    const acts = expect("acts", at("dream.h5"));
    const p = acts.prompts[0];
    assert.equal(await page.$eval('tr[data-key="diffusion_mode"] td', (e) => e.textContent), "block-cache");
    // Five slots' commit step and confidence, from the rows committed at each step (kind 4).
    const slots = Object.keys(p.commit).map(Number);
    assert.ok(slots.length >= 12, `${slots.length} committed slots`);
    for (const q of [slots[0], slots[3], slots[6], slots[9], slots[slots.length - 1]]) {
      const d = await page.$eval(`[data-canvas="0"] .slot[data-pos="${q}"]`, (e) => ({ ...e.dataset }));
      assert.equal(Number(d.commitStep), p.commit[q], `commit step of slot ${q}`);
      close(d.confidence, p.confidence[q], 1e-6, `confidence of slot ${q}`);
    }
    // The canvas at step 2 (the slider moved there), slot by slot; masked slots shown as such.
    const steps = Object.keys(p.canvas).map(Number).sort((a, b) => a - b);
    await moveSlider(page, "timeline-0", 2);
    const shown = await page.$$eval('[data-canvas="0"] .slot', (els) => els.map((e) => ({ id: Number(e.dataset.id), cls: e.className, text: e.textContent })));
    assert.deepEqual(shown.map((s) => s.id), p.canvas[steps[2]]);
    const mask = JSON.parse(acts.attrs.config_json).mask_token_id;
    shown.forEach((s, q) => assert.equal(s.cls.includes("masked"), p.canvas[steps[2]][q] === mask, `slot ${q} masked`));
    assert.ok(shown.some((s) => s.cls.includes("masked")) && shown.some((s) => s.cls.includes("now")));
    // Reused rows (fresh = 0) are marked on the timeline: one cross per stale row of a generated slot
    // (the prompt's rows, kinds 0 and 2, are not on it).
    const stale = await labels(page, "timeline-0", "stale");
    assert.ok(stale.length > 0);
    const rows = execFileSync(python, ["-c", `import h5py,numpy as n; f=h5py.File("${at("dream.h5")}"); r=f["rows"]; k=r["kind"][:]; print(int(((r["fresh"][:]==0)&(k!=0)&(k!=2)).sum()))`], { encoding: "utf8" });
    assert.equal(stale.length, Number(rows));
    // Norms at the last step, then at step 1 after the slider moves.
    for (const [index, step] of [[steps.length - 1, steps[steps.length - 1]], [1, steps[1]]]) {
      await moveSlider(page, "norms-0-0", index);
      const cells = (await labels(page, "norms-0-0", "blocks")).map(parse);
      const want = p.norms.filter((n) => n.step === step);
      assert.equal(cells.length, want.length, `cells at step ${step}`);
      for (const w of want.filter((_, i) => i % 5 === 0)) {
        const c = cells.find((c) => c.layer === w.layer && Number(c.pos) === w.pos);
        assert.equal(Number(c.step), step);
        close(c.norm, w.norm, 1e-5, `norm at step ${step} layer ${w.layer} pos ${w.pos}`);
      }
    }
    // The generated text coloured by commit confidence.
    for (const q of slots.slice(0, 5))
      close(await page.$eval(`.scored-text span[data-pos="${q}"]`, (e) => e.dataset.score), p.confidence[q], 1e-6, `text confidence ${q}`);
    await moveSlider(page, "timeline-0", steps.length - 1);
    await screenshots(page, "dream", panels);
    assert.deepEqual(problems, { console: [], blocked: [] });
    await page.close();
  });
} finally {
  clearTimeout(watchdog);
  await browser.close();
  if (!failed && !process.env.SONDE_KEEP_TEST_FILES) rmSync(root, { recursive: true, force: true });
  else console.log(`files kept in ${root}`);
}
console.log(`screenshots in ${shotDir}`);
process.exit(failed ? 1 : 0);
