// Shared helpers of the demo pages (not part of the client library).
import { signInDemo } from '/js/presenced.js';

/** The server's settings for this page (rendered into #pd-config). */
export const config = JSON.parse(document.getElementById('pd-config')?.textContent || '{}');

export const $ = (id) => document.getElementById(id);

export function show(id, on = true) {
  $(id)?.classList.toggle('hidden', !on);
}

export function text(id, value) {
  const el = $(id);
  if (el && el.textContent !== String(value)) el.textContent = String(value);
}

/** money formats minor units of a currency: 14400 EUR → "€144.00". */
export function money(minor, currency) {
  try {
    return new Intl.NumberFormat(undefined, { style: 'currency', currency }).format(minor / 100);
  } catch {
    return `${(minor / 100).toFixed(2)} ${currency}`;
  }
}

/** duration formats seconds as "1 h 5 min", "3 min 20 s" or "12 s". */
export function duration(seconds) {
  const s = Math.max(0, Math.round(seconds));
  if (s >= 3600) return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
  if (s >= 60) return `${Math.floor(s / 60)} min ${s % 60} s`;
  return `${s} s`;
}

/** clock formats seconds as m:ss. */
export function clock(seconds) {
  const s = Math.max(0, Math.floor(seconds));
  return `${Math.floor(s / 60)}:${String(s % 60).padStart(2, '0')}`;
}

/** A random demo user id, e.g. "fan-3k9x". */
export function randomName(prefix) {
  return `${prefix}-${Math.random().toString(36).slice(2, 6)}`;
}

/**
 * userToken signs a demo user in (development servers), or returns the
 * pasted token when the server has a real identity provider.
 */
export async function userToken(user, pasted) {
  if (!config.signIn) {
    if (!pasted) throw new Error('paste a user token: this server has no demo sign-in');
    return pasted.trim();
  }
  const a = await signInDemo(location.origin, user);
  return a.token;
}

/** Runs f once the page is painted, so connecting never delays it. */
export function afterPaint(f) {
  requestAnimationFrame(() => setTimeout(f, 0));
}

/** A readable sentence for a refused call or a lost connection. */
export function explain(err) {
  if (err?.code && err?.message) return `${err.message} (${err.code})`;
  if (err instanceof TypeError) return 'The server cannot be reached; retrying helps once it is back.';
  return String(err?.message ?? err);
}

/** Words for the connection states of presenced.js. */
export function stateWords(s) {
  return (
    {
      idle: 'not connected',
      connecting: 'connecting…',
      open: 'live',
      waiting: 'reconnecting…',
      paused: 'paused while the tab is hidden',
      fallback: 'live (without WebSockets)',
      stopped: 'closed',
      unauthorized: 'signed out: the token was refused',
      failed: 'not available',
    }[s] ?? s
  );
}
