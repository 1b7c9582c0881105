// Sign-in: paste an API token, or sign in with an OIDC issuer the hub
// trusts (authorization code with PKCE; the browser holds the verifier and
// the ID token, the hub only forwards the code exchange).
import { api, setToken, clearToken, forgetWhoAmI } from './api.js';
import { h, clear, errorText } from './util.js';

const OIDC_KEY = 'meridian.oidc';

function b64url(bytes) {
  let s = '';
  for (const b of new Uint8Array(bytes)) s += String.fromCharCode(b);
  return btoa(s).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
}

function random(n = 32) {
  return b64url(crypto.getRandomValues(new Uint8Array(n)));
}

function redirectURI() {
  return location.origin + location.pathname.replace(/(index\.html|callback)?$/, '') + 'callback';
}

export async function startOIDC(issuer) {
  const verifier = random(48);
  const challenge = b64url(await crypto.subtle.digest('SHA-256', new TextEncoder().encode(verifier)));
  const state = random(16);
  const nonce = random(16);
  sessionStorage.setItem(OIDC_KEY, JSON.stringify({ issuer: issuer.issuer, verifier, state, nonce }));
  const u = new URL(issuer.authorizationEndpoint);
  const q = u.searchParams;
  q.set('response_type', 'code');
  q.set('client_id', issuer.clientId);
  q.set('redirect_uri', redirectURI());
  q.set('scope', (issuer.scopes || ['openid']).join(' '));
  q.set('state', state);
  q.set('nonce', nonce);
  q.set('code_challenge', challenge);
  q.set('code_challenge_method', 'S256');
  location.assign(u.toString());
}

// finishOIDC completes the flow on /ui/callback.
export async function finishOIDC(params) {
  const saved = JSON.parse(sessionStorage.getItem(OIDC_KEY) || 'null');
  sessionStorage.removeItem(OIDC_KEY);
  if (params.get('error')) throw new Error(`Sign-in refused by the provider: ${params.get('error')} ${params.get('error_description') || ''}`);
  if (!saved || !params.get('state') || params.get('state') !== saved.state) throw new Error('Sign-in failed: the answer does not match a sign-in started here (state).');
  const r = await fetch('oidc/token', {
    method: 'POST', credentials: 'omit', cache: 'no-store',
    headers: { 'Content-Type': 'application/json', Accept: 'application/json' },
    body: JSON.stringify({ issuer: saved.issuer, code: params.get('code') || '', codeVerifier: saved.verifier, redirectUri: redirectURI() }),
  });
  const body = await r.json().catch(() => ({}));
  if (!r.ok || !body.idToken) throw new Error('Sign-in failed: ' + (body.error || 'HTTP ' + r.status));
  // The hub verifies the token's signature; the nonce ties it to this
  // sign-in.
  let claims = {};
  try { claims = JSON.parse(atob(body.idToken.split('.')[1].replace(/-/g, '+').replace(/_/g, '/'))); } catch { /* checked below */ }
  if (claims.nonce !== saved.nonce) throw new Error('Sign-in failed: the ID token is not for this sign-in (nonce).');
  setToken(body.idToken);
  forgetWhoAmI();
}

export async function renderLogin(main, params, done) {
  const reason = params.get('reason');
  const input = h('textarea', { id: 'token', rows: 3, placeholder: 'mrd_…', autocomplete: 'off', spellcheck: 'false' });
  const msg = h('div');
  const form = h('form', {
    id: 'login-form',
    async onsubmit(ev) {
      ev.preventDefault();
      const t = input.value.trim();
      if (!t) return;
      setToken(t);
      forgetWhoAmI();
      try {
        await api('/v1/whoami');
        input.value = '';
        done();
      } catch (e) {
        clearToken();
        clear(msg, h('div', { class: 'error', role: 'alert' }, 'The hub refused this token. ', errorText(e)));
      }
    },
  },
  h('label', { for: 'token' }, 'API token or OIDC ID token'),
  input,
  h('p', { class: 'muted' }, 'The token stays in this browser tab (sessionStorage) and is sent only to this hub. Create one with ',
    h('code', {}, 'meridianctl token create'), '.'),
  h('button', { class: 'primary', type: 'submit' }, 'Sign in'));
  const oidc = h('div');
  clear(main, h('div', { class: 'login card' },
    h('h1', {}, 'Sign in to Meridian'),
    reason ? h('div', { class: 'note' }, reason) : null,
    oidc, form, msg));
  try {
    const r = await fetch('config.json', { cache: 'no-store', credentials: 'omit' });
    const cfg = await r.json();
    for (const is of cfg.issuers || []) {
      const host = new URL(is.issuer).host;
      if (is.error || !is.authorizationEndpoint) {
        oidc.append(h('div', { class: 'note' }, `Sign in with ${host}: ${is.error || 'unavailable'}`));
        continue;
      }
      oidc.append(h('p', {}, h('button', { class: 'primary oidc', type: 'button', onclick: () => startOIDC(is) }, `Sign in with OIDC (${host})`)));
    }
    if ((cfg.issuers || []).length) oidc.append(h('p', { class: 'muted' }, 'or paste a token:'));
  } catch { /* token sign-in still works */ }
  input.focus();
  return null;
}
