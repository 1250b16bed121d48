// Unit tests of presenced.js's connection state machine and protocol
// objects, with a fake WebSocket and a manual clock: node --test web/pages/jstest/
import { test } from 'node:test';
import assert from 'node:assert/strict';

import {
  backoffDelay,
  Connection,
  DEFAULT_BACKOFF,
  decodeSeatBitmap,
  holdSeats,
  parseRetryAfter,
  Presence,
  restartDelay,
  SeatMapLive,
  Viewers,
  WaitingRoom,
  Emitter,
} from '../assets/js/presenced.js';

/** A clock whose timers run only when the test advances it. */
class FakeClock {
  now = () => this.t;
  t = 1_000_000;
  timers = [];
  seq = 0;
  setTimeout = (f, ms) => {
    const id = ++this.seq;
    this.timers.push({ id, at: this.t + ms, f, ms });
    return id;
  };
  clearTimeout = (id) => {
    this.timers = this.timers.filter((t) => t.id !== id);
  };
  /** Runs every timer due within ms, in order, advancing time. */
  advance(ms) {
    const end = this.t + ms;
    for (;;) {
      this.timers.sort((a, b) => a.at - b.at);
      const next = this.timers[0];
      if (!next || next.at > end) break;
      this.timers.shift();
      this.t = next.at;
      next.f();
    }
    this.t = end;
  }
  /** The delays of pending timers. */
  pending() {
    return this.timers.map((t) => t.ms);
  }
}

/** A WebSocket whose server side the test plays. */
function fakeSockets() {
  const made = [];
  class FakeWebSocket {
    sent = [];
    closedByClient = null;
    constructor(url) {
      this.url = url;
      made.push(this);
    }
    send(data) {
      this.sent.push(JSON.parse(data));
    }
    close(code, reason) {
      this.closedByClient = { code, reason };
      // Node 20's WebSocket reports closing a connecting socket as an error.
      if (this.failing) this.onerror?.({});
    }
    // server side
    open() {
      this.onopen?.({});
    }
    receive(obj) {
      this.onmessage?.({ data: JSON.stringify(obj) });
    }
    drop(code = 1006, reason = '') {
      this.onclose?.({ code, reason });
    }
    fail() {
      this.failing = true;
      this.onerror?.({});
    }
  }
  return { WebSocket: FakeWebSocket, made, last: () => made[made.length - 1] };
}

/** Lets awaited probes and fetches settle. */
const settle = () => new Promise((r) => setImmediate(r));

function connection(extra = {}) {
  const clock = new FakeClock();
  const ws = fakeSockets();
  const conn = new Connection({ url: 'ws://x/y', WebSocket: ws.WebSocket, clock, random: () => 0.5, probe: null, ...extra });
  return { clock, ws, conn };
}

test('backoff ceilings double from 0.5 s and stop at 30 s', () => {
  const ceilings = [];
  for (let a = 0; a < 10; a++) ceilings.push(backoffDelay(a, DEFAULT_BACKOFF, () => 0.999999999) + 1);
  assert.deepEqual(ceilings, [500, 1000, 2000, 4000, 8000, 16000, 30000, 30000, 30000, 30000]);
  for (let a = 0; a < 40; a++) {
    assert.equal(backoffDelay(a, DEFAULT_BACKOFF, () => 0), 0);
    const d = backoffDelay(a);
    assert.ok(d >= 0 && d < 30000, `attempt ${a}: ${d}`);
  }
});

test('full jitter spreads reconnects evenly over the window', () => {
  // 20,000 clients at the same attempt: uniform over [0, ceiling).
  const n = 20000;
  const attempt = 6; // ceiling 30 s
  const buckets = new Array(10).fill(0);
  let sum = 0;
  for (let i = 0; i < n; i++) {
    const d = backoffDelay(attempt);
    sum += d;
    buckets[Math.floor(d / 3000)]++;
  }
  for (const b of buckets) assert.ok(b > n * 0.08 && b < n * 0.12, `bucket ${b} of ${n}`);
  const mean = sum / n;
  assert.ok(mean > 14000 && mean < 16000, `mean ${mean}`);
});

