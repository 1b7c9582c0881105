// Queues: the tree with, per accelerator class, the nominal quota, usage,
// borrowed and lent capacity as bars, and each queue's fair-share position
// among its siblings.
import { listAll } from './api.js';
import { h, clear, gpus, num, errorBox } from './util.js';

const pct = (a, b) => (b > 0 ? Math.min(100, 100 * a / b).toFixed(2) + '%' : '0%');

function classRows(q) {
  const quotas = new Map((q.quotas || []).map((x) => [x.acceleratorClass, x]));
  const usage = new Map(((q.status || {}).classes || []).map((x) => [x.acceleratorClass, x]));
  const classes = [...new Set([...quotas.keys(), ...usage.keys()])].sort();
  return classes.map((cls) => {
    const qq = quotas.get(cls) || {};
    const u = usage.get(cls) || {};
    const nominal = num(qq.nominalMilliGpus);
    const borrowLimit = qq.borrowLimitMilli === undefined ? null : num(qq.borrowLimitMilli);
    const used = num(u.usageMilli);
    const borrowed = num(u.borrowedMilli);
    const lent = num(u.lentMilli);
    const ceiling = borrowLimit === null ? nominal : nominal + borrowLimit;
    const scale = Math.max(ceiling, used, nominal, 1) * 1.05;
    const inNominal = Math.min(used, nominal);
    const bar = h('div', {
      class: 'bar', dataset: { class: cls },
      title: `${cls}: uses ${gpus(used)} of ${gpus(nominal)} nominal` + (borrowLimit === null ? ', borrowing unlimited' : `, may borrow ${gpus(borrowLimit)}`) +
        `; borrowed ${gpus(borrowed)}, lent ${gpus(lent)}`,
    },
    h('span', { class: 'used', style: { left: '0', width: pct(inNominal, scale) } }),
    borrowed > 0 || used > nominal ? h('span', { class: 'borrowed', style: { left: pct(inNominal, scale), width: pct(Math.max(borrowed, used - inNominal), scale) } }) : null,
    lent > 0 ? h('span', { class: 'lent', style: { left: pct(Math.max(0, nominal - lent), scale), width: pct(Math.min(lent, nominal), scale) } }) : null,
    nominal > 0 ? h('span', { class: 'nominal', style: { left: pct(nominal, scale) } }) : null,
    borrowLimit !== null && borrowLimit > 0 ? h('span', { class: 'limit', style: { left: pct(ceiling, scale) } }) : null);
    return { cls, nominal, borrowLimit, used, borrowed, lent, fair: u.fairshareFactor, decayed: u.decayedGpuSeconds, bar };
  });
}

export async function renderQueues(main) {
  let queues;
  try {
    queues = await listAll('/v1/queues', 'queues');
  } catch (e) {
    clear(main, errorBox(e));
    return null;
  }
  queues.sort((a, b) => (a.path < b.path ? -1 : 1));
  // Fair-share position: rank among siblings by factor (higher goes first).
  const parentOf = (p) => p.split('/').slice(0, -1).join('/');
  const factor = (q) => Math.max(0, ...((q.status || {}).classes || []).map((c) => num(c.fairshareFactor)));
  const siblings = new Map();
  for (const q of queues) {
    const p = parentOf(q.path);
    if (!siblings.has(p)) siblings.set(p, []);
    siblings.get(p).push(q);
  }
  const rank = new Map();
  for (const list of siblings.values()) {
    const sorted = [...list].sort((a, b) => factor(b) - factor(a));
    sorted.forEach((q, i) => rank.set(q.path, `${i + 1} of ${list.length}`));
  }
  const rows = [];
  for (const q of queues) {
    const depth = q.path.split('/').length - 1;
    const st = q.status || {};
    const cls = classRows(q);
    const name = h('td', { rowspan: Math.max(1, cls.length) },
      h('span', { class: 'tree-indent', style: { width: depth * 18 + 'px' } }),
      depth ? '└ ' : '', h('b', {}, q.path.split('/').pop()),
      h('div', { class: 'muted' }, h('span', { class: 'tree-indent', style: { width: depth * 18 + 'px' } }),
        `weight ${num(q.weight) || 1} · ${num(st.pendingWorkloads)} pending · ${num(st.runningWorkloads)} running`));
    if (!cls.length) {
      rows.push(h('tr', { dataset: { queue: q.path } }, name, h('td', { colspan: 6, class: 'muted' }, 'no quota')));
      continue;
    }
    cls.forEach((c, i) => {
      const f = num(c.fair);
      rows.push(h('tr', { dataset: { queue: q.path, class: c.cls } },
        i === 0 ? name : null,
        h('td', {}, h('code', {}, c.cls)),
        h('td', {}, c.bar),
        h('td', { class: 'num' }, `${gpus(c.used)} / ${gpus(c.nominal)}`),
        h('td', { class: 'num' }, c.borrowLimit === null ? '∞' : gpus(c.borrowLimit)),
        h('td', { class: 'num' }, gpus(c.borrowed), ' / ', gpus(c.lent)),
        h('td', { title: `fair-share factor ${f.toFixed(3)}; ${num(c.decayed).toFixed(0)} decayed GPU-seconds` },
          h('span', { class: 'fair' }, h('span', { style: { width: (Math.min(1, f) * 100).toFixed(1) + '%' } })),
          f.toFixed(2), ' · ', h('span', { class: 'muted' }, '#' + rank.get(q.path)))));
    });
  }
  clear(main,
    h('h1', {}, 'Queues'),
    h('div', { class: 'legend' },
      h('span', {}, h('i', { class: 'used' }), 'used within nominal'),
      h('span', {}, h('i', { class: 'borrowed' }), 'borrowed'),
      h('span', {}, h('i', { class: 'lent' }), 'lent to others'),
      h('span', {}, h('i', { class: 'nominal' }), 'nominal quota'),
      h('span', {}, 'dashed: nominal + borrow limit')),
    queues.length ? h('div', { class: 'card' }, h('table', { id: 'queues' },
      h('thead', {}, h('tr', {}, h('th', {}, 'Queue'), h('th', {}, 'Class'), h('th', {}, 'Usage'), h('th', { class: 'num' }, 'Used / nominal GPUs'),
        h('th', { class: 'num' }, 'Borrow limit'), h('th', { class: 'num' }, 'Borrowed / lent'), h('th', {}, 'Fair share (rank among siblings)'))),
      h('tbody', {}, rows)))
      : h('p', { class: 'muted' }, 'No queue you may see.'));
  return null;
}
