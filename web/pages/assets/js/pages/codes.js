// A ticket or voucher with its rotating QR code, shared by the pages that
// sell (GET /v1/tickets lists both).
import { request } from '/js/presenced.js';

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
