// /demo/sale/{event}: the fan's journey. Join the line, wait with a live
// position, get in, choose a section from the overview (price, free
// seats), then either ask for the best N seats of it in one tap or pick
// seats on its canvas (touch-sized, scrolling within the section), both
// kept live by per-section invalidations; hold them (with a countdown),
// pay on the sandbox's checkout page, and get tickets whose QR code
// changes every 15 seconds.
import { ApiError, fetchSeatStates, fetchSections, holdSeats, request, SeatMapLive, SeatState, WaitingRoom } from '/js/presenced.js';
import { $, afterPaint, config, duration, explain, money, randomName, show, stateWords, text, userToken } from './common.js';
import { codeCard, holdCountdown, sleep, startCheckout } from './codes.js';

const event = config.event;
const base = location.origin;
const storeKey = 'pd-sale:' + event;
const MAX_SEATS = 6;

/** What survives a reload or the trip to the checkout page. */
let saved = load();
let pass = null;
let room = null;

function load() {
  try {
    return JSON.parse(sessionStorage.getItem(storeKey) || '{}');
  } catch {
    return {};
  }
}

function save() {
  sessionStorage.setItem(storeKey, JSON.stringify(saved));
}

function say(message, isError = true) {
  const el = $('sale-message');
  el.textContent = message;
  el.classList.toggle('error', isError);
  show('sale-message', !!message);
}

// ---- 1. You and 2. the waiting room ----

if (!config.signIn) {
  show('fan-field', false);
  show('fan-token-field', true);
}
$('fan').value = saved.user || randomName('fan');

$('join-form').addEventListener('submit', async (ev) => {
  ev.preventDefault();
  $('join').disabled = true;
  try {
    saved.user = $('fan').value.trim();
    saved.token = await userToken(saved.user, $('fan-token').value);
    save();
    joinLine();
  } catch (err) {
    say(explain(err));
    $('join').disabled = false;
  }
});

function signedIn() {
  show('join-form', false);
  text('you-line', `You are ${saved.user}.`);
  show('you-line', true);
}

function joinLine() {
  signedIn();
  text('position', 'Joining…');
  text('line-state', 'connecting');
  $('join').disabled = true;
  room?.close();
  room = new WaitingRoom({ event, token: saved.token });
  room.on('state', (s) => {
    text('line-state', room.admitted ? 'done: you are in' : stateWords(s));
    document.body.dataset.line = s;
    if (s === 'failed') say('This event has no waiting room open: an operator opens it on the ops page.');
    if (s === 'unauthorized') say('Your sign-in was refused: sign in again.');
  });
  room.on('position', showPosition);
  room.on('admitted', (a) => {
    pass = a.pass;
    document.body.dataset.admitted = 'true';
    text('position', 'You are in!');
    text('eta', `Pick your seats and hold them before ${new Date(a.expiresAt).toLocaleTimeString()}.`);
    show('paused', false);
    text('seats-help', `Take the best seats of a section in one tap, or pick up to ${MAX_SEATS} on its map (tap them, or the arrow keys and Space).`);
    updatePicked();
  });
  room.on('error', (e) => {
    if (e.code === 'not_in_line') say('Your place in line was lost (you were away too long): joining again at the back.', false);
  });
  room.join();
}

function showPosition(p) {
  const line = $('line');
  line.dataset.paused = String(!!p.paused);
  show('paused', !!p.paused);
  if (p.lottery === 'pending') {
    text('position', 'You are in the draw');
    text('eta', 'Everyone who joined before the sale opens is placed in a random order at opening.');
    return;
  }
  line.dataset.position = String(p.position ?? '');
  text('position', p.position === 1 ? 'You are next in line' : `You are number ${p.position} in line`);
  const parts = [];
  if (p.aheadOfYou) parts.push(`${p.aheadOfYou} ${p.aheadOfYou === 1 ? 'person' : 'people'} ahead of you`);
  if (p.opensAt) parts.push(`the sale opens at ${new Date(p.opensAt).toLocaleTimeString()}`);
  if (p.etaSeconds != null) parts.push(`about ${duration(p.etaSeconds)} to go (an estimate)`);
  text('eta', parts.join(' · '));
}

