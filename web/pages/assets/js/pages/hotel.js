// /demo/hotels/{id}: a hotel's page. The live viewer count ("—" until the
// first count; a failure never becomes a banner), then a stay booked as
// the sale page books seats: dates, guests and rooms, a room type with its
// price per night, a hold with a countdown, the sandbox's checkout page,
// and one voucher per room with a rotating code.
import { ApiError, request, Viewers } from '/js/presenced.js';
import { $, afterPaint, config, explain, money, randomName, show, text, userToken } from './common.js';
import { codeCard, holdCountdown, sleep, startCheckout } from './codes.js';

const hotel = config.hotel;
const info = config.hotelInfo ?? null; // null: this process has no hotel search
const base = location.origin;
const params = new URLSearchParams(location.search);
const city = params.get('city') || info?.city || '';
const storeKey = 'pd-hotel:' + hotel;

/** What survives a reload or the trip to the checkout page. */
let saved = load();

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

function say(message) {
  text('hotel-message', message);
  show('hotel-message', !!message);
}

function showCount(n) {
  const el = $('viewer-count');
  el.dataset.count = String(n);
  text('viewer-count', n);
  text('viewer-words', n === 1 ? 'person is looking at this hotel right now' : 'people are looking at this hotel right now');
}

function showName(name) {
  text('hotel-name', name);
  document.title = `${name} · presenced`;
}

// ---- 1. The stay ----

/** A date n days from today, as the date input writes it (local time). */
function day(n) {
  const d = new Date();
  d.setDate(d.getDate() + n);
  return `${d.getFullYear()}-${String(d.getMonth() + 1).padStart(2, '0')}-${String(d.getDate()).padStart(2, '0')}`;
}

function fillForm() {
  const q = saved.query ?? {};
  $('check-in').value = params.get('checkIn') || q.checkIn || day(1);
  $('check-out').value = params.get('checkOut') || q.checkOut || day(3);
  $('guests').value = params.get('guests') || q.guests || '2';
  $('rooms-wanted').value = params.get('rooms') || q.rooms || '1';
  $('check-in').min = day(0);
  $('guest').value = saved.user || randomName('guest');
  if (!config.signIn) {
    show('guest-field', false);
    $('guest').required = false;
    show('guest-token-field', true);
  }
}

function query() {
  return {
    checkIn: $('check-in').value,
    checkOut: $('check-out').value,
    guests: $('guests').value,
    rooms: $('rooms-wanted').value,
  };
}

$('stay-form').addEventListener('submit', (ev) => {
  ev.preventDefault();
  search();
});

// ---- 2. Room types with their price per night ----

/** nightsOf counts the nights between two dates. */
function nightsOf(q) {
  return Math.round((Date.parse(q.checkOut) - Date.parse(q.checkIn)) / 86400000);
}

async function search() {
  const q = query();
  saved.query = q;
  save();
  if (!city) {
    text('rooms-status', 'This page does not know the hotel’s city: open it from the hotel search.');
    return;
  }
  if (nightsOf(q) < 1) {
    text('rooms-status', 'Check-out comes after check-in.');
    return;
  }
  const qs = new URLSearchParams({ city, ...q });
  history.replaceState(null, '', `${location.pathname}?${qs}`);
  $('back').href = '/demo/hotels?' + qs;
  text('rooms-status', 'Looking for rooms…');
  $('rooms').dataset.state = 'loading';
  try {
    const r = await request(base, '/v1/hotels?' + qs);
    const h = r.hotels.find((x) => x.id === hotel);
    if (h) showName(h.name);
    const types = h?.roomTypes ?? [];
    text('rooms-status', types.length ? `${r.checkIn} to ${r.checkOut}, ${r.nights} ${r.nights === 1 ? 'night' : 'nights'}, ${r.guests} guests, ${r.rooms} ${r.rooms === 1 ? 'room' : 'rooms'}:` : 'No rooms left for these dates: try other dates or fewer rooms.');
    $('rooms').replaceChildren(...types.map((t) => roomCard(t, h.currency, r)));
    $('rooms').dataset.state = 'ready';
  } catch (err) {
    text('rooms-status', `Rooms cannot be shown right now: ${explain(err)}`);
    $('rooms').dataset.state = 'failed';
  }
}

function roomCard(t, currency, r) {
  const li = document.createElement('li');
  li.className = 'card';
  li.dataset.roomType = t.id;
  const perNight = Math.round(t.total / r.nights / r.rooms);
  const about = document.createElement('div');
  const name = document.createElement('strong');
  name.textContent = t.name;
  const line = document.createElement('p');
  line.className = 'price';
  line.textContent = `${money(perNight, currency)} a night${r.rooms > 1 ? ' a room' : ''} · ${money(t.total, currency)} in total`;
  const more = document.createElement('p');
  more.className = 'muted';
  more.textContent = `Sleeps ${t.capacity} · ${t.available} left`;
  about.append(name, line, more);
  const hold = document.createElement('button');
  hold.type = 'button';
  hold.className = 'hold';
  hold.textContent = r.rooms > 1 ? `Hold ${r.rooms} rooms` : 'Hold this room';
  hold.setAttribute('aria-label', `${hold.textContent}: ${t.name}`);
  hold.disabled = !!saved.reservation;
  hold.addEventListener('click', () => holdRooms(t.id));
  li.append(about, hold);
  return li;
}