test('Retry-After and 1012 reasons are read', () => {
  assert.equal(parseRetryAfter('7'), 7000);
  assert.equal(parseRetryAfter(null), null);
  assert.equal(parseRetryAfter('Thu, 01 Jan 1970 00:00:10 GMT', 4000), 6000);
  assert.equal(parseRetryAfter('soon'), null);
  assert.equal(restartDelay('{"reconnectMs":2345}'), 2345);
  assert.equal(restartDelay('{"reconnectMs":99999999}'), 120000);
  assert.equal(restartDelay('going away'), null);
});

test('an abnormal close reconnects with growing backoff', () => {
  const { clock, ws, conn } = connection();
  const retries = [];
  conn.on('retry', (r) => retries.push(r.delayMs));
  conn.connect();
  assert.equal(ws.made.length, 1);
  for (let i = 0; i < 7; i++) {
    ws.last().drop(1006);
    assert.equal(conn.state, 'waiting');
    clock.advance(30000);
    assert.equal(ws.made.length, i + 2);
  }
  // random() = 0.5: half of each ceiling.
  assert.deepEqual(retries, [250, 500, 1000, 2000, 4000, 8000, 15000]);
});

test('a connection that stays up resets the backoff; one dropped at once does not', () => {
  const { clock, ws, conn } = connection({ stableMs: 10000 });
  conn.connect();
  ws.last().drop();
  clock.advance(30000);
  ws.last().drop();
  clock.advance(30000);
  assert.equal(conn.attempt, 2);
  ws.last().open();
  clock.advance(1000);
  ws.last().drop(); // accepted then dropped: still backing off
  assert.equal(conn.attempt, 3);
  clock.advance(30000);
  ws.last().open();
  clock.advance(10000);
  assert.equal(conn.attempt, 0);
});

test('a handshake that errors without a close event still reconnects, once', () => {
  const { clock, ws, conn } = connection();
  conn.connect();
  ws.last().fail(); // Node 20's WebSocket: an error, and never a close
  assert.equal(conn.state, 'waiting');
  ws.made[0].drop(1006); // a close arriving late changes nothing
  clock.advance(1000);
  assert.equal(ws.made.length, 2);
  ws.last().fail();
  ws.last().drop(1006);
  clock.advance(2000);
  assert.equal(ws.made.length, 3);
});

test('1012 waits the reconnectMs the server drew, then reconnects', () => {
  const { clock, ws, conn } = connection();
  conn.connect();
  ws.last().open();
  ws.last().drop(1012, '{"reconnectMs":4321}');
  assert.deepEqual(clock.pending(), [4321]);
  clock.advance(4320);
  assert.equal(ws.made.length, 1);
  clock.advance(1);
  assert.equal(ws.made.length, 2);
  assert.equal(conn.attempt, 0);
});

test('authentication closes never loop', () => {
  for (const code of [1008, 4001, 4003]) {
    const { clock, ws, conn } = connection();
    conn.connect();
    ws.last().open();
    ws.last().drop(code, 'token expired');
    assert.equal(conn.state, 'unauthorized');
    clock.advance(10 * 60 * 1000);
    assert.equal(ws.made.length, 1, `close ${code} reconnected`);
    assert.equal(conn.detail.code, code);
  }
});

test('slow-consumer and session-ended closes reconnect', () => {
  const { clock, ws, conn } = connection();
  conn.connect();
  ws.last().open();
  ws.last().drop(4008);
  clock.advance(1000);
  assert.equal(ws.made.length, 2);
});

test('a normal close by the server stops unless the protocol wants more', () => {
  const { clock, ws, conn } = connection();
  conn.connect();
  ws.last().open();
  ws.last().drop(1000);
  clock.advance(60000);
  assert.equal(conn.state, 'stopped');
  assert.equal(ws.made.length, 1);

  const again = connection({ classify: () => 'reconnect' });
  again.conn.connect();
  again.ws.last().open();
  again.ws.last().drop(1000);
  again.clock.advance(1000);
  assert.equal(again.ws.made.length, 2);
});

