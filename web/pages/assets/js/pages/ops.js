// /demo/ops: this process's own figures (public, from /metrics, shown at
// once), and behind the API key the line of an event and the admission
// dial (capacity, batch, pause).
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

/** figure shows a tile's value, or says the process has no such figure. */
function figure(id, present, value) {
  const el = $(id);
  el.classList.toggle('absent', !present);
  el.dataset.state = present ? 'shown' : 'absent';
  text(id, present ? value : 'not on this process');
}

// Public (/metrics): shown from the start, whether or not a key is given.
async function metrics() {
  try {
    const ms = parseMetrics(await (await fetch(base + '/metrics', { cache: 'no-store' })).text());
    const holds = 'presenced_booking_hold_outcomes_total';
    // Labelled by HTTP status: 201 held, 409 a correct refusal (taken).
    figure('holds-ok', has(ms, holds), sum(ms, holds, (l) => l.code === '201'));
    figure('holds-taken', has(ms, holds), sum(ms, holds, (l) => l.code === '409'));
    figure('holds-other', has(ms, holds), sum(ms, holds, (l) => l.code !== '201' && l.code !== '409'));
    const age = 'presenced_outbox_oldest_unpublished_age_seconds';
    figure('outbox-age', has(ms, age), duration(sum(ms, age)));
    figure('presence-conns', has(ms, 'presenced_presence_connections'), sum(ms, 'presenced_presence_connections'));
    figure('sockets', has(ms, 'presenced_realtime_connections'), sum(ms, 'presenced_realtime_connections'));
  } catch {
    // the next round tries again
  }
}

let metricsTimer = null;

function watch() {
  timers.forEach(clearInterval);
  timers = [];
  show('line-needs-key', !key || !event);
  if (!metricsTimer) {
    metrics();
    metricsTimer = setInterval(metrics, 5000);
  }
  if (!key || !event) return;
  room();
  timers.push(setInterval(room, 2000));
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
