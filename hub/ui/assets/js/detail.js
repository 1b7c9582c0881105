// Workload detail: spec, placement, the pending reason with the
// per-cluster explanation, a timeline of conditions and watch events, and
// cancel when the hub would allow it.
import { api, whoAmI } from './api.js';
import { h, clear, gpus, num, when, ago, phaseName, phaseSince, enumShort, errorBox, errorText } from './util.js';

const TERMINAL = ['SUCCEEDED', 'FAILED', 'CANCELLED'];

// mayCancel says whether the hub would let the caller cancel w, from
// WhoAmI's global permissions and the access lists of the queue and its
// ancestors. It is a hint to hide a button, never a decision: the hub
// decides, and says why when it refuses.
async function mayCancel(w) {
  const me = await whoAmI();
  const perms = me.permissions || [];
  if (perms.includes('admin') || perms.includes('workloads.cancel_any')) return { ok: true };
  const p = me.principal || {};
  const subjects = new Set([`user:${p.user}`, ...(p.groups || []).map((g) => `group:${g}`)]);
  if (p.tokenId) subjects.add(`token:${p.tokenId}`);
  const segs = (w.queue || '').split('/');
  let submit = false;
  for (let i = 1; i <= segs.length; i++) {
    let q;
    try { q = await api('/v1/queues/' + segs.slice(0, i).join('/')); } catch { continue; }
    for (const a of q.access || []) {
      if (!subjects.has(a.subject)) continue;
      const verbs = (a.verbs || []).map((v) => String(v).toLowerCase().replace('queue_verb_', ''));
      if (verbs.includes('cancel') || verbs.includes('manage')) return { ok: true };
      if (verbs.includes('submit')) submit = true;
    }
  }
  if (submit && w.submittedBy && w.submittedBy === p.user) return { ok: true };
  return { ok: false, why: `You (${p.user}) have no cancel right on queue ${w.queue}${submit ? ' and did not submit this workload' : ''}.` };
}

function kv(pairs) {
  return h('dl', { class: 'kv' }, pairs.filter(Boolean).map(([k, v]) => [h('dt', {}, k), h('dd', {}, v === undefined || v === '' ? '—' : v)]));
}

function specCard(w) {
  const podSets = (w.podSets || []).map((ps) => {
    const r = ps.resources || {};
    return h('tr', {},
      h('td', {}, ps.name),
      h('td', { class: 'num' }, `${num(ps.replicas)}${ps.minReplicas ? ` (min ${num(ps.minReplicas)})` : ''}`),
      h('td', { class: 'num' }, r.gpuMilli ? gpus(r.gpuMilli) : '0'),
      h('td', {}, r.acceleratorClass || h('span', { class: 'muted' }, 'any')),
      h('td', {}, [enumShort(r.fractionalMode, 'FRACTIONAL_MODE_'), r.migProfile].filter(Boolean).join(' ') || '—'),
      h('td', {}, enumShort(ps.topology, 'TOPOLOGY_') || 'CLUSTER'),
      h('td', { class: 'num' }, r.cpuMilli ? `${num(r.cpuMilli) / 1000} CPU` : ''), h('td', { class: 'num' }, r.memoryMib ? `${num(r.memoryMib)} MiB` : ''));
  });
  const rt = w.runtime || {};
  const runtime = rt.container ? `container ${rt.container.image || ''}` : rt.slurm ? 'Slurm batch script' : '—';
  return h('section', { class: 'card', id: 'spec' },
    h('h2', {}, 'Spec'),
    kv([
      ['Queue', w.queue], ['Name', w.name], ['Priority', String(w.priority || 0)], ['Preemptible', w.preemptible ? 'yes' : 'no'],
      ['Submitted', `${when(w.createTime)} by ${w.submittedBy || '?'}`],
      ['Labels', Object.entries(w.labels || {}).map(([k, v]) => h('span', { class: 'chip' }, `${k}=${v}`))],
      ['Cluster selector', Object.entries(w.clusterSelector || {}).map(([k, v]) => h('span', { class: 'chip' }, `${k}=${v}`))],
      ['Runtime', runtime],
      w.maxRuntime ? ['Max runtime', w.maxRuntime] : null,
    ]),
    h('h3', {}, 'Pod sets'),
    h('table', {}, h('thead', {}, h('tr', {}, ['Name', 'Replicas', 'GPUs each', 'Class', 'Fraction', 'Topology', 'CPU', 'Memory'].map((x) => h('th', {}, x)))),
      h('tbody', {}, podSets)));
}

