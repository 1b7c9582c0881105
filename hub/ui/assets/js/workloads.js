// Workloads: a Lookout-style table over SearchWorkloads (server-side
// filters, counts and paging, so it stays fast with 100,000 stored
// workloads), grouped by state or queue, updated live from the watch.
import { api, query } from './api.js';
import { h, clear, gpus, ago, when, phaseName, phaseSince, gpuSummary, errorBox } from './util.js';

const PHASES = ['QUEUED', 'DISPATCHED', 'ACCEPTED', 'RUNNING', 'SUCCEEDED', 'FAILED', 'CANCELLED', 'PREEMPTED'];
const PAGE = 50;

export async function renderWorkloads(main, ctx) {
  const p = ctx.params;
  const f = {
    phase: p.get('phase') || '', queue: p.get('queue') || '', cluster: p.get('cluster') || '',
    label: p.get('label') || '', q: p.get('q') || '', group: p.get('group') || '',
  };
  const tokens = ['']; // page tokens: tokens[i] fetches page i
  let page = 0;
  let rows = new Map(); // id -> tr
  let reloadTimer = null;
  let pending = 0;

  const setHash = (nf) => {
    const q = new URLSearchParams();
    for (const [k, v] of Object.entries(nf)) if (v) q.set(k, v);
    const s = q.toString();
    ctx.navigate('#/workloads' + (s ? '?' + s : ''));
  };

  // Filters.
  const phaseSel = h('select', { name: 'phase', id: 'f-phase' }, h('option', { value: '' }, 'any state'),
    PHASES.map((x) => h('option', { value: x, selected: f.phase === x }, x)));
  const queueIn = h('input', { name: 'queue', id: 'f-queue', value: f.queue, placeholder: 'tenant/team', list: 'queue-list', size: 16 });
  const clusterIn = h('input', { name: 'cluster', id: 'f-cluster', value: f.cluster, placeholder: 'cluster id', list: 'cluster-list', size: 10 });
  const labelIn = h('input', { name: 'label', id: 'f-label', value: f.label, placeholder: 'team=vision', size: 14 });
  const textIn = h('input', { name: 'q', id: 'f-text', value: f.q, placeholder: 'name or id', size: 18, type: 'search' });
  const groupSel = h('select', { name: 'group', id: 'f-group' },
    h('option', { value: '' }, 'no grouping'), h('option', { value: 'state', selected: f.group === 'state' }, 'group by state'),
    h('option', { value: 'queue', selected: f.group === 'queue' }, 'group by queue'));
  const form = h('form', {
    class: 'filters card', id: 'filters',
    onsubmit(ev) {
      ev.preventDefault();
      setHash({ phase: phaseSel.value, queue: queueIn.value.trim(), cluster: clusterIn.value.trim(), label: labelIn.value.trim(), q: textIn.value.trim(), group: groupSel.value });
    },
  },
  h('label', {}, 'State', phaseSel), h('label', {}, 'Queue', queueIn), h('label', {}, 'Cluster', clusterIn),
  h('label', {}, 'Labels', labelIn), h('label', {}, 'Search', textIn), h('label', {}, 'Group', groupSel),
  h('button', { class: 'primary', type: 'submit', id: 'f-apply' }, 'Apply'),
  h('button', { type: 'button', onclick: () => setHash({}) }, 'Clear'),
  h('datalist', { id: 'queue-list' }), h('datalist', { id: 'cluster-list' }));
  groupSel.addEventListener('change', () => form.requestSubmit());
  phaseSel.addEventListener('change', () => form.requestSubmit());

  const groupsEl = h('div', { class: 'groups', id: 'groups' });
  const tableEl = h('div', { class: 'card' });
  const pagerEl = h('div', { class: 'pager', id: 'pager' });
  const liveEl = h('span', { class: 'muted', id: 'live-note' });
  const msgEl = h('div');
  clear(main, h('div', { class: 'row' }, h('h1', {}, 'Workloads'), h('span', { class: 'spacer' }), liveEl), form, msgEl, groupsEl, tableEl, pagerEl);

  // Suggestions for the queue and cluster fields, asked for once the first
  // page is shown so that they do not compete with its search.
  function suggest() {
    api('/v1/queues?pageSize=1000').then((r) => {
      const dl = form.querySelector('#queue-list');
      for (const q of (r && r.queues) || []) dl.append(h('option', { value: q.path }));
    }).catch(() => {});
    api('/v1/clusters').then((r) => {
      const dl = form.querySelector('#cluster-list');
      for (const c of (r && r.clusters) || []) dl.append(h('option', { value: c.id }));
    }).catch(() => {});
  }

  function groupKey(w) {
    return f.group === 'queue' ? w.queue : phaseName((w.status || {}).phase);
  }

  function row(w) {
    const st = w.status || {};
    const ph = phaseName(st.phase);
    const g = gpuSummary(w);
    const tr = h('tr', { class: 'click', dataset: { id: w.id, phase: ph }, onclick: () => ctx.navigate('#/workloads/' + encodeURIComponent(w.id)) },
      h('td', {}, w.queue),
      h('td', {}, h('a', { href: '#/workloads/' + encodeURIComponent(w.id), class: 'mono' }, w.id), w.name ? h('div', { class: 'muted' }, w.name) : null),
      h('td', {}, h('span', { class: 'badge ' + ph }, ph)),
      h('td', { class: 'num', title: when(phaseSince(w)) }, ago(phaseSince(w))),
      h('td', { title: when(w.createTime) }, when(w.createTime)),
      h('td', {}, st.cluster || h('span', { class: 'muted' }, '—')),
      h('td', { class: 'num', title: g.text }, gpus(g.total)),
      h('td', { class: 'num' }, String(w.priority || 0)));
    return tr;
  }

  async function load(keepMessage) {
    const params = {
      pageSize: PAGE, pageToken: tokens[page], queue: f.queue, cluster: f.cluster,
      labelSelector: f.label, text: f.q, includeCounts: true,
    };
    if (f.phase) params.phase = [f.phase];
    let r;
    try {
      r = await api('/v1/workloads:search' + query(params));
    } catch (e) {
      clear(msgEl, errorBox(e));
      clear(tableEl);
      return;
    }
    if (!keepMessage) clear(msgEl);
    pending = 0;
    clear(liveEl, `${Number(r.total || 0).toLocaleString()} workloads match · updated ${new Date().toLocaleTimeString()}`);
    // Groups with their counts (over every match, not only this page).
    const counts = f.group === 'queue' ? r.queueCounts || [] : r.phaseCounts || [];
    clear(groupsEl, f.group ? counts.map((c) => {
      const key = f.group === 'queue' ? c.key : phaseName(c.key);
      const sel = f.group === 'queue' ? f.queue === key : f.phase === key;
      return h('a', {
        href: '#', class: sel ? 'sel' : '', dataset: { group: key },
        onclick(ev) { ev.preventDefault(); setHash({ ...f, [f.group === 'queue' ? 'queue' : 'phase']: sel ? '' : key }); },
      }, key, h('b', {}, Number(c.count).toLocaleString()));
    }) : null);
    const byKey = new Map(counts.map((c) => [f.group === 'queue' ? c.key : phaseName(c.key), Number(c.count)]));
    let ws = r.workloads || [];
    rows = new Map();
    const body = h('tbody');
    if (f.group) {
      const order = f.group === 'state' ? PHASES : [...new Set(ws.map(groupKey))].sort();
      ws = [...ws].sort((a, b) => order.indexOf(groupKey(a)) - order.indexOf(groupKey(b)));
      let last = null;
      for (const w of ws) {
        const k = groupKey(w);
        if (k !== last) {
          body.append(h('tr', { class: 'group', dataset: { group: k } }, h('td', { colspan: 8 }, `${k} · ${(byKey.get(k) || 0).toLocaleString()} in all`)));
          last = k;
        }
        const tr = row(w);
        rows.set(w.id, tr);
        body.append(tr);
      }
    } else {
      for (const w of ws) {
        const tr = row(w);
        rows.set(w.id, tr);
        body.append(tr);
      }
    }
    clear(tableEl, ws.length ? h('table', { id: 'workloads' },
      h('thead', {}, h('tr', {}, h('th', {}, 'Queue'), h('th', {}, 'Id / name'), h('th', {}, 'State'), h('th', { class: 'num' }, 'In state'),
        h('th', {}, 'Submitted'), h('th', {}, 'Cluster'), h('th', { class: 'num' }, 'GPUs'), h('th', { class: 'num' }, 'Priority'))),
      body) : h('p', { class: 'muted' }, 'No workload matches.'));
    if (r.nextPageToken) tokens[page + 1] = r.nextPageToken;
    else tokens.length = page + 1;
    const first = page * PAGE + 1;
    clear(pagerEl,
      h('button', { id: 'prev', disabled: page === 0, onclick: () => { page--; load(); } }, '← Newer'),
      h('span', { id: 'page-info' }, ws.length ? `Page ${page + 1} · ${first.toLocaleString()}–${(first + ws.length - 1).toLocaleString()} of ${Number(r.total || 0).toLocaleString()}` : ''),
      h('button', { id: 'next', disabled: !r.nextPageToken, onclick: () => { page++; load(); } }, 'Older →'));
  }

  // Live: change the rows on this page at once; reload the counts (and the
  // first page, where new work appears) a moment later.
  const off = ctx.live.on((ev) => {
    const w = ev.workload;
    if (!w) return;
    const tr = rows.get(w.id);
    if (tr && ev.type !== 'WORKLOAD_EVENT_TYPE_DELETED') {
      const nr = row(w);
      nr.classList.add('flash');
      tr.replaceWith(nr);
      rows.set(w.id, nr);
    }
    pending++;
    clearTimeout(reloadTimer);
    reloadTimer = setTimeout(() => { if (page === 0) load(true); else clear(liveEl, `${pending} changes since this page was loaded`); }, 1500);
  });
  await load();
  suggest();
  return () => { off(); clearTimeout(reloadTimer); };
}