test('a refused handshake is probed: 401 stops, 503 waits Retry-After', async () => {
  const probes = [];
  let answer = { status: 503, retryAfterMs: 7000 };
  const { clock, ws, conn } = connection({
    probe: async (url) => {
      probes.push(url);
      return answer;
    },
  });
  const delays = [];
  conn.on('retry', (r) => delays.push(r.delayMs));
  conn.connect();
  ws.last().drop(1006);
  await settle();
  assert.deepEqual(probes, ['http://x/y']);
  assert.deepEqual(delays, [7000]);
  clock.advance(7000);
  answer = { status: 401, retryAfterMs: null };
  ws.last().drop(1006);
  await settle();
  assert.equal(conn.state, 'unauthorized');
  clock.advance(600000);
  assert.equal(ws.made.length, 2);
});

test('a server that answers plain HTTP but never upgrades gets the fallback', async () => {
  let fallbacks = 0;
  let stopped = 0;
  const { clock, ws, conn } = connection({
    probe: async () => ({ status: 400, retryAfterMs: null }),
    blockedAfter: 2,
    fallback: () => {
      fallbacks++;
      return () => stopped++;
    },
  });
  conn.connect();
  ws.last().drop(1006);
  await settle();
  assert.equal(conn.state, 'waiting');
  clock.advance(1000);
  ws.last().drop(1006);
  await settle();
  assert.equal(conn.state, 'fallback');
  assert.equal(fallbacks, 1);
  conn.close();
  assert.equal(stopped, 1);
});

test('pause closes the socket, resume reconnects at once', () => {
  const { ws, conn } = connection();
  conn.connect();
  ws.last().open();
  conn.pause();
  assert.equal(conn.state, 'paused');
  assert.equal(ws.last().closedByClient.code, 1000);
  ws.last().drop(1000); // the late close event of the old socket changes nothing
  assert.equal(conn.state, 'paused');
  conn.resume();
  assert.equal(ws.made.length, 2);
  assert.equal(conn.state, 'connecting');
});

test('close stops every pending reconnect', () => {
  const { clock, ws, conn } = connection();
  conn.connect();
  ws.last().drop(1006);
  conn.close();
  clock.advance(60000);
  assert.equal(ws.made.length, 1);
  assert.equal(conn.state, 'stopped');
});

/** A document stand-in whose visibility the test switches. */
class FakeActivity extends Emitter {
  hidden = false;
  idle = 0;
  idleMs() {
    return this.idle;
  }
  set(hidden) {
    this.hidden = hidden;
    this.emit(hidden ? 'hidden' : 'visible');
  }
}

function events(sock, name) {
  return sock.sent.filter((f) => f.event === name);
}

test('presence names its whole subscription set on every new connection', () => {
  const clock = new FakeClock();
  const ws = fakeSockets();
  const p = new Presence({
    base: 'http://x', token: 't0', WebSocket: ws.WebSocket, clock, random: () => 0.5, probe: null,
    activity: new FakeActivity(),
  });
  p.follow('bob', 'carol');
  p.notifyWhenOnline('dave');
  p.connect();
  assert.match(ws.last().url, /^ws:\/\/x\/v1\/presence\/ws\?token=t0&subscribe=bob&subscribe=carol$/);
  ws.last().open();
  assert.equal(events(ws.last(), 'subscriptions:set').length, 0, 'the address said it');
  assert.deepEqual(events(ws.last(), 'notifications:subscribe').map((f) => f.payload), [{ user: 'dave', on: 'online' }]);

  p.follow('erin');
  p.unfollow('carol');
  ws.last().drop(1006);
  clock.advance(1000);
  assert.match(ws.last().url, /\?token=t0&subscribe=bob&subscribe=erin$/);
  // A change between the dial and the open: the set goes as a request.
  p.follow('fay&co');
  ws.last().open();
  assert.deepEqual(events(ws.last(), 'subscriptions:set').map((f) => f.payload.users), [['bob', 'erin', 'fay&co']]);
  ws.last().drop(1006);
  clock.advance(1000);
  assert.match(ws.last().url, /&subscribe=fay%26co$/, 'each name is escaped');
  ws.last().open();
  assert.equal(events(ws.last(), 'subscriptions:set').length, 0);

  // A list too long for an address goes as subscriptions:set.
  p.setFollowing(Array.from({ length: 400 }, (_, i) => 'user-' + String(i).padStart(6, '0')));
  ws.last().drop(1006);
  clock.advance(1000);
  assert.match(ws.last().url, /\?token=t0$/);
  ws.last().open();
  assert.deepEqual(events(ws.last(), 'subscriptions:set').map((f) => f.payload.users.length), [400]);

  // Once notified, a wait is not asked for again.
  ws.last().receive({ v: 1, event: 'notifications:received', payload: { user: 'dave', on: 'online', status: { user: 'dave', status: 'online', v: 3 } } });
  const dropped = ws.last();
  dropped.drop(1006);
  clock.advance(60000); // past the backoff of a fifth reconnect in a row
  assert.notEqual(ws.last(), dropped);
  ws.last().open();
  assert.equal(events(ws.last(), 'notifications:subscribe').length, 0);
  assert.equal(p.statuses.get('dave').status, 'online');
});

