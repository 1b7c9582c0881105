// The dashboard's entry point: sign-in state, the hash router, and the one
// live watch stream every view listens to.
import { api, token, clearToken, onUnauthorized, whoAmI, forgetWhoAmI, watch } from './api.js';
import { h, clear, errorBox } from './util.js';
import { renderLogin, finishOIDC } from './login.js';
import { renderFleet } from './fleet.js';
import { renderQueues } from './queues.js';
import { renderWorkloads } from './workloads.js';
import { renderDetail } from './detail.js';

const main = document.getElementById('main');

// Live updates: listeners get every workload event; recent events are
// kept per workload for the detail view's timeline.
const listeners = new Set();
const seen = new Map(); // workload id -> [{time, type, phase, revision}]
let stopWatch = null;

export const live = {
  on(fn) { listeners.add(fn); return () => listeners.delete(fn); },
  seen(id) { return seen.get(id) || []; },
};

function startLive() {
  if (stopWatch) return;
  const badge = document.getElementById('live');
  badge.hidden = false;
  stopWatch = watch({
    onState(on) {
      badge.classList.toggle('on', on);
      badge.classList.toggle('off', !on);
      badge.textContent = on ? 'live' : 'reconnecting';
    },
    onEvent(ev) {
      const w = ev.workload || {};
      if (w.id) {
        const list = seen.get(w.id) || [];
        list.push({ time: ev.time || new Date().toISOString(), type: ev.type, phase: (w.status || {}).phase, revision: ev.revision, message: (w.status || {}).message });
        if (list.length > 50) list.shift();
        seen.set(w.id, list);
        if (seen.size > 5000) seen.delete(seen.keys().next().value);
      }
      for (const fn of listeners) {
        try { fn(ev); } catch (e) { console.error(e); }
      }
    },
  });
}

function stopLive() {
  if (stopWatch) stopWatch();
  stopWatch = null;
  document.getElementById('live').hidden = true;
}

function signOut(reason) {
  clearToken();
  forgetWhoAmI();
  stopLive();
  listeners.clear();
  location.hash = '#/login' + (reason ? '?reason=' + encodeURIComponent(reason) : '');
}

onUnauthorized(() => {
  if (token()) signOut('The hub no longer accepts your credential; sign in again.');
});

document.getElementById('signout').addEventListener('click', () => signOut());

// A page the browser keeps in its back/forward cache would keep its watch
// stream open, and a browser opens only six connections to one host: after
// a few visits elsewhere and back, every new request would wait. Stop the
// stream when the page is hidden; when it is shown again from the cache,
// route again, which reloads the view and restarts the stream.
window.addEventListener('pagehide', () => stopLive());
window.addEventListener('pageshow', (ev) => { if (ev.persisted) route(); });

let viewCleanup = null;

async function route() {
  if (viewCleanup) { viewCleanup(); viewCleanup = null; }
  const hash = location.hash.replace(/^#/, '') || '/fleet';
  const [pathPart, queryPart] = hash.split('?');
  const params = new URLSearchParams(queryPart || '');
  const parts = pathPart.split('/').filter(Boolean);
  const signedIn = !!token();
  document.getElementById('nav').hidden = !signedIn;
  document.getElementById('who').hidden = !signedIn;
  document.getElementById('signout').hidden = !signedIn;
  if (!signedIn || parts[0] === 'login') {
    if (signedIn) { location.hash = '#/fleet'; return; }
    stopLive();
    clear(main);
    viewCleanup = await renderLogin(main, params, () => { location.hash = '#/fleet'; });
    return;
  }
  try {
    const me = await whoAmI();
    const p = me.principal || {};
    clear(document.getElementById('who'), p.user || '?', ' ', h('span', { class: 'muted' }, `(${p.method || ''})`));
  } catch (e) {
    clear(main, errorBox(e));
    return;
  }
  startLive();
  for (const a of document.querySelectorAll('#nav a')) a.classList.toggle('active', a.dataset.view === parts[0]);
  clear(main, h('p', { class: 'muted' }, 'Loading…'));
  const ctx = { live, params, navigate: (to) => { location.hash = to; } };
  try {
    switch (parts[0]) {
      case 'fleet': viewCleanup = await renderFleet(main, ctx); break;
      case 'queues': viewCleanup = await renderQueues(main, ctx); break;
      case 'workloads':
        if (parts[1]) viewCleanup = await renderDetail(main, ctx, decodeURIComponent(parts[1]));
        else viewCleanup = await renderWorkloads(main, ctx);
        break;
      default: location.hash = '#/fleet';
    }
  } catch (e) {
    clear(main, errorBox(e));
  }
}

async function start() {
  // The OIDC redirect lands on /ui/callback?code=…&state=…
  if (location.pathname.endsWith('/callback')) {
    try {
      await finishOIDC(new URLSearchParams(location.search));
      history.replaceState(null, '', location.pathname.replace(/callback$/, '') + '#/fleet');
    } catch (e) {
      history.replaceState(null, '', location.pathname.replace(/callback$/, '') + '#/login?reason=' + encodeURIComponent(String(e.message || e)));
    }
  }
  window.addEventListener('hashchange', route);
  route();
}

start();
// For the browser test and curious operators: the API helper, so a console
// can call the hub as the signed-in user.
window.meridian = { api };
