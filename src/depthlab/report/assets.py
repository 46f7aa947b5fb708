"""The report page's own stylesheet and script, inlined into every report (no file or host is ever fetched).

The script reads the page's JSON data (``<script type="application/json" id="depthlab-data">``) and only ever
writes text with ``textContent`` / ``setAttribute``, never ``innerHTML``: text from configs and tasks stays
text. What it does:

- tooltips: any element with ``data-tip`` shows that text in ``#tip`` on hover or keyboard focus;
- selection: ``#cell=KEY`` (a heat-map cell) and ``#run=ID`` (a run) fill ``#selection`` with the group's
  curves, its runs, and each run's curves (cloned from ``<template id="tpl-cell-KEY">`` / ``tpl-run-ID``) and
  attention maps (drawn here from the data, every layer and head, tokens on the axes, values on hover);
- ``.attn-slot[data-run][data-example]`` placeholders are filled with that example's attention figure;
- every ``figure.fig`` has SVG and PNG buttons: the SVG is serialized, the PNG drawn on a canvas (2×);
- ``#run-filter`` filters the rows of the runs table.
"""

CSS = r"""
:root { --ink: #1f2328; --muted: #656d76; --line: #d0d7de; --soft: #f6f8fa; --accent: #0969da; }
* { box-sizing: border-box; }
body { margin: 0; font: 14px/1.5 system-ui, -apple-system, "Segoe UI", Helvetica, Arial, sans-serif;
       color: var(--ink); background: #fff; }
header { padding: 18px 28px 10px; border-bottom: 1px solid var(--line); background: var(--soft); }
header h1 { margin: 0 0 2px; font-size: 22px; }
header p { margin: 2px 0; color: var(--muted); }
nav { position: sticky; top: 0; z-index: 5; background: #fff; border-bottom: 1px solid var(--line);
      padding: 6px 28px; display: flex; gap: 18px; flex-wrap: wrap; }
nav a { color: var(--accent); text-decoration: none; font-weight: 500; }
main { padding: 8px 28px 40px; max-width: 1480px; }
section.report-section { margin: 22px 0 34px; }
section.report-section > h2 { font-size: 18px; border-bottom: 1px solid var(--line); padding-bottom: 4px; }
.muted { color: var(--muted); }
code, .mono { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size: 12.5px; }
figure.fig { display: inline-block; margin: 6px 14px 14px 0; vertical-align: top; max-width: 100%; }
figure.fig svg { max-width: 100%; height: auto; display: block; }
figcaption { font-size: 12px; color: var(--muted); margin-top: 3px; display: flex; gap: 8px;
             align-items: baseline; flex-wrap: wrap; }
figcaption .dl { margin-left: auto; white-space: nowrap; }
button { font: inherit; font-size: 11px; padding: 1px 7px; border: 1px solid var(--line); border-radius: 4px;
         background: #fff; color: var(--ink); cursor: pointer; }
button:hover { background: var(--soft); }
a.cell { cursor: pointer; }
a.cell:hover rect:first-of-type, a.cell:focus rect:first-of-type { stroke: #1f2328; stroke-width: 1.5; }
a.cell.selected rect:first-of-type { stroke: #cf222e; stroke-width: 3; }
a.cell:focus { outline: none; }
#tip { position: absolute; z-index: 20; max-width: 460px; padding: 6px 9px; border-radius: 5px; pointer-events: none;
       background: #1f2328; color: #fff; font-size: 12px; white-space: pre-line; box-shadow: 0 2px 8px #0003; }
#selection { border: 1px solid var(--line); border-radius: 8px; padding: 10px 16px; margin-top: 10px;
             background: #fcfcfd; }
#selection h3 { margin: 4px 0; }
.run-detail { border-top: 1px dashed var(--line); margin-top: 10px; padding-top: 6px; }
.run-detail h4 { margin: 6px 0; font-size: 14px; }
table.runs { border-collapse: collapse; font-size: 12.5px; margin: 6px 0; }
table.runs th, table.runs td { border-bottom: 1px solid #eaeef2; padding: 3px 10px 3px 0; text-align: left; }
table.runs td.num, table.runs th.num { text-align: right; }
table.runs tr:hover td { background: var(--soft); }
.status-done { color: #1a7f37; } .status-failed, .status-diverged { color: #cf222e; }
.status-running, .status-pending, .status-interrupted { color: #9a6700; }
.legend { font-size: 12px; color: var(--muted); margin: 2px 0 8px; }
.legend .chance { color: #cf222e; font-weight: 600; }
#run-filter { font: inherit; padding: 3px 8px; border: 1px solid var(--line); border-radius: 5px; width: 320px; }
.run-body { display: flex; flex-wrap: wrap; gap: 4px 14px; align-items: flex-start; }
.attn-slot, .attention-block { display: inline-block; vertical-align: top; }
.grid-note { font-size: 12px; color: var(--muted); margin: 0 0 4px; }
.seed-nav { position: static; padding: 4px 0; border: 0; gap: 12px; font-size: 13px; }
.gallery-item { border: 1px solid var(--line); border-radius: 8px; padding: 8px 16px 12px; margin: 14px 0; }
.gallery-item h3 { margin: 4px 0 8px; font-size: 15px; }
.gallery-body { display: flex; gap: 18px; align-items: flex-start; flex-wrap: wrap; }
.gallery-figs { flex: 3 1 560px; min-width: 0; }
.gallery-text { flex: 1 1 300px; }
figure.gallery-png { margin: 0 0 10px; }
figure.gallery-png img { max-width: 100%; height: auto; display: block; border: 1px solid #eaeef2; }
blockquote.seed-caption { margin: 4px 0 10px; padding: 4px 12px; border-left: 3px solid var(--accent);
                          background: var(--soft); font-size: 13px; }
.warn { color: #9a6700; }
ul.todo { margin: 2px 0 8px; font-size: 13px; }
"""

