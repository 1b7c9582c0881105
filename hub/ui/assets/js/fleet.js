// Fleet: every cluster with its state, freshness, GPUs per class (total /
// used / free), fractional modes, and its NVLink domains and racks
// coloured by free capacity.
import { api } from './api.js';
import { h, clear, gpus, num, ago, clusterState, enumShort, freeColor, errorBox } from './util.js';

function freshness(c) {
  const t = Date.parse(c.lastHeartbeat || '');
  if (!t) return h('span', { class: 'fresh bad' }, 'never heard from');
  const age = (Date.now() - t) / 1000;
  const cls = age < 5 ? 'ok' : age < 30 ? 'warn' : 'bad';
  return h('span', { class: 'fresh ' + cls, title: c.lastHeartbeat }, `heartbeat ${ago(t)} ago`);
}

function capacityTable(c) {
  const rows = (c.capacity || []).map((k) => {
    const total = num(k.totalMilli);
    const free = num(k.freeMilli);
    const used = total - free;
    const bar = h('div', { class: 'bar', title: `${gpus(used)} used, ${gpus(free)} free of ${gpus(total)} GPUs` },
      h('span', { class: 'used', style: { left: '0', width: pct(used, total) } }),
      h('span', { class: 'freebar', style: { left: pct(used, total), width: pct(free, total) } }));
    return h('tr', {},
      h('td', {}, h('code', {}, k.acceleratorClass)),
      h('td', { class: 'num' }, gpus(total)),
      h('td', { class: 'num' }, gpus(used)),
      h('td', { class: 'num' }, gpus(free)),
      h('td', { class: 'num' }, String(num(k.freeWholeGpus))),
      h('td', { class: 'num' }, String(num(k.nodes))),
      h('td', {}, bar));
  });
  if (!rows.length) return h('p', { class: 'muted' }, 'No capacity advertised yet.');
  return h('table', { class: 'capacity' },
    h('thead', {}, h('tr', {}, h('th', {}, 'Accelerator class'), h('th', { class: 'num' }, 'Total'), h('th', { class: 'num' }, 'Used'),
      h('th', { class: 'num' }, 'Free'), h('th', { class: 'num', title: 'GPUs with all 1000 milli free' }, 'Whole free'), h('th', { class: 'num' }, 'Nodes'), h('th', {}, 'GPUs'))),
    h('tbody', {}, rows));
}

const pct = (a, b) => (b > 0 ? (100 * a / b).toFixed(2) + '%' : '0%');

function domainTiles(topo, kind) {
  const doms = (topo.domains || []).filter((d) => d.kind === kind);
  if (!doms.length) return null;
  const key = kind === 'nvlink' ? 'nvlinkDomain' : 'rack';
  return h('div', {},
    h('h3', {}, kind === 'nvlink' ? 'NVLink domains' : 'Racks'),
    h('div', { class: 'domains' }, doms.map((d) => {
      const total = num(d.totalMilli);
      const free = num(d.freeMilli);
      const frac = total ? free / total : 0;
      const nodes = (topo.nodes || []).filter((n) => n[key] === d.name);
      return h('div', {
        class: 'domain', dataset: { domain: d.name, kind },
        style: { backgroundColor: freeColor(frac) },
        title: `${d.name}: ${gpus(free)} of ${gpus(total)} GPUs free, ${num(d.freeWholeGpus)} whole; ${num(d.nodes)} nodes (${(d.acceleratorClasses || []).join(', ')})`,
      },
      h('div', { class: 'name' }, d.name),
      h('div', { class: 'sub' }, `${gpus(free)}/${gpus(total)} GPUs free`),
      h('div', { class: 'nodes' }, nodes.map((n) => h('span', {
        class: 'node', title: num(n.totalMilli) ? `${n.name}: ${gpus(n.freeMilli)} of ${gpus(n.totalMilli)} GPUs free` : `${n.name}: no GPUs`,
        style: { backgroundColor: num(n.totalMilli) ? freeColor(num(n.freeMilli) / num(n.totalMilli)) : '#98a2b3' },
      }))));
    })));
}

function clusterCard(c, topo) {
  const state = clusterState(c.state);
  const labels = Object.entries(c.labels || {}).map(([k, v]) => h('span', { class: 'chip' }, `${k}=${v}`));
  const modes = (c.fractionalModes || []).map((m) => h('span', { class: 'chip' }, enumShort(m, 'FRACTIONAL_MODE_')));
  return h('section', { class: 'card cluster', dataset: { cluster: c.id } },
    h('div', { class: 'row' },
      h('h2', {}, c.id),
      h('span', { class: 'badge ' + state, dataset: { state } }, state),
      freshness(c),
      h('span', { class: 'spacer' }),
      h('span', { class: 'muted' }, enumShort(c.connector, 'CONNECTOR_KIND_').toLowerCase(), c.agentVersion ? ` · agent ${c.agentVersion}` : '',
        ` · ${num(c.runningDispatches)} dispatches`)),
    c.drainReason ? h('div', { class: 'note' }, 'Draining: ', c.drainReason) : null,
    h('div', { class: 'row' }, labels),
    capacityTable(c),
    h('div', { class: 'row' }, h('span', { class: 'muted' }, 'Fractional modes:'), modes.length ? modes : h('span', { class: 'muted' }, 'whole GPUs only')),
    topo ? domainTiles(topo, 'nvlink') : null,
    topo ? domainTiles(topo, 'rack') : null);
}

export async function renderFleet(main, ctx) {
  let timer = null;
  async function load() {
    const r = await api('/v1/clusters');
    const clusters = (r && r.clusters) || [];
    const topos = await Promise.all(clusters.map((c) => api(`/v1/clusters/${encodeURIComponent(c.id)}:topology`).catch(() => null)));
    let total = 0; let free = 0;
    for (const c of clusters) for (const k of c.capacity || []) { total += num(k.totalMilli); free += num(k.freeMilli); }
    const counts = {};
    for (const c of clusters) counts[clusterState(c.state)] = (counts[clusterState(c.state)] || 0) + 1;
    clear(main,
      h('div', { class: 'row' }, h('h1', {}, 'Fleet'), h('span', { class: 'spacer' }),
        h('span', { class: 'scale' }, 'full', h('span', { class: 'ramp' }), 'free')),
      h('p', { class: 'muted', id: 'fleet-summary' },
        `${clusters.length} clusters (${Object.entries(counts).map(([k, v]) => `${v} ${k}`).join(', ') || 'none'}) · ` +
        `${gpus(total - free)} of ${gpus(total)} GPUs in use, ${gpus(free)} free`),
      clusters.length ? h('div', { class: 'grid' }, clusters.map((c, i) => clusterCard(c, topos[i])))
        : h('p', { class: 'muted' }, 'No cluster has registered with this hub yet.'));
  }
  try { await load(); } catch (e) { clear(main, errorBox(e)); }
  // Adverts arrive every few seconds: refresh while the view is open.
  timer = setInterval(() => { load().catch(() => {}); }, 5000);
  return () => clearInterval(timer);
}