// ---- 3. The hold ----

let countdownTimer = null;

async function token() {
  if (saved.token) return saved.token;
  saved.user = $('guest').value.trim();
  if (config.signIn && !$('guest').reportValidity()) throw new Error('Pick a name first.');
  saved.token = await userToken(saved.user, $('guest-token').value);
  save();
  return saved.token;
}

async function holdRooms(roomType) {
  for (const b of document.querySelectorAll('#rooms button.hold')) b.disabled = true;
  const q = saved.query ?? query();
  try {
    const r = await request(base, `/v1/hotels/${encodeURIComponent(hotel)}/holds`, {
      method: 'POST',
      token: await token(),
      headers: { 'Idempotency-Key': crypto.randomUUID() },
      body: { roomType, checkIn: q.checkIn, checkOut: q.checkOut, rooms: Number(q.rooms), guests: Number(q.guests) },
    });
    saved.reservation = r;
    save();
    say('');
    showHold(r);
  } catch (err) {
    if (err instanceof ApiError && err.code === 'pending_checkout' && err.details?.reservation) {
      const r = await request(base, `/v1/reservations/${err.details.reservation}`, { token: saved.token });
      saved.reservation = r;
      save();
      say('You already hold rooms here: pay for them or release them first.');
      showHold(r);
      return;
    }
    if (err instanceof ApiError && err.status === 401) {
      delete saved.token;
      save();
    }
    say(explain(err));
    for (const b of document.querySelectorAll('#rooms button.hold')) b.disabled = false;
  }
}

function showHold(r) {
  const s = r.stay;
  show('step-hold', true);
  $('step-hold').dataset.reservation = r.id;
  $('step-hold').dataset.status = r.status;
  const nights = s.nights.length;
  text('hold-summary', `${s.roomTypeName}, ${s.rooms} ${s.rooms === 1 ? 'room' : 'rooms'} for ${s.guests} ${s.guests === 1 ? 'guest' : 'guests'}, ${s.checkIn} to ${s.checkOut} (${nights} ${nights === 1 ? 'night' : 'nights'}): ${money(r.total, r.currency)} in total.`);
  $('hold-nights').replaceChildren(
    ...s.nights.map((n) => {
      const li = document.createElement('li');
      li.dataset.date = n.date;
      li.textContent = `${new Date(n.date + 'T12:00:00').toLocaleDateString(undefined, { weekday: 'short', day: 'numeric', month: 'short' })}: ${money(n.price, r.currency)}${s.rooms > 1 ? ' a room' : ''}${n.price !== n.basePrice ? ` (usually ${money(n.basePrice, r.currency)})` : ''}`;
      return li;
    }),
  );
  for (const b of document.querySelectorAll('#rooms button.hold')) b.disabled = true;
  clearInterval(countdownTimer);
  const paid = r.status === 'PAID';
  show('hold-timer', !paid);
  show('hold-actions', !paid);
  text('hold-title', paid ? '3. Paid: the rooms are yours' : '3. Your hold');
  if (paid) return;
  countdownTimer = holdCountdown(r, 'rooms');
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
  show('step-hold', false);
  search();
});

// ---- 4. Payment and vouchers ----

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
        text('pay-state', 'Paid. Your vouchers are being issued…');
        forgetPaid();
        search();
        return vouchers(r.id);
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

async function vouchers(reservation) {
  show('step-vouchers', true);
  for (;;) {
    try {
      const list = (await request(base, '/v1/tickets', { token: saved.token })).tickets.filter((t) => t.reservation === reservation);
      if (list.length > 0) {
        text('pay-state', 'Paid.');
        $('vouchers').replaceChildren(...list.map((t) => codeCard(t, saved.token, 'Voucher code')));
        return;
      }
    } catch {
      // keep waiting
    }
    await sleep(1000);
  }
}

/** A new stay after a paid one: the form and the room types again. */
function forgetPaid() {
  delete saved.reservation;
  delete saved.payment;
  save();
}

// ---- start ----

afterPaint(async () => {
  const viewers = new Viewers();
  viewers.on('count', (c) => {
    if (c.hotel === hotel) showCount(c.count);
  });
  viewers.watch(hotel);
  fillForm();
  if (saved.token && saved.reservation) {
    // Back from the checkout page, or a reload during the hold.
    try {
      const r = await request(base, `/v1/reservations/${saved.reservation.id}`, { token: saved.token });
      saved.reservation = r;
      save();
      if (r.status === 'PAID') {
        showHold(r);
        vouchers(r.id);
        forgetPaid();
      } else if (r.status === 'PENDING_PAYMENT') {
        showHold(r);
        if (saved.payment && location.hash === '#paid') followPayment();
      } else {
        forgetPaid();
      }
    } catch {
      forgetPaid();
    }
  }
  search();
});