// ---- 3. The sections and the seat map ----

/** The overview: {currency, sections: [{id, name, basePrice, multiplierBps, seatCount, available}]}. */
let overview = null;
/** section id -> {info, seats, states: Uint8Array, rows, cols}: only the sections a fan opened. */
const sections = new Map();
let current = null;
const picked = new Set();
let focusIdx = 0;
let keyboardFocus = false;
const canvas = $('seatmap');
const ctx = canvas.getContext('2d');
const COLORS = { [SeatState.AVAILABLE]: '#2e9e57', [SeatState.HELD]: '#e0a200', [SeatState.SOLD]: '#9aa0a8', [SeatState.BLOCKED]: '#3d424b' };

async function loadLayout() {
  overview = await fetchSections(base, event);
  text('event-name', event);
  const group = $('sections');
  group.replaceChildren(
    ...overview.sections.map((sec) => {
      const b = document.createElement('button');
      b.type = 'button';
      b.className = 'secondary section';
      b.dataset.section = sec.id;
      b.setAttribute('aria-pressed', 'false');
      b.addEventListener('click', () => selectSection(sec.id));
      return b;
    }),
  );
  labelSections();
  await selectSection(overview.sections[0]?.id);
}

/** The price a seat of sec shows now: its base price times the section's multiplier. */
function priceNow(sec, basePrice = sec.basePrice) {
  return Math.round((basePrice * sec.multiplierBps) / 10000);
}

function labelSections() {
  for (const b of $('sections').children) {
    const sec = overview.sections.find((x) => x.id === b.dataset.section);
    if (!sec) continue;
    const surge = sec.multiplierBps !== 10000 ? ` (×${(sec.multiplierBps / 10000).toFixed(2)})` : '';
    b.replaceChildren();
    const name = document.createElement('strong');
    name.textContent = sec.name;
    const detail = document.createElement('span');
    detail.textContent = `${money(priceNow(sec), overview.currency)}${surge} · ${sec.available} free`;
    b.append(name, detail);
    b.dataset.free = String(sec.available);
    b.disabled = sec.available === 0 && b.dataset.section !== current;
  }
  updateBest();
}

/** Opens a section: its seats are fetched (once) and drawn; the others stay closed. */
async function selectSection(id) {
  const info = overview?.sections.find((x) => x.id === id);
  if (!info) return;
  current = id;
  focusIdx = 0;
  for (const b of $('sections').children) b.setAttribute('aria-pressed', String(b.dataset.section === id));
  if (!sections.has(id)) {
    const map = await request(base, `/v1/events/${encodeURIComponent(event)}/seats?section=${encodeURIComponent(id)}`);
    const seats = map.seats;
    sections.set(id, {
      info,
      seats,
      states: Uint8Array.from(seats, (s) => ['AVAILABLE', 'HELD', 'SOLD', 'BLOCKED'].indexOf(s.status)),
      rows: Math.max(...seats.map((s) => s.row)),
      cols: Math.max(...seats.map((s) => s.number)),
    });
  }
  sections.get(id).info = info;
  text('section-title', `${info.name}: row 1 is nearest the stage`);
  updateBest();
  draw();
  // The best seats are mid-row: a section wider than its frame opens on its middle.
  const wrap = $('seatmap-wrap');
  wrap.scrollLeft = (wrap.scrollWidth - wrap.clientWidth) / 2;
}

/**
 * Cell size and padding of the canvas grid; the tests read them too. A
 * seat is at least 24 CSS px, a finger's width: a section wider than the
 * screen scrolls inside its frame, never the page.
 */
function geometry(sec) {
  const pad = 8;
  const width = Math.max(240, Math.min($('seatmap-wrap').clientWidth - 2, 960));
  const cell = Math.max(24, Math.min(32, Math.floor((width - 2 * pad) / sec.cols)));
  return { pad, cell, w: pad * 2 + cell * sec.cols, h: pad * 2 + cell * sec.rows };
}