function placementCard(w) {
  const st = w.status || {};
  const pl = st.placement || {};
  return h('section', { class: 'card', id: 'placement' },
    h('h2', {}, 'Placement'),
    kv([
      ['Cluster', st.cluster], ['Dispatch', st.dispatchId ? h('code', {}, st.dispatchId) : ''],
      ['Attempts', String(st.attempts || 0)], ['Dispatched', when(st.dispatchTime)], ['Accepted', when(st.acceptTime)], ['Started', when(st.startTime)], ['Ended', when(st.endTime)],
      st.exitCode !== undefined ? ['Exit code', String(st.exitCode)] : null,
      ['Message', st.message],
      pl.rule ? ['Decided by', pl.rule] : null,
    ]),
    (pl.clusters || []).length ? h('table', {}, h('thead', {}, h('tr', {}, h('th', {}, 'Cluster'), h('th', { class: 'num' }, 'GPUs left free'), h('th', {}, 'How it stood'))),
      h('tbody', {}, pl.clusters.map((c) => h('tr', {}, h('td', {}, c.cluster, c.chosen ? ' ✓' : ''), h('td', { class: 'num' }, Number(c.score || 0).toFixed(1)), h('td', {}, c.detail || ''))))) : null);
}

function explainCard(x) {
  if (!x) return h('section', { class: 'card', id: 'explain' }, h('h2', {}, 'Why here'), h('p', { class: 'muted' }, 'No explanation.'));
  return h('section', { class: 'card', id: 'explain' },
    h('h2', {}, phaseName(x.phase) === 'QUEUED' ? 'Why pending' : 'Where it runs'),
    x.pendingReason ? h('div', { class: 'note', id: 'pending-reason' }, h('b', {}, x.pendingReasonCode || 'Pending'), ': ', x.pendingReason) : null,
    x.queuePosition ? h('p', {}, `Position in its queue: ${x.queuePosition}`) : null,
    (x.quota || []).length ? [h('h3', {}, 'Quota'), h('table', {}, h('tbody', {}, x.quota.map((q) => h('tr', {},
      h('td', {}, h('code', {}, q.acceleratorClass)), h('td', { class: q.fits ? 'fits' : 'nofit' }, q.fits ? 'fits' : 'over'),
      h('td', { class: 'num' }, `needs ${gpus(q.requestedMilli)}, ${gpus(q.availableMilli)} available`), h('td', {}, q.reason || '')))))] : null,
    (x.clusters || []).length ? [h('h3', {}, 'Clusters'), h('table', { id: 'explain-clusters' }, h('tbody', {}, x.clusters.map((c) => h('tr', { dataset: { cluster: c.cluster } },
      h('td', {}, h('b', {}, c.cluster)), h('td', { class: c.fits ? 'fits' : 'nofit' }, c.fits ? 'fits' : 'no'),
      h('td', {}, (c.lines || []).map((l) => h('div', {}, l)))))))] : null,
    h('p', { class: 'muted' }, `Evaluated ${when(x.evaluateTime)}`));
}