JS = r"""
(() => {
  'use strict';
  const data = JSON.parse(document.getElementById('depthlab-data').textContent);
  const NS = 'http://www.w3.org/2000/svg';
  const FONT = "system-ui, -apple-system, 'Segoe UI', Helvetica, Arial, sans-serif";

  function el(tag, attrs, ...kids) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
    for (const k of kids) if (k !== null && k !== undefined) e.append(k);  // strings become text nodes
    return e;
  }
  function sv(tag, attrs, text) {
    const e = document.createElementNS(NS, tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
    if (text !== undefined) e.textContent = text;
    return e;
  }
  const has = (obj, key) => Object.prototype.hasOwnProperty.call(obj, key);
  const lossText = (x) => (x === null || x === undefined || !isFinite(x)) ? '—'
    : (x !== 0 && Math.abs(x) < 1e-3 ? Number(x).toExponential(2) : Number(x).toPrecision(3));
  const fmt = (x, d = 3) => (x === null || x === undefined || !isFinite(x)) ? '—' : Number(x).toFixed(d);

  // ------------------------------------------------------------------------------------ tooltips
  const tip = document.getElementById('tip');
  function place(x, y) {
    const maxX = window.scrollX + document.documentElement.clientWidth - tip.offsetWidth - 8;
    tip.style.left = Math.max(4, Math.min(x, maxX)) + 'px';
    tip.style.top = y + 'px';
  }
  function showTip(node) { tip.textContent = node.getAttribute('data-tip'); tip.hidden = false; }
  document.addEventListener('mouseover', (e) => {
    const t = e.target.closest ? e.target.closest('[data-tip]') : null;
    if (t) { showTip(t); place(e.pageX + 12, e.pageY + 16); } else tip.hidden = true;
  });
  document.addEventListener('mousemove', (e) => { if (!tip.hidden) place(e.pageX + 12, e.pageY + 16); });
  document.addEventListener('focusin', (e) => {
    const t = e.target.closest ? e.target.closest('[data-tip]') : null;
    if (!t) return;
    const r = t.getBoundingClientRect();
    showTip(t);
    place(r.left + window.scrollX, r.bottom + window.scrollY + 6);
  });
  document.addEventListener('focusout', () => { tip.hidden = true; });

  // ----------------------------------------------------------------------------------- downloads
  function svgText(svg) {
    const copy = svg.cloneNode(true);
    copy.setAttribute('xmlns', NS);
    copy.removeAttribute('class');
    copy.querySelectorAll('.selected').forEach((n) => n.classList.remove('selected'));
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + new XMLSerializer().serializeToString(copy);
  }
  function save(name, blob) {
    const a = el('a', { href: URL.createObjectURL(blob), download: name });
    document.body.append(a);
    a.click();
    setTimeout(() => { URL.revokeObjectURL(a.href); a.remove(); }, 2000);
  }
  function toPng(svg, name) {
    const w = parseFloat(svg.getAttribute('width')), h = parseFloat(svg.getAttribute('height'));
    const img = new Image();
    img.onload = () => {
      const canvas = el('canvas', { width: Math.round(w * 2), height: Math.round(h * 2) });
      const g = canvas.getContext('2d');
      g.fillStyle = '#ffffff';
      g.fillRect(0, 0, canvas.width, canvas.height);
      g.drawImage(img, 0, 0, canvas.width, canvas.height);
      canvas.toBlob((blob) => save(name + '.png', blob), 'image/png');
    };
    img.src = 'data:image/svg+xml;charset=utf-8,' + encodeURIComponent(svgText(svg));
  }
  document.addEventListener('click', (e) => {
    const b = e.target.closest ? e.target.closest('button[data-dl]') : null;
    if (!b) return;
    const fig = b.closest('figure');
    const svg = fig && fig.querySelector('svg');
    if (!svg) return;
    const name = fig.getAttribute('data-name') || 'figure';
    if (b.getAttribute('data-dl') === 'svg') save(name + '.svg', new Blob([svgText(svg)], { type: 'image/svg+xml' }));
    else toPng(svg, name);
  });
  function figure(svg, name, caption) {
    const buttons = el('span', { class: 'dl' },
      el('button', { type: 'button', 'data-dl': 'svg', title: 'download as SVG' }, 'SVG'), ' ',
      el('button', { type: 'button', 'data-dl': 'png', title: 'download as PNG' }, 'PNG'));
    return el('figure', { class: 'fig', 'data-name': name.replace(/[^A-Za-z0-9._-]+/g, '-') },
      svg, el('figcaption', {}, el('span', {}, caption), buttons));
  }
  function cloneTpl(id) {
    const t = document.getElementById(id);
    return t ? t.content.cloneNode(true) : el('p', { class: 'muted' }, 'no curves recorded');
  }

  // ------------------------------------------------------------------------------ attention maps
  const BLUES = ['#f7fbff', '#deebf7', '#c6dbef', '#9ecae1', '#6baed6', '#4292c6', '#2171b5', '#08519c', '#08306b'];
  function blues(t) {
    t = Math.min(Math.max(t, 0), 1) * (BLUES.length - 1);
    const i = Math.min(Math.floor(t), BLUES.length - 2), f = t - i;
    const a = BLUES[i], b = BLUES[i + 1];
    let out = '#';
    for (let c = 1; c < 7; c += 2) {
      const x = parseInt(a.slice(c, c + 2), 16), y = parseInt(b.slice(c, c + 2), 16);
      out += Math.round(x + (y - x) * f).toString(16).padStart(2, '0');
    }
    return out;
  }
  function attentionSvg(run, ex, index) {
    const n = ex.tokens.length;
    const size = Math.max(12, Math.min(26, Math.floor(230 / n)));
    const longest = Math.max(...ex.tokens.map((t) => t.length));
    const rotate = longest * 6.5 > size;  // key tokens under their columns, turned only when too wide
    const labelW = 14 + Math.max(Math.min(longest, 12) * 7, 30);
    const keysH = rotate ? 8 + Math.min(longest, 12) * 7 : 16;
    const panelW = labelW + size * n + 16, panelH = 18 + size * n + keysH;
    const panels = [];
    ex.layers.forEach((heads, l) => heads.forEach((m, h) => panels.push([l, h, m])));
    const verdict = ex.target === null ? `predicted ${ex.prediction}`
      : `predicted ${ex.prediction} ${ex.correct ? '✓' : '✗ (target ' + ex.target + ')'}`;
    const title = `run ${run.id} · ${run.label} · example ${index + 1}`;
    const line2 = `${ex.text}    ${verdict}`;
    const foot = 'rows: queries, columns: keys; colour scaled to each map\u2019s maximum; the classifier reads the ' +
      'last row (bold).';
    const width = Math.max(panelW * panels.length + 8, 8 + 7 * Math.max(title.length, line2.length),
      8 + 5.6 * foot.length);
    const top = 42, height = top + panelH + 22;
    const svg = sv('svg', { xmlns: NS, width, height, viewBox: `0 0 ${width} ${height}`, 'font-family': FONT,
      'font-size': 11, fill: '#1f2328', class: 'attention', role: 'img',
      'aria-label': `attention maps of run ${run.id}, example ${index + 1}` });
    svg.append(sv('rect', { width: '100%', height: '100%', fill: '#ffffff' }));
    svg.append(sv('text', { x: 4, y: 15, 'font-weight': 600, 'font-size': 12 }, title));
    svg.append(sv('text', { x: 4, y: 31, 'font-size': 12, class: 'example-text' }, line2));
    panels.forEach(([l, h, m], p) => {
      const g = sv('g', { class: 'head', 'data-layer': l, 'data-head': h,
        transform: `translate(${p * panelW + 4} ${top})` });
      let max = 0;
      m.forEach((row) => row.forEach((v) => { if (v > max) max = v; }));
      const heads = ex.layers[l].length;
      g.append(sv('text', { x: labelW, y: 10, 'font-weight': 600 },
        `layer ${l}` + (heads > 1 ? ` · head ${h}` : '') + `  (max ${Number(max).toPrecision(3)})`));
      const y0 = 16;
      m.forEach((row, q) => row.forEach((v, k) => {
        g.append(sv('rect', { x: labelW + k * size, y: y0 + q * size, width: size, height: size,
          fill: blues(max > 0 ? v / max : 0), stroke: '#ffffff', 'stroke-width': 0.5,
          'data-tip': `layer ${l}, head ${h}\nquery ${q} “${ex.tokens[q]}” → key ${k} “${ex.tokens[k]}”\n` +
                      `attention ${Number(v).toPrecision(4)}` }));
      }));
      ex.tokens.forEach((t, i) => {
        g.append(sv('text', { x: labelW - 4, y: y0 + i * size + size / 2 + 4, 'text-anchor': 'end',
          'font-weight': i === n - 1 ? 700 : 400, class: 'qtok' }, t));
        const x = labelW + i * size + size / 2, y = y0 + n * size + 12;
        g.append(rotate
          ? sv('text', { x: x + 4, y: y - 6, 'text-anchor': 'end', transform: `rotate(-90 ${x + 4} ${y - 6})`,
            class: 'ktok' }, t)
          : sv('text', { x, y, 'text-anchor': 'middle', class: 'ktok' }, t));
      });
      svg.append(g);
    });
    svg.append(sv('text', { x: 4, y: height - 6, fill: '#656d76', 'font-size': 10 }, foot));
    return svg;
  }
  function attentionFigure(id, index) {
    const run = has(data.runs, id) ? data.runs[id] : null;
    const att = run && run.attention;
    if (!att || !att.examples || !att.examples[index]) {
      return el('p', { class: 'muted attention-note' },
        `attention maps of run ${id}: ` + ((att && att.note) || 'not available'));
    }
    const ex = att.examples[index];
    return figure(attentionSvg(run, ex, index), `attention-${id}-example${index + 1}`,
      `attention of run ${id} at step ${att.step}, example ${index + 1}`);
  }
  function attentionBlock(id) {
    const run = data.runs[id];
    const box = el('div', { class: 'attention-block', 'data-run': id });
    const n = (run && run.attention && run.attention.examples) ? run.attention.examples.length : 1;
    for (let i = 0; i < n; i++) box.append(attentionFigure(id, i));
    return box;
  }
  document.querySelectorAll('.attn-slot[data-run]').forEach((slot) => {
    slot.append(attentionFigure(slot.getAttribute('data-run'), Number(slot.getAttribute('data-example') || 0)));
  });

  // ----------------------------------------------------------------------------------- selection
  const panel = document.getElementById('selection');
  function runsTable(ids) {
    const head = el('tr', {}, ...['run', 'seed', 'status', 'step', 'accuracy', 'loss'].map((h, i) =>
      el('th', { class: i > 2 ? 'num' : '' }, h)));
    const rows = ids.map((id) => {
      const r = data.runs[id];
      return el('tr', { 'data-run': id },
        el('td', {}, el('a', { href: '#run=' + id, class: 'mono' }, id)),
        el('td', {}, String(r.seed)), el('td', { class: 'status-' + r.status }, r.status),
        el('td', { class: 'num' }, String(r.step)), el('td', { class: 'num' }, fmt(r.accuracy)),
        el('td', { class: 'num' }, lossText(r.loss)));
    });
    return el('table', { class: 'runs' }, el('thead', {}, head), el('tbody', {}, ...rows));
  }
  function runDetail(id) {
    const run = data.runs[id];
    const box = el('section', { class: 'run-detail', 'data-run': id });
    box.append(el('h4', {}, 'run ', el('code', {}, id), ` — ${run.label}, seed ${run.seed}, ${run.status}` +
      (run.accuracy !== null ? `, accuracy ${fmt(run.accuracy)}` : '')));
    box.append(el('div', { class: 'run-body' }, el('div', { class: 'run-curves' }, cloneTpl('tpl-run-' + id)),
      attentionBlock(id)));
    return box;
  }
  function hideHint() {
    const hint = document.getElementById('selection-hint');
    if (hint) hint.hidden = true;
  }
  function mark(key) {
    document.querySelectorAll('a.cell.selected').forEach((a) => a.classList.remove('selected'));
    document.querySelectorAll('a.cell').forEach((a) => {
      if (key && a.getAttribute('data-key') === key) a.classList.add('selected');
    });
  }
  function showCell(key, scroll) {
    if (!has(data.cells, key)) return false;
    const cell = data.cells[key];
    mark(key);
    panel.replaceChildren(
      el('h3', {}, cell.title),
      el('p', { class: 'muted' }, cell.summary),
      runsTable(cell.runs),
      ...(cell.more ? [el('p', { class: 'muted' }, `${cell.more} more runs of this cell count in its numbers; ` +
        'this report details the first runs of each cell (depthlab runs --json lists every run)')] : []),
      el('div', { class: 'cell-curves' }, cloneTpl('tpl-cell-' + key)),
      ...cell.runs.map(runDetail));
    panel.setAttribute('data-cell', key);
    panel.hidden = false;
    hideHint();
    if (scroll) panel.scrollIntoView({ block: 'start' });
    return true;
  }
  function showRun(id) {
    if (!has(data.runs, id)) return false;
    const run = data.runs[id];
    mark(run.cell);
    const back = run.cell ? el('a', { href: '#cell=' + run.cell }, 'all runs of this cell') : '';
    panel.replaceChildren(el('h3', {}, 'run ', el('code', {}, id)),
      el('p', { class: 'muted' }, `${run.label}, seed ${run.seed}. `, back), runDetail(id));
    panel.setAttribute('data-cell', run.cell || '');
    panel.hidden = false;
    hideHint();
    panel.scrollIntoView({ block: 'start' });
    return true;
  }
  function route() {
    const h = decodeURIComponent(window.location.hash.slice(1));
    if (h.startsWith('cell=')) showCell(h.slice(5), false);
    else if (h.startsWith('run=')) showRun(h.slice(4));
  }
  window.addEventListener('hashchange', route);
  route();

  // ---------------------------------------------------------------------------------- runs table
  const filter = document.getElementById('run-filter');
  if (filter) {
    filter.addEventListener('input', () => {
      const words = filter.value.toLowerCase().split(/\s+/).filter(Boolean);
      document.querySelectorAll('#all-runs tbody tr').forEach((tr) => {
        const text = tr.textContent.toLowerCase();
        tr.hidden = !words.every((w) => text.includes(w));
      });
    });
  }
})();
"""