function draw() {
  const sec = sections.get(current);
  if (!sec) return;
  const g = geometry(sec);
  const dpr = window.devicePixelRatio || 1;
  canvas.width = g.w * dpr;
  canvas.height = g.h * dpr;
  canvas.style.width = g.w + 'px';
  canvas.style.height = g.h + 'px';
  canvas.dataset.cell = String(g.cell);
  canvas.dataset.pad = String(g.pad);
  canvas.dataset.section = current;
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  ctx.clearRect(0, 0, g.w, g.h);
  const gap = g.cell >= 10 ? 2 : 1;
  // The seat focus ring follows the keyboard only: a seat picked by mouse
  // or finger gets no ring (as :focus-visible gives none).
  const ring = document.activeElement === canvas && keyboardFocus;
  canvas.dataset.ring = ring ? 'on' : 'off';
  sec.seats.forEach((seat, i) => {
    const x = g.pad + (seat.number - 1) * g.cell;
    const y = g.pad + (seat.row - 1) * g.cell;
    ctx.fillStyle = picked.has(seat.id) ? '#0b5cad' : COLORS[sec.states[i]];
    ctx.fillRect(x + gap / 2, y + gap / 2, g.cell - gap, g.cell - gap);
    if (i === focusIdx && ring) {
      ctx.strokeStyle = '#ffbf47';
      ctx.lineWidth = 2;
      ctx.strokeRect(x + 1, y + 1, g.cell - 2, g.cell - 2);
    }
  });
  canvas.dataset.free = String(sec.states.filter((s) => s === SeatState.AVAILABLE).length);
}

function describe(sec, i) {
  const seat = sec.seats[i];
  const st = picked.has(seat.id) ? 'picked by you' : ['free', 'held', 'sold', 'not for sale'][sec.states[i]];
  return `${sec.info.name}, row ${seat.row}, seat ${seat.number}: ${st}, ${money(priceNow(sec.info, seat.basePrice), overview.currency)}`;
}

function toggle(i) {
  const sec = sections.get(current);
  const seat = sec.seats[i];
  if (!pass) {
    text('seat-focus', 'Wait for your turn in line to pick seats.');
    return;
  }
  if (picked.has(seat.id)) {
    picked.delete(seat.id);
  } else if (sec.states[i] !== SeatState.AVAILABLE) {
    text('seat-focus', describe(sec, i) + '.');
    return;
  } else if (picked.size >= MAX_SEATS) {
    text('seat-focus', `At most ${MAX_SEATS} seats at a time.`);
    return;
  } else {
    picked.add(seat.id);
  }
  text('seat-focus', describe(sec, i));
  updatePicked();
  draw();
}

canvas.addEventListener('click', (ev) => {
  const sec = sections.get(current);
  if (!sec) return;
  const g = geometry(sec);
  const r = canvas.getBoundingClientRect();
  const col = Math.floor((ev.clientX - r.left - g.pad) / g.cell) + 1;
  const row = Math.floor((ev.clientY - r.top - g.pad) / g.cell) + 1;
  const i = sec.seats.findIndex((s) => s.row === row && s.number === col);
  if (i >= 0) {
    focusIdx = i;
    toggle(i);
  }
});

canvas.addEventListener('keydown', (ev) => {
  keyboardFocus = true;
  const sec = sections.get(current);
  if (!sec) return;
  const seat = sec.seats[focusIdx];
  const find = (row, num) => sec.seats.findIndex((s) => s.row === row && s.number === num);
  let next = -1;
  switch (ev.key) {
    case 'ArrowRight': next = find(seat.row, seat.number + 1); break;
    case 'ArrowLeft': next = find(seat.row, seat.number - 1); break;
    case 'ArrowDown': next = find(seat.row + 1, seat.number); break;
    case 'ArrowUp': next = find(seat.row - 1, seat.number); break;
    case ' ':
    case 'Enter':
      ev.preventDefault();
      toggle(focusIdx);
      return;
    default:
      return;
  }
  ev.preventDefault();
  if (next >= 0) focusIdx = next;
  text('seat-focus', describe(sec, focusIdx));
  draw();
});
canvas.addEventListener('pointerdown', () => { keyboardFocus = false; });
canvas.addEventListener('focus', () => {
  keyboardFocus = canvas.matches(':focus-visible');
  const sec = sections.get(current);
  if (sec) text('seat-focus', describe(sec, focusIdx));
  draw();
});
canvas.addEventListener('blur', draw);

