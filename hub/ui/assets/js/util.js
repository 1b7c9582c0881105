// Small DOM and formatting helpers. Everything the dashboard shows goes
// through text nodes (never parsed as HTML), so a workload name or a label
// value can never become markup.

// h builds an element: h('td', {class: 'num', onclick: fn}, 'text', child...)
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v);
    else if (k === 'class') el.className = v;
    else if (k === 'dataset') Object.assign(el.dataset, v);
    else if (k === 'style') Object.assign(el.style, v); // CSSOM: allowed by the CSP
    else if (v === true) el.setAttribute(k, '');
    else el.setAttribute(k, String(v));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children.flat(Infinity)) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
}

export function clear(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

export const num = (v) => (v === undefined || v === null || v === '' ? 0 : Number(v));

// gpus formats milli-GPUs as GPUs: 8000 -> "8", 250 -> "0.25".
export function gpus(milli) {
  const g = num(milli) / 1000;
  return Number.isInteger(g) ? String(g) : g.toFixed(2).replace(/0+$/, '').replace(/\.$/, '');
}

export const phaseName = (p) => (p || 'WORKLOAD_PHASE_QUEUED').replace('WORKLOAD_PHASE_', '');
export const clusterState = (s) => (s || 'CLUSTER_STATE_UNSPECIFIED').replace('CLUSTER_STATE_', '');
export const enumShort = (v, prefix) => (v || '').replace(prefix, '');

export function ago(ts, now = Date.now()) {
  if (!ts) return '—';
  const t = typeof ts === 'number' ? ts : Date.parse(ts);
  if (!t || t < 0) return '—';
  let s = Math.max(0, Math.round((now - t) / 1000));
  if (s < 60) return s + 's';
  if (s < 3600) return Math.floor(s / 60) + 'm ' + (s % 60) + 's';
  if (s < 86400) return Math.floor(s / 3600) + 'h ' + Math.floor((s % 3600) / 60) + 'm';
  return Math.floor(s / 86400) + 'd ' + Math.floor((s % 86400) / 3600) + 'h';
}

export function when(ts) {
  if (!ts) return '—';
  const d = new Date(ts);
  if (isNaN(d) || d.getTime() <= 0) return '—';
  return d.toISOString().replace('T', ' ').replace(/\.\d+Z$/, 'Z');
}

// freeColor is the colour of a free fraction: red when full, green when free.
export function freeColor(frac) {
  const f = Math.max(0, Math.min(1, frac));
  return `hsl(${Math.round(f * 120)}, ${f > 0.5 ? 48 : 62}%, ${f > 0.5 ? 38 : 46}%)`;
}

// phaseSince is when the workload entered its current phase, as well as
// its status says.
export function phaseSince(w) {
  const st = w.status || {};
  const p = phaseName(st.phase);
  let t;
  if (['SUCCEEDED', 'FAILED', 'CANCELLED'].includes(p)) t = st.endTime;
  else if (p === 'RUNNING') t = st.startTime;
  else if (p === 'DISPATCHED' || p === 'ACCEPTED') t = st.dispatchTime;
  if (!t) {
    // The newest condition that became true says it otherwise.
    for (const c of st.conditions || []) {
      if (c.lastTransitionTime && (!t || c.lastTransitionTime > t)) t = c.lastTransitionTime;
    }
  }
  return t || w.createTime;
}

// gpuSummary is the workload's GPUs: "16 × nvidia-h100-80gb", "0.25 (MPS)".
export function gpuSummary(w) {
  const classes = new Map();
  let total = 0;
  let mode = '';
  for (const ps of w.podSets || []) {
    const r = ps.resources || {};
    const m = num(r.gpuMilli) * num(ps.replicas || 1);
    if (!m) continue;
    total += m;
    const c = r.acceleratorClass || 'any';
    classes.set(c, (classes.get(c) || 0) + m);
    if (r.fractionalMode && r.fractionalMode !== 'FRACTIONAL_MODE_ANY' && r.fractionalMode !== 'FRACTIONAL_MODE_UNSPECIFIED') {
      mode = r.fractionalMode.replace('FRACTIONAL_MODE_', '');
    }
  }
  if (!total) return { total: 0, text: '0' };
  const parts = [...classes].map(([c, m]) => `${gpus(m)} × ${c}`);
  return { total, text: parts.join(', ') + (mode ? ` (${mode})` : '') };
}

export function errorBox(err) {
  return h('div', { class: 'error', role: 'alert' }, errorText(err));
}

export function errorText(err) {
  if (err && err.status) {
    const msg = (err.body && (err.body.message || err.body.error)) || err.text || '';
    return `The hub answered ${err.status}${msg ? ': ' + msg : ''}`;
  }
  return String((err && err.message) || err);
}
