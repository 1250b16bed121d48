// What the pages that sell share: the start of a payment on the sandbox's
// checkout page, and a ticket or voucher with its rotating QR code (GET
// /v1/tickets lists both).
import { request } from '/js/presenced.js';
import { $, clock, explain, text } from './common.js';

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/**
 * codeCard is a list item showing ticket t: its label, the QR image and
 * payload, fetched again when the code's 15-second window turns.
 */
export function codeCard(t, token, what = 'Entry code') {
  const base = location.origin;
  const li = document.createElement('li');
  li.className = 'card ticket';
  li.dataset.ticket = t.id;
  const h = document.createElement('h3');
  h.textContent = t.label;
  const img = document.createElement('img');
  img.alt = `${what} for ${t.label}`;
  img.width = 256;
  img.height = 256;
  const note = document.createElement('p');
  note.className = 'status-line';
  const payload = document.createElement('p');
  payload.className = 'payload';
  li.append(h, img, note, payload);
  let refreshAt = 0;
  let url = null;
  const rotate = async () => {
    let wait = 1000;
    try {
      const qr = await request(base, `/v1/tickets/${t.id}/qr`, { token });
      const png = await request(base, `/v1/tickets/${t.id}/qr?format=png`, { token, as: 'blob' });
      if (url) URL.revokeObjectURL(url);
      url = URL.createObjectURL(png);
      img.src = url;
      li.dataset.window = String(qr.window);
      payload.textContent = qr.payload;
      refreshAt = Date.parse(qr.refreshAt);
      wait = Math.max(500, refreshAt - Date.now() + 250);
    } catch {
      // try again shortly
    }
    setTimeout(rotate, wait);
  };
  setInterval(() => {
    if (refreshAt) note.textContent = `The code changes in ${Math.max(0, Math.ceil((refreshAt - Date.now()) / 1000))} s`;
  }, 1000);
  rotate();
  return li;
}

/**
 * startCheckout starts the payment of reservation r and goes to the
 * checkout page, which comes back to this page; remember(payment) keeps
 * what the page needs after it. The page has a #pay button and a
 * #pay-state line.
 */
export async function startCheckout(r, token, remember) {
  $('pay').disabled = true;
  text('pay-state', 'Starting the payment…');
  try {
    // One key per reservation: a retry gets the same payment back.
    const p = await request(location.origin, `/v1/reservations/${r.id}/payments`, {
      method: 'POST',
      token,
      headers: { 'Idempotency-Key': 'pay-' + r.id },
    });
    remember({ id: p.id });
    const f = new URLSearchParams({
      confirm: p.confirmUrl,
      secret: p.clientSecret,
      amount: String(p.amount),
      currency: p.currency,
      back: location.pathname,
    });
    // The fragment never reaches a server log.
    location.assign('/demo/checkout#' + f);
  } catch (err) {
    text('pay-state', explain(err));
    $('pay').disabled = false;
  }
}

/**
 * holdCountdown shows the time left on hold r in #countdown every second
 * and, when it runs out, says the `what` are back on sale and disables
 * #pay. It returns the interval, for clearInterval.
 */
export function holdCountdown(r, what) {
  let timer = 0;
  const tick = () => {
    const left = (Date.parse(r.expiresAt) - Date.now()) / 1000;
    text('countdown', clock(left));
    $('countdown').dataset.seconds = String(Math.max(0, Math.floor(left)));
    if (left <= 0) {
      clearInterval(timer);
      text('pay-state', `The hold has expired: the ${what} are back on sale.`);
      $('pay').disabled = true;
    }
  };
  tick();
  timer = setInterval(tick, 1000);
  return timer;
}