test('presence keeps the newest status and drops what a resync leaves out', () => {
  const ws = fakeSockets();
  const p = new Presence({ base: 'http://x', token: 't', WebSocket: ws.WebSocket, clock: new FakeClock(), probe: null, activity: new FakeActivity() });
  p.follow('bob', 'carol');
  p.connect();
  ws.last().open();
  const sock = ws.last();
  sock.receive({ v: 1, event: 'presence:updated', payload: { users: [{ user: 'bob', status: 'busy', v: 5 }, { user: 'carol', status: 'idle', v: 2 }] } });
  sock.receive({ v: 1, event: 'presence:updated', payload: { users: [{ user: 'bob', status: 'online', v: 4 }] } });
  assert.equal(p.statuses.get('bob').status, 'busy');
  sock.receive({ v: 1, event: 'presence:updated', payload: { resync: true, users: [{ user: 'bob', status: 'offline', v: 6 }] } });
  assert.equal(p.statuses.get('bob').status, 'offline');
  assert.equal(p.statuses.has('carol'), false);
});

test('presence sets invisible and privacy, and tells its own view apart', () => {
  const ws = fakeSockets();
  const p = new Presence({ base: 'http://x', token: 't', WebSocket: ws.WebSocket, clock: new FakeClock(), probe: null, activity: new FakeActivity() });
  const self = [];
  const privacy = [];
  p.on('self', (s) => self.push(s));
  p.on('privacy', (v) => privacy.push(v));
  p.follow('bob');
  p.connect();
  const sock = ws.last();
  sock.open();
  p.setInvisible(true);
  p.setInvisible(false);
  p.setPrivacy({ status: 'contacts' });
  assert.deepEqual(events(sock, 'presence:update').map((f) => f.payload), [{ status: 'invisible' }, { status: null }]);
  assert.deepEqual(events(sock, 'privacy:set').map((f) => f.payload), [{ status: 'contacts' }]);
  const [inv] = events(sock, 'presence:update');
  sock.receive({ v: 1, event: 'presence:updated', correlationId: inv.id, payload: { users: [{ user: 'me', status: 'online', v: 3, invisible: true }] } });
  assert.deepEqual(self, [{ user: 'me', status: 'online', v: 3, invisible: true }], 'the reply is our own view, not a followed status');
  assert.equal(p.statuses.has('me'), false);
  // A change made on another device.
  sock.receive({ v: 1, event: 'presence:updated', payload: { self: true, users: [{ user: 'me', status: 'busy', v: 3, invisible: true }] } });
  assert.equal(self.at(-1).status, 'busy');
  assert.equal(p.statuses.has('me'), false);
  const [ps] = events(sock, 'privacy:set');
  sock.receive({ v: 1, event: 'privacy:updated', correlationId: ps.id, payload: { status: 'contacts', lastActiveAt: 'everyone' } });
  assert.deepEqual(privacy, [{ status: 'contacts', lastActiveAt: 'everyone' }]);
  // A follower kept from lastActiveAt gets the same version again without it.
  sock.receive({ v: 1, event: 'presence:updated', payload: { users: [{ user: 'bob', status: 'online', lastActiveAt: 5, v: 2 }] } });
  sock.receive({ v: 1, event: 'presence:updated', payload: { users: [{ user: 'bob', status: 'online', v: 2 }] } });
  assert.equal(p.statuses.get('bob').lastActiveAt, undefined);
});

