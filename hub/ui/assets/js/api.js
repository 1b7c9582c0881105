// The hub's REST API, called with the signed-in user's bearer token. The
// dashboard has no identity of its own: the hub authenticates and
// authorizes each call exactly as it does for meridianctl.

const KEY = 'meridian.token';

export const token = () => sessionStorage.getItem(KEY);
export const setToken = (t) => sessionStorage.setItem(KEY, t);
export const clearToken = () => sessionStorage.removeItem(KEY);

export class APIError extends Error {
  constructor(status, body, text) {
    super((body && body.message) || text || `HTTP ${status}`);
    this.status = status;
    this.body = body;
    this.text = text;
  }
}

let unauthorized = () => {};
export const onUnauthorized = (fn) => { unauthorized = fn; };

function headers(extra) {
  const h = { Accept: 'application/json', ...extra };
  const t = token();
  if (t) h.Authorization = 'Bearer ' + t;
  return h;
}

export async function api(path, { method = 'GET', body, signal } = {}) {
  const init = {
    method, signal, cache: 'no-store', credentials: 'omit',
    headers: headers(body === undefined ? {} : { 'Content-Type': 'application/json' }),
  };
  if (body !== undefined) init.body = JSON.stringify(body);
  const r = await fetch(path, init);
  const text = await r.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch { /* not JSON */ }
  if (!r.ok) {
    if (r.status === 401) unauthorized();
    throw new APIError(r.status, data, text);
  }
  return data;
}

// query builds a query string, repeating array values and leaving out
// empty ones.
export function query(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) {
    if (Array.isArray(v)) v.forEach((x) => x !== '' && q.append(k, x));
    else if (v !== undefined && v !== null && v !== '' && v !== false) q.append(k, String(v));
  }
  const s = q.toString();
  return s ? '?' + s : '';
}

let whoami = null;
export async function whoAmI(force = false) {
  if (!whoami || force) whoami = await api('/v1/whoami');
  return whoami;
}
export const forgetWhoAmI = () => { whoami = null; };

// listAll pages through a list route.
export async function listAll(path, field, params = {}) {
  const out = [];
  let pageToken = '';
  for (let i = 0; i < 100; i++) {
    const r = await api(path + query({ ...params, pageSize: 1000, pageToken }));
    out.push(...((r && r[field]) || []));
    pageToken = r && r.nextPageToken;
    if (!pageToken) break;
  }
  return out;
}

// watch follows GET /v1/workloads:watch, a stream of newline-delimited
// JSON, with fetch (which can send the Authorization header, unlike
// EventSource and WebSocket). It resumes after a break from the last
// revision seen. onEvent gets each WorkloadEvent; onState true/false as the
// stream opens and breaks. It returns a function that stops it.
export function watch({ onEvent, onState, sinceRevision = 0 }) {
  let stopped = false;
  let ctrl = null;
  let rev = sinceRevision;
  let delay = 500;
  async function run() {
    while (!stopped) {
      ctrl = new AbortController();
      try {
        const r = await fetch('/v1/workloads:watch' + query({ sinceRevision: rev || '' }), {
          headers: headers({ Accept: 'application/x-ndjson' }), cache: 'no-store', credentials: 'omit', signal: ctrl.signal,
        });
        if (r.status === 401) { unauthorized(); return; }
        if (!r.ok || !r.body) throw new Error('watch: HTTP ' + r.status);
        onState(true);
        delay = 500;
        const reader = r.body.pipeThrough(new TextDecoderStream()).getReader();
        let buf = '';
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buf += value;
          let nl;
          while ((nl = buf.indexOf('\n')) >= 0) {
            const line = buf.slice(0, nl).trim();
            buf = buf.slice(nl + 1);
            if (!line) continue;
            const msg = JSON.parse(line);
            if (msg.error) {
              // OUT_OF_RANGE: the revision was compacted; start from now.
              if (msg.error.code === 11) rev = 0;
              throw new Error('watch: ' + (msg.error.message || 'error'));
            }
            const ev = msg.result;
            if (!ev) continue;
            if (ev.revision) rev = Number(ev.revision);
            if (ev.type !== 'WORKLOAD_EVENT_TYPE_BOOKMARK') onEvent(ev);
          }
        }
      } catch (e) {
        if (stopped) return;
      }
      onState(false);
      await new Promise((res) => setTimeout(res, delay));
      delay = Math.min(delay * 2, 15000);
    }
  }
  run();
  return () => { stopped = true; if (ctrl) ctrl.abort(); };
}