function seatById(id) {
  for (const [sid, sec] of sections) {
    const i = sec.seats.findIndex((s) => s.id === id);
    if (i >= 0) return { sid, sec, i };
  }
  return null;
}

function updatePicked() {
  const names = [...picked].map((id) => {
    const f = seatById(id);
    return f ? `${f.sec.info.id}-${f.sec.seats[f.i].row}-${f.sec.seats[f.i].number}` : String(id);
  });
  text('picked', names.length ? names.join(', ') : 'none');
  $('picked').dataset.count = String(picked.size);
  const btn = $('hold');
  btn.disabled = !pass || picked.size === 0 || !!saved.reservation;
  btn.textContent = picked.size > 1 ? `Hold ${picked.size} seats` : 'Hold seats';
  updateBest();
}

/**
 * Refreshes after a change: the overview always (a few hundred bytes), and
 * the seats of the open section when it is the one that changed (or on a
 * reset). Sections nobody opened cost nothing.
 */
async function refresh(sectionId) {
  if (!overview) return;
  try {
    overview = await fetchSections(base, event);
    for (const [id, sec] of sections) {
      sec.info = overview.sections.find((x) => x.id === id) ?? sec.info;
      if (sectionId && id !== sectionId) continue;
      if (id !== current && !sectionId) {
        sections.delete(id); // fetched again when opened
        continue;
      }
      sec.states = (await fetchSeatStates(base, event, id)).states;
    }
    // A seat someone else took leaves your selection, with a word.
    for (const id of [...picked]) {
      const f = seatById(id);
      if (f && f.sec.states[f.i] !== SeatState.AVAILABLE && !saved.reservation) {
        picked.delete(id);
        text('seat-focus', `Seat ${f.sec.info.id}-${f.sec.seats[f.i].row}-${f.sec.seats[f.i].number} was just taken by someone else.`);
      }
    }
    updatePicked();
    labelSections();
    draw();
  } catch {
    // The next invalidation or reset fetches it again.
  }
}

// ---- 4. The hold ----

let countdownTimer = null;

$('hold').addEventListener('click', () => hold({ seats: [...picked] }, $('hold')));
$('hold-best').addEventListener('click', () =>
  hold({ section: current, quantity: Number($('best-qty').value), adjacent: true }, $('hold-best')),
);
$('best-qty').addEventListener('change', updateBest);

/** The best-available button names what it asks for: "Best 2 together in Section B". */
function updateBest() {
  const btn = $('hold-best');
  const info = overview?.sections.find((x) => x.id === current);
  const q = Number($('best-qty').value);
  btn.textContent = info ? `Best ${q} together in ${info.name}` : 'Best seats';
  btn.disabled = !pass || !info || !!saved.reservation || info.available < q;
}

/** hold asks for seats (named or the best available) and shows the hold. */
async function hold(body, button) {
  button.disabled = true;
  try {
    const r = await holdSeats(base, event, body, { token: saved.token, pass });
    saved.reservation = r;
    save();
    say('');
    showHold(r);
  } catch (err) {
    if (err instanceof ApiError && err.code === 'pending_checkout' && err.details.reservation) {
      const r = await request(base, `/v1/reservations/${err.details.reservation}`, { token: saved.token });
      saved.reservation = r;
      save();
      showHold(r);
      return;
    }
    if (err instanceof ApiError && err.code === 'not_admitted') {
      // The checkout slot ran out before the hold: back into the line.
      pass = null;
      delete document.body.dataset.admitted;
      say('Your turn to pick seats has ended: join the line again.');
      show('join-form', true);
      $('join').disabled = false;
    } else if (err instanceof ApiError && err.code === 'seats_being_held') {
      say('Someone is holding those seats right now. Pick others, or take the best available: one tap, no race.');
    } else if (err instanceof ApiError && err.code === 'no_seats_available') {
      const name = overview?.sections.find((x) => x.id === err.details.section)?.name ?? 'this section';
      say(`No ${body.quantity} seats side by side are free in ${name} (${err.details.free ?? 0} free): fewer seats, or another section?`);
    } else {
      say(explain(err));
    }
    refresh();
    updatePicked();
    updateBest();
  }
}

