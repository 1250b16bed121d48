// /demo/hotels/{id}: a hotel page with its live viewer count. While the
// count is unknown the widget shows "—"; a failure never becomes a banner.
import { request, Viewers } from '/js/presenced.js';
import { $, afterPaint, config, money, text } from './common.js';

const hotel = config.hotel;
const params = new URLSearchParams(location.search);

function showCount(n) {
  const el = $('viewer-count');
  el.dataset.count = String(n);
  text('viewer-count', n);
  text('viewer-words', n === 1 ? 'person is looking at this hotel right now' : 'people are looking at this hotel right now');
}

async function rooms() {
  if (!params.get('city')) {
    text('rooms-status', 'Search for dates to see rooms and prices.');
    return;
  }
  $('back').href = '/demo/hotels?' + params;
  try {
    const r = await request(location.origin, '/v1/hotels?' + params);
    const h = r.hotels.find((x) => x.id === hotel);
    if (!h) {
      text('rooms-status', 'No rooms left for these dates.');
      return;
    }
    text('hotel-name', h.name);
    document.title = `${h.name} · presenced`;
    text('rooms-status', `${r.checkIn} to ${r.checkOut}, ${r.guests} guests:`);
    $('rooms').replaceChildren(
      ...h.roomTypes.map((t) => {
        const li = document.createElement('li');
        li.className = 'card';
        li.textContent = `${t.name} (sleeps ${t.capacity}): ${money(t.total, h.currency)}, ${t.available} left`;
        return li;
      }),
    );
  } catch {
    text('rooms-status', 'Rooms cannot be shown right now.');
  }
}

afterPaint(() => {
  const viewers = new Viewers();
  viewers.on('count', (c) => {
    if (c.hotel === hotel) showCount(c.count);
  });
  viewers.watch(hotel);
  rooms();
});