test('presence reports activity: pings with idleMs, and at once when the tab hides or returns', () => {
  const clock = new FakeClock();
  const ws = fakeSockets();
  const activity = new FakeActivity();
  const p = new Presence({ base: 'http://x', token: 't', WebSocket: ws.WebSocket, clock, probe: null, activity, pingIntervalMs: 60000 });
  p.connect();
  ws.last().open();
  activity.idle = 12000;
  clock.advance(60000);
  assert.deepEqual(events(ws.last(), 'session:ping').map((f) => f.payload), [{ idleMs: 12000 }]);
  activity.set(true);
  activity.set(false);
  assert.deepEqual(events(ws.last(), 'session:ping').slice(1).map((f) => f.payload), [{ active: false }, { active: true }]);
});

test('presence reconnects after its session ended (4009) but not after an expired token', () => {
  const clock = new FakeClock();
  const ws = fakeSockets();
  const p = new Presence({ base: 'http://x', token: 't', WebSocket: ws.WebSocket, clock, random: () => 0.5, probe: null, activity: new FakeActivity() });
  p.connect();
  ws.last().open();
  ws.last().drop(4009);
  clock.advance(1000);
  assert.equal(ws.made.length, 2);
  ws.last().open();
  ws.last().drop(1008, 'token expired');
  clock.advance(600000);
  assert.equal(ws.made.length, 2);
  assert.equal(p.connection.state, 'unauthorized');
});

function fakeFetch(answers) {
  const calls = [];
  const f = async (url, init) => {
    calls.push({ url, method: init?.method ?? 'GET' });
    const a = typeof answers === 'function' ? answers(url) : answers;
    return new Response(a.body === undefined ? null : JSON.stringify(a.body), { status: a.status ?? 204, headers: a.headers ?? {} });
  };
  return { f, calls };
}

test('viewers subscribe every watched hotel on each connection and heartbeat only while visible', async () => {
  const clock = new FakeClock();
  const ws = fakeSockets();
  const activity = new FakeActivity();
  const { f, calls } = fakeFetch({ status: 204 });
  const v = new Viewers({ base: 'http://x', WebSocket: ws.WebSocket, fetch: f, clock, random: () => 0.5, probe: null, activity, heartbeatMs: 15000, pauseAfterMs: 30000 });
  const seen = [];
  v.on('count', (c) => seen.push(c.count));
  v.watch('h1');
  v.watch('h2');
  ws.last().open();
  assert.deepEqual(events(ws.last(), 'count:subscribe').map((f) => f.payload.hotels), [['h1', 'h2']]);
  ws.last().receive({ v: 1, event: 'count:updated', payload: { hotel: 'h1', count: 3 } });
  assert.deepEqual(seen, [3]);
  await settle();
  assert.equal(calls.filter((c) => c.url.endsWith('/v1/viewers/h1/heartbeat')).length, 1);
  clock.advance(15000);
  await settle();
  assert.equal(calls.filter((c) => c.url.endsWith('/v1/viewers/h1/heartbeat')).length, 2);

  activity.set(true);
  clock.advance(60000);
  await settle();
  assert.equal(calls.filter((c) => c.url.endsWith('/v1/viewers/h1/heartbeat')).length, 2, 'no heartbeat while hidden');
  assert.equal(v.connection.state, 'paused');

  activity.set(false);
  await settle();
  assert.equal(calls.filter((c) => c.url.endsWith('/v1/viewers/h1/heartbeat')).length, 3);
  ws.last().open();
  assert.deepEqual(events(ws.last(), 'count:subscribe').map((f) => f.payload.hotels), [['h1', 'h2']]);
});