function showHold(r) {
  show('step-hold', true);
  picked.clear();
  for (const it of r.items ?? []) picked.add(it.seat);
  updatePicked();
  draw();
  const seats = (r.items ?? []).map((it) => `${it.section}-${it.row}-${it.number} (${money(it.price, r.currency)})`);
  text('hold-summary', `${seats.join(', ')}: ${money(r.total, r.currency)} in total.`);
  $('step-hold').dataset.reservation = r.id;
  $('step-hold').dataset.status = r.status;
  clearInterval(countdownTimer);
  const paid = r.status === 'PAID';
  show('hold-timer', !paid);
  show('hold-actions', !paid);
  text('hold-title', paid ? '4. Paid: the seats are yours' : '4. Your hold');
  if (paid) return;
  countdownTimer = holdCountdown(r, 'seats');
  $('pay').disabled = r.status !== 'PENDING_PAYMENT';
  $('cancel').disabled = r.status !== 'PENDING_PAYMENT';
}

$('cancel').addEventListener('click', async () => {
  try {
    await request(base, `/v1/reservations/${saved.reservation.id}`, { method: 'DELETE', token: saved.token });
  } catch (err) {
    say(explain(err));
  }
  clearInterval(countdownTimer);
  delete saved.reservation;
  delete saved.payment;
  save();
  picked.clear();
  show('step-hold', false);
  updatePicked();
  refresh();
});

// ---- 5. Payment and tickets ----

$('pay').addEventListener('click', () =>
  startCheckout(saved.reservation, saved.token, (p) => {
    saved.payment = p;
    save();
  }),
);

/** After the checkout: wait for the provider's webhook to make it PAID. */
async function followPayment() {
  const r = saved.reservation;
  text('pay-state', 'Paid at the provider: waiting for its confirmation (the signed webhook)…');
  $('pay').disabled = true;
  $('cancel').disabled = true;
  for (;;) {
    try {
      const now = await request(base, `/v1/reservations/${r.id}`, { token: saved.token });
      $('step-hold').dataset.status = now.status;
      if (now.status === 'PAID') {
        showHold(now);
        text('pay-state', 'Paid. Your tickets are being issued…');
        return tickets(r.id);
      }
      if (now.status !== 'PENDING_PAYMENT') {
        text('pay-state', `The hold ended (${now.status.toLowerCase()}) before the payment was confirmed; it will be refunded.`);
        return;
      }
    } catch {
      // keep waiting
    }
    await sleep(1000);
  }
}


async function tickets(reservation) {
  show('step-tickets', true);
  for (;;) {
    try {
      const list = (await request(base, '/v1/tickets', { token: saved.token })).tickets.filter((t) => t.reservation === reservation);
      if (list.length > 0) {
        text('pay-state', 'Paid.');
        $('tickets').replaceChildren(...list.map((t) => codeCard(t, saved.token)));
        return;
      }
    } catch {
      // keep waiting
    }
    await sleep(1000);
  }
}

// ---- start ----

afterPaint(async () => {
  try {
    await loadLayout();
  } catch (err) {
    say(err instanceof ApiError && err.status === 404 ? `There is no event “${event}”.` : explain(err));
    return;
  }
  const live = new SeatMapLive({ event });
  live.on('reset', () => refresh());
  live.on('invalidate', (s) => refresh(s));
  live.start();
  window.addEventListener('resize', draw);

  if (saved.token) signedIn();
  if (saved.token && saved.reservation) {
    // Back from the checkout page, or a reload during the hold.
    try {
      const r = await request(base, `/v1/reservations/${saved.reservation.id}`, { token: saved.token });
      saved.reservation = r;
      save();
      showHold(r);
      if (r.status === 'PAID') {
        $('pay').disabled = true;
        return tickets(r.id);
      }
      if (r.status === 'PENDING_PAYMENT' && saved.payment && location.hash === '#paid') return followPayment();
      if (r.status !== 'PENDING_PAYMENT') {
        delete saved.reservation;
        save();
        show('step-hold', false);
      }
    } catch {
      delete saved.reservation;
      save();
    }
  }
  if (saved.token) joinLine();
});