function timeline(w, seen) {
  const items = [];
  const st = w.status || {};
  items.push({ t: w.createTime, text: `Submitted to ${w.queue}`, cls: '' });
  for (const c of st.conditions || []) {
    items.push({ t: c.lastTransitionTime, text: `${c.type} ${enumShort(c.status, 'CONDITION_STATUS_').toLowerCase()}${c.reason ? ' · ' + c.reason : ''}${c.message ? ': ' + c.message : ''}`, cls: '' });
  }
  for (const e of seen) {
    items.push({ t: e.time, text: `Watch: ${enumShort(e.type, 'WORKLOAD_EVENT_TYPE_')} → ${phaseName(e.phase)} (revision ${e.revision})${e.message ? ': ' + e.message : ''}`, cls: 'watch' });
  }
  items.sort((a, b) => (Date.parse(a.t || 0) || 0) - (Date.parse(b.t || 0) || 0));
  return h('ul', { class: 'timeline', id: 'timeline' }, items.map((i) => h('li', { class: i.cls }, h('span', { class: 'when' }, when(i.t)), i.text)));
}

export async function renderDetail(main, ctx, id) {
  let w;
  try {
    w = await api('/v1/workloads/' + encodeURIComponent(id));
  } catch (e) {
    clear(main, h('p', {}, h('a', { href: '#/workloads' }, '← Workloads')), errorBox(e));
    return null;
  }
  const header = h('div');
  const actionMsg = h('div', { id: 'action-msg' });
  const cols = h('div', { class: 'cols' });
  const tl = h('section', { class: 'card' }, h('h2', {}, 'Timeline'));
  const raw = h('details', { class: 'card' }, h('summary', {}, 'Raw JSON'), h('pre', {}));
  clear(main, h('p', {}, h('a', { href: '#/workloads' }, '← Workloads')), header, actionMsg, cols, tl, raw);

  let forceShow = false;
  async function cancel() {
    const btn = main.querySelector('#cancel');
    if (btn) btn.disabled = true;
    try {
      const nw = await api(`/v1/workloads/${encodeURIComponent(w.id)}:cancel`, { method: 'POST', body: { reason: 'cancelled from the dashboard' } });
      clear(actionMsg, h('div', { class: 'ok-note' }, 'Cancel accepted: ', phaseName((nw.status || {}).phase)));
      w = nw;
      draw(null);
    } catch (e) {
      clear(actionMsg, h('div', { class: 'error', role: 'alert', id: 'cancel-refused' }, 'The hub refused to cancel: ', errorText(e)));
      if (btn) btn.disabled = false;
    }
  }

  async function drawHeader() {
    const ph = phaseName((w.status || {}).phase);
    const actions = h('span', { id: 'actions' });
    clear(header, h('div', { class: 'row' },
      h('h1', {}, w.name || w.id), h('span', { class: 'badge ' + ph, id: 'phase' }, ph),
      h('span', { class: 'muted' }, `for ${ago(phaseSince(w))}`), h('code', { class: 'muted' }, w.id),
      h('span', { class: 'spacer' }), actions));
    if (TERMINAL.includes(ph)) return;
    const hint = await mayCancel(w).catch(() => ({ ok: true }));
    if (hint.ok || forceShow) {
      actions.append(h('button', { class: 'danger', id: 'cancel', onclick: cancel }, 'Cancel workload'));
    } else {
      actions.append(h('span', { class: 'muted', id: 'cancel-hidden', title: hint.why }, 'Cancel not available to you. '),
        h('button', { class: 'link-dark', id: 'cancel-anyway', onclick: () => { forceShow = true; drawHeader(); } }, 'Ask the hub anyway'));
    }
  }

  async function draw(x) {
    let explain = x;
    if (!explain) explain = await api(`/v1/workloads/${encodeURIComponent(w.id)}:explain`).catch(() => null);
    await drawHeader();
    clear(cols, h('div', {}, specCard(w), placementCard(w)), h('div', {}, explainCard(explain)));
    clear(tl, h('h2', {}, 'Timeline'), timeline(w, ctx.live.seen(w.id)));
    raw.querySelector('pre').textContent = JSON.stringify(w, null, 2);
  }
  await draw(null);

  const off = ctx.live.on((ev) => {
    if (!ev.workload || ev.workload.id !== w.id) return;
    if (ev.type !== 'WORKLOAD_EVENT_TYPE_DELETED') w = ev.workload;
    draw(null);
  });
  return off;
}