test('a 429 heartbeat waits for its Retry-After', async () => {
  const clock = new FakeClock();
  const ws = fakeSockets();
  const { f, calls } = fakeFetch({ status: 429, body: { error: { code: 'rate_limited', message: 'slow down' } }, headers: { 'Retry-After': '40' } });
  const v = new Viewers({ base: 'http://x', WebSocket: ws.WebSocket, fetch: f, clock, probe: null, activity: new FakeActivity() });
  v.watch('h1');
  await settle();
  await settle();
  clock.advance(39000);
  await settle();
  assert.equal(calls.length, 1);
  clock.advance(1000);
  await settle();
  assert.equal(calls.length, 2);
});

test('viewers fall back to SSE when WebSockets are blocked', async () => {
  const clock = new FakeClock();
  const ws = fakeSockets();
  const sources = [];
  class FakeEventSource {
    constructor(url) {
      this.url = url;
      this.listeners = {};
      sources.push(this);
    }
    addEventListener(t, f) {
      this.listeners[t] = f;
    }
    close() {
      this.closed = true;
    }
  }
  const { f } = fakeFetch({ status: 204 });
  const v = new Viewers({
    base: 'http://x', WebSocket: ws.WebSocket, EventSource: FakeEventSource, fetch: f, clock, random: () => 0.5,
    probe: async () => ({ status: 400, retryAfterMs: null }), blockedAfter: 2, activity: new FakeActivity(),
  });
  const seen = [];
  v.on('count', (c) => seen.push(c.count));
  v.watch('h1');
  ws.last().drop(1006);
  await settle();
  clock.advance(1000);
  ws.last().drop(1006);
  await settle();
  assert.equal(v.connection.state, 'fallback');
  assert.deepEqual(sources.map((s) => s.url), ['http://x/v1/viewers/h1/stream']);
  sources[0].listeners['count:updated']({ data: JSON.stringify({ hotel: 'h1', count: 9 }) });
  assert.deepEqual(seen, [9]);
  v.close();
  assert.equal(sources[0].closed, true);
});

test('the waiting room stops once admitted and rejoins when the place was lost', () => {
  const clock = new FakeClock();
  const ws = fakeSockets();
  const wr = new WaitingRoom({ base: 'https://x', event: 'sale-1', token: 'tk', WebSocket: ws.WebSocket, clock, random: () => 0.5, probe: null });
  const positions = [];
  wr.on('position', (p) => positions.push(p.position));
  wr.join();
  assert.equal(ws.last().url, 'wss://x/v1/waitingroom/sale-1/ws?token=tk');
  ws.last().open();
  ws.last().receive({ v: 1, event: 'queue:position', payload: { state: 'queued', position: 12 } });
  ws.last().receive({ v: 1, event: 'error', payload: { code: 'not_in_line', message: 'join again' } });
  ws.last().drop(1000);
  clock.advance(1000);
  assert.equal(ws.made.length, 2, 'rejoined after not_in_line');
  ws.last().open();
  ws.last().receive({ v: 1, event: 'queue:admitted', payload: { state: 'admitted', pass: 'P', expiresAt: '2030-01-01T00:00:00Z' } });
  ws.last().drop(1000, 'admitted');
  clock.advance(60000);
  assert.equal(ws.made.length, 2);
  assert.deepEqual(wr.admitted, { pass: 'P', expiresAt: '2030-01-01T00:00:00Z' });
  assert.deepEqual(positions, [12]);
});

test('the live seat map resets on every connection and pauses while hidden', () => {
  const clock = new FakeClock();
  const ws = fakeSockets();
  const activity = new FakeActivity();
  const live = new SeatMapLive({ base: 'http://x', event: 'e1', WebSocket: ws.WebSocket, clock, random: () => 0.5, probe: null, activity, pauseAfterMs: 5000 });
  const got = [];
  live.on('reset', () => got.push('reset'));
  live.on('invalidate', (s) => got.push('invalidate ' + s));
  live.start();
  ws.last().open();
  ws.last().receive({ type: 'reset' });
  ws.last().receive({ type: 'invalidate', section: 'B' });
  activity.set(true);
  clock.advance(5000);
  assert.equal(live.connection.state, 'paused');
  activity.set(false);
  assert.equal(ws.made.length, 2);
  ws.last().open();
  ws.last().receive({ type: 'reset' });
  assert.deepEqual(got, ['reset', 'invalidate B', 'reset']);
});

