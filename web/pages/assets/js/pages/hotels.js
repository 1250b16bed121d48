// /demo/hotels: search by city and dates, with each hotel's viewer count.
import { request } from '/js/presenced.js';
import { $, afterPaint, explain, money, text } from './common.js';

const form = $('search');
const params = new URLSearchParams(location.search);

function isoDay(offset) {
  const d = new Date(Date.now() + offset * 86400000);
  return d.toISOString().slice(0, 10);
}

for (const k of ['city', 'checkIn', 'checkOut', 'guests']) {
  if (params.get(k)) form.elements[k].value = params.get(k);
}
if (!form.elements.checkIn.value) form.elements.checkIn.value = isoDay(3);
if (!form.elements.checkOut.value) form.elements.checkOut.value = isoDay(5);

async function search() {
  const q = new URLSearchParams({
    city: form.elements.city.value.trim().toLowerCase(),
    checkIn: form.elements.checkIn.value,
    checkOut: form.elements.checkOut.value,
    guests: form.elements.guests.value,
  });
  history.replaceState(null, '', '?' + q);
  text('search-status', 'Searching…');
  const list = $('results');
  try {
    const r = await request(location.origin, '/v1/hotels?' + q);
    list.replaceChildren(
      ...r.hotels.map((h) => {
        const li = document.createElement('li');
        li.className = 'card';
        const a = document.createElement('a');
        a.href = `/demo/hotels/${encodeURIComponent(h.id)}?${q}`;
        a.textContent = h.name;
        const price = document.createElement('span');
        price.textContent = `from ${money(h.lowestTotal, h.currency)} for ${r.nights} night${r.nights === 1 ? '' : 's'}`;
        const looking = document.createElement('span');
        looking.className = 'looking';
        // "—" when the count is unknown: never an error in its place.
        looking.textContent = h.viewers == null ? '— looking now' : `${h.viewers} looking now`;
        li.append(a, price, looking);
        return li;
      }),
    );
    text('search-status', r.hotels.length ? `${r.hotels.length} hotels in ${r.city} with rooms for every night.` : `No hotel in ${r.city} has rooms for those dates.`);
  } catch (err) {
    list.replaceChildren();
    text('search-status', explain(err));
  }
}

form.addEventListener('submit', (ev) => {
  ev.preventDefault();
  search();
});
afterPaint(search);
