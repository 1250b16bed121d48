// /demo/ops: the line of an event and this process's own figures, with
// the admission dial (capacity, batch, pause) behind the API key.
import { ApiError, request } from '/js/presenced.js';
import { $, config, duration, explain, show, text } from './common.js';

const base = location.origin;
let key = sessionStorage.getItem('pd-ops-key') || '';
let event = sessionStorage.getItem('pd-ops-event') || config.demoEvent || '';
let settings = null;
let dialEdited = false; // see the dial's listeners below
let timers = [];

$('event').value = event;
$('apikey').value = key;

function fail(message) {
  const el = $('ops-message');
  el.textContent = message;
  el.classList.add('error');
  show('ops-message', !!message);
}

async function room() {
  try {
    const r = await request(base, `/v1/admin/waitingrooms/${encodeURIComponent(event)}`, { apiKey: key });
    fail('');
    settings = r.settings;
    const s = r.stats;
    text('queued', s.queued);
    text('active', s.active);
    text('capacity', s.capacity);
    $('active-meter').max = Math.max(1, s.capacity);
    $('active-meter').value = s.active;
    text('admitted', s.admittedPerMinute);
    text('oldest', s.oldestWaitSeconds ? duration(s.oldestWaitSeconds) : '—');
    text('room-state', r.settings.paused ? 'paused' : 'admitting');
    $('room-state').dataset.paused = String(r.settings.paused);
    const pause = $('dial-pause');
    pause.setAttribute('aria-pressed', String(r.settings.paused));
    pause.textContent = r.settings.paused ? 'Resume the line' : 'Pause the line';
    if (!dialEdited && document.activeElement !== $('dial-capacity') && document.activeElement !== $('dial-batch')) {
      $('dial-capacity').value = r.settings.capacity;
      $('dial-batch').value = r.settings.batch;
    }
  } catch (err) {
    if (err instanceof ApiError && err.code === 'no_waiting_room') {
      settings = null;
      text('room-state', 'no waiting room');
      fail(`“${event}” has no waiting room: apply the dial to open one.`);
    } else if (err instanceof ApiError && err.status === 401) {
      fail('The API key was refused.');
    } else {
      fail(explain(err));
    }
  }
}

/** parseMetrics reads Prometheus text: name{labels} value. */
function parseMetrics(body) {
  const out = [];
  for (const line of body.split('\n')) {
    // A declared family without series yet (nothing happened) reads 0.
    const decl = /^# TYPE (\S+)/.exec(line);
    if (decl) out.push({ name: decl[1], labels: { declared: 'true' }, value: 0 });
    const m = /^([a-zA-Z_:][\w:]*)(\{[^}]*\})?\s+(\S+)/.exec(line);
    if (!m) continue;
    const labels = {};
    for (const l of (m[2] || '').matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)) labels[l[1]] = l[2];
    out.push({ name: m[1], labels, value: Number(m[3]) });
  }
  return out;
}

const sum = (ms, name, pred = () => true) => ms.filter((m) => m.name === name && pred(m.labels)).reduce((n, m) => n + m.value, 0);
const has = (ms, name) => ms.some((m) => m.name === name);

async function metrics() {
  try {
    const ms = parseMetrics(await (await fetch(base + '/metrics', { cache: 'no-store' })).text());
    const holds = 'presenced_booking_hold_outcomes_total';
    if (has(ms, holds)) {
      // Labelled by HTTP status: 201 held, 409 a correct refusal (taken).
      text('holds-ok', sum(ms, holds, (l) => l.code === '201'));
      text('holds-taken', sum(ms, holds, (l) => l.code === '409'));
      text('holds-other', sum(ms, holds, (l) => l.code !== '201' && l.code !== '409'));
    }
    const age = 'presenced_outbox_oldest_unpublished_age_seconds';
    if (has(ms, age)) text('outbox-age', duration(sum(ms, age)));
    if (has(ms, 'presenced_presence_connections')) text('presence-conns', sum(ms, 'presenced_presence_connections'));
    if (has(ms, 'presenced_realtime_connections')) text('sockets', sum(ms, 'presenced_realtime_connections'));
  } catch {
    // the next round tries again
  }
}

function watch() {
  timers.forEach(clearInterval);
  timers = [];
  if (!key || !event) return;
  room();
  metrics();
  timers.push(setInterval(room, 2000), setInterval(metrics, 5000));
}

$('ops-form').addEventListener('submit', (ev) => {
  ev.preventDefault();
  key = $('apikey').value.trim();
  event = $('event').value.trim();
  sessionStorage.setItem('pd-ops-key', key);
  sessionStorage.setItem('pd-ops-event', event);
  watch();
});

async function apply(change) {
  try {
    const r = await request(base, `/v1/admin/waitingrooms/${encodeURIComponent(event)}`, { method: 'PUT', apiKey: key, body: change });
    settings = r;
    text('dial-state', `Applied: capacity ${r.capacity}, batch ${r.batch}${r.paused ? ', paused' : ''}. It takes effect at the next tick.`);
    room();
  } catch (err) {
    text('dial-state', explain(err));
  }
}

// A dial the operator edited stays as typed until it is applied, even
// once the field loses focus: the refresh does not put the old value back.
for (const id of ['dial-capacity', 'dial-batch']) {
  $(id).addEventListener('input', () => { dialEdited = true; });
}

$('dial').addEventListener('submit', async (ev) => {
  ev.preventDefault();
  await apply({ capacity: Number($('dial-capacity').value), batch: Number($('dial-batch').value) });
  dialEdited = false;
});
$('dial-pause').addEventListener('click', () => apply({ paused: !(settings?.paused ?? false) }));

watch();