test('the live seat map polls while the server has paused its pushes', () => {
  const clock = new FakeClock();
  const ws = fakeSockets();
  const live = new SeatMapLive({ base: 'http://x', event: 'e1', WebSocket: ws.WebSocket, clock, random: () => 0.5, probe: null, activity: new FakeActivity() });
  const got = [];
  live.on('reset', () => got.push('reset'));
  live.start();
  ws.last().open();
  ws.last().receive({ type: 'reset' });
  ws.last().receive({ type: 'paused', pollMs: 3000 });
  clock.advance(2999);
  assert.deepEqual(got, ['reset']);
  clock.advance(1);
  clock.advance(3000);
  assert.deepEqual(got, ['reset', 'reset', 'reset'], 'a refetch every pollMs');
  ws.last().receive({ type: 'paused', pollMs: 3000 });
  clock.advance(3000);
  assert.deepEqual(got.length, 4, 'a second notice does not double the polling');
  ws.last().receive({ type: 'reset' });
  clock.advance(30000);
  assert.deepEqual(got.length, 5, 'resumed: the reset, then no more polling');
  live.close();
});

test('seat bitmaps decode two bits a seat, most significant pair first', () => {
  // seats: 0 AVAILABLE, 1 HELD, 2 SOLD, 3 BLOCKED, then 2
  const bytes = new Uint8Array([0b00011011, 0b10000000]);
  assert.deepEqual([...decodeSeatBitmap(bytes, 5)], [0, 1, 2, 3, 2]);
});

/** A fetch answering each call with the next of answers ({status, body}). */
function scriptedFetch(answers) {
  const calls = [];
  const f = async (url, init) => {
    calls.push({ url, init });
    const a = answers.shift();
    return new Response(JSON.stringify(a.body), { status: a.status, headers: { 'Content-Type': 'application/json', ...(a.headers ?? {}) } });
  };
  return { f, calls };
}

test('a hold meeting a seat being held retries after a jittered wait, with the same key', async () => {
  const being = { status: 409, headers: { 'Retry-After': '1' }, body: { error: { code: 'seats_being_held', message: 'held', retryAfterMs: 400 } } };
  const { f, calls } = scriptedFetch([being, being, { status: 201, body: { id: 'r1', items: [] } }]);
  const waits = [];
  const randoms = [0, 0.99];
  const r = await holdSeats('http://x', 'e1', { seats: [7] }, {
    token: 't', pass: 'p', fetch: f, sleep: async (ms) => waits.push(ms), random: () => randoms.shift(),
  });
  assert.equal(r.id, 'r1');
  assert.equal(calls.length, 3);
  assert.deepEqual(waits, [200, 200 + 0.99 * 400], 'half to one and a half times the server\'s suggestion');
  const keys = calls.map((c) => c.init.headers['Idempotency-Key']);
  assert.ok(keys[0] && keys.every((k) => k === keys[0]), 'one key for every try');
  assert.equal(calls[0].init.headers['X-Admission-Pass'], 'p');
});

test('a hold gives up after its retries, and other refusals are not retried', async () => {
  const being = { status: 409, body: { error: { code: 'seats_being_held', message: 'held', retryAfterMs: 100 } } };
  let s = scriptedFetch([being, being]);
  await assert.rejects(
    holdSeats('http://x', 'e1', { seats: [7] }, { token: 't', pass: 'p', fetch: s.f, retries: 1, sleep: async () => {} }),
    (err) => err.code === 'seats_being_held',
  );
  assert.equal(s.calls.length, 2);
  s = scriptedFetch([{ status: 409, body: { error: { code: 'no_seats_available', message: 'none', section: 'B', free: 3 } } }]);
  await assert.rejects(
    holdSeats('http://x', 'e1', { section: 'B', quantity: 4, adjacent: true }, { token: 't', pass: 'p', fetch: s.f, sleep: async () => {} }),
    (err) => err.code === 'no_seats_available' && err.details.free === 3,
  );
  assert.equal(s.calls.length, 1);
  assert.deepEqual(JSON.parse(s.calls[0].init.body), { section: 'B', quantity: 4, adjacent: true });
});
