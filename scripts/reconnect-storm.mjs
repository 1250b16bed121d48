// Reconnect storm: N clients running presenced.js's connection layer
// (the same Connection the pages use) hold a viewers socket each; when the
// server restarts they must come back spread over the jitter window, not in
// one spike. Run by scripts/reconnect-storm.sh, which restarts the server;
// this side connects, waits, and measures.
//
//   node --experimental-websocket scripts/reconnect-storm.mjs \
//     --url http://127.0.0.1:18080 --clients 2000 --hotel lisbon-100 --ready /tmp/ready
//
// It prints the accepts per second seen during the storm, by the clients
// (each open is one accept) and by the server (its
// presenced_realtime_connections gauge, scraped every 250 ms).
import { writeFileSync } from 'node:fs';
import { parseArgs } from 'node:util';

import { Connection, Presence, signInDemo, wsURL } from '../web/pages/assets/js/presenced.js';

const { values: args } = parseArgs({
  options: {
    url: { type: 'string', default: 'http://127.0.0.1:18080' },
    clients: { type: 'string', default: '2000' },
    hotel: { type: 'string', default: 'lisbon-100' },
    // viewers: a Connection with count:subscribe; presence: a Presence
    // (demo sign-in) following five other clients, resubscribed on reconnect.
    protocol: { type: 'string', default: 'viewers' },
    ready: { type: 'string', default: '' },
    timeout: { type: 'string', default: '180' },
  },
});
const N = Number(args.clients);
const base = args.url;

if (typeof WebSocket !== 'function') {
  console.error('no WebSocket in this Node: run it with --experimental-websocket (Node 20) or Node 22+');
  process.exit(2);
}

const conns = [];
const opens = []; // ms timestamps of every open after the first round
const restartWaits = [];
let phase = 'connect';
let firstClose = 0;
let connected = 0;
let closedForRestart = 0;
const states = new Map();
const closeCodes = {};

const presence = args.protocol === 'presence';
const kind = presence ? 'presence' : 'viewers';
const tokens = [];
let users = [];
if (presence) {
  const run = `s${Date.now().toString(36)}`;
  for (let i = 0; i < N; i += 50) {
    const batch = [];
    for (let j = i; j < Math.min(N, i + 50); j++) batch.push(signInDemo(base, `${run}-${j}`));
    for (const a of await Promise.all(batch)) tokens.push(a.token);
  }
  users = tokens.map((_, i) => `${run}-${i}`);
}

for (let i = 0; i < N; i++) {
  let c;
  let start;
  if (presence) {
    const p = new Presence({ base, token: tokens[i] });
    p.follow(...[1, 2, 3, 4, 5].map((k) => users[(i + k) % N]));
    c = p.connection;
    start = () => p.connect();
  } else {
    c = new Connection({ url: wsURL(base, '/v1/viewers/ws') });
    c.on('open', () => c.send({ v: 1, event: 'count:subscribe', payload: { hotels: [args.hotel] }, id: 's' }));
    start = () => c.connect();
  }
  let everOpen = false;
  c.on('open', () => {
    if (!everOpen) {
      everOpen = true;
      connected++;
    } else {
      opens.push(Date.now());
    }
  });
  c.on('close', (info) => {
    if (phase !== 'hold' || !info.wasOpen) return;
    closedForRestart++;
    closeCodes[info.code] = (closeCodes[info.code] ?? 0) + 1;
    if (!firstClose) firstClose = Date.now();
    if (info.code === 1012) restartWaits.push(JSON.parse(info.reason).reconnectMs);
  });
  c.on('state', (s) => states.set(i, s));
  conns.push({ c, start });
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Open them over about two seconds: the first connect is not the storm.
for (let i = 0; i < N; i++) {
  conns[i].start();
  if (i % 100 === 99) await sleep(100);
}
const deadline = Date.now() + Number(args.timeout) * 1000;
while (connected < N && Date.now() < deadline) await sleep(100);
console.log(`connected: ${connected} of ${N}`);
if (connected < N) process.exit(1);

// Scrape the server's own count of open sockets while waiting for the restart.
const gauge = []; // [ms, sockets]
let scraping = true;
(async () => {
  while (scraping) {
    try {
      const body = await (await fetch(base + '/metrics')).text();
      const m = new RegExp(`^presenced_realtime_connections\\{kind="${kind}"\\} (\\S+)$`, 'm').exec(body);
      gauge.push([Date.now(), m ? Number(m[1]) : 0]);
    } catch {
      gauge.push([Date.now(), null]); // restarting
    }
    await sleep(250);
  }
})();

phase = 'hold';
if (args.ready) writeFileSync(args.ready, 'ready\n');
console.log('holding; restart the server now');
while (closedForRestart < N * 0.99 && Date.now() < deadline) await sleep(100);
phase = 'storm';
console.log(`closed: ${closedForRestart} ${JSON.stringify(closeCodes)}`);
while (opens.length < N && Date.now() < deadline) await sleep(100);
await sleep(2000);
scraping = false;

const t0 = firstClose;
const secs = new Map();
for (const t of opens) {
  const s = Math.floor((t - t0) / 1000);
  secs.set(s, (secs.get(s) ?? 0) + 1);
}
const last = Math.max(...secs.keys());
const perSecond = [];
for (let s = 0; s <= last; s++) perSecond.push(secs.get(s) ?? 0);
const sorted = [...opens].sort((a, b) => a - b);
const pct = (p) => ((sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] - t0) / 1000).toFixed(1);
const waits = restartWaits.sort((a, b) => a - b);

// The server's accepts per second: rises of its socket gauge, per second.
const serverSecs = new Map();
for (let i = 1; i < gauge.length; i++) {
  const [t, v] = gauge[i];
  const prev = gauge[i - 1][1];
  if (v === null || prev === null || t < t0) continue;
  const s = Math.floor((t - t0) / 1000);
  serverSecs.set(s, (serverSecs.get(s) ?? 0) + Math.max(0, v - prev));
}
const serverPerSecond = [];
for (let s = 0; s <= last; s++) serverPerSecond.push(serverSecs.get(s) ?? 0);
const firstUp = gauge.find(([t, v]) => t > t0 && v !== null && gauge.some(([t2, v2]) => t2 < t && t2 > t0 && v2 === null));

console.log(JSON.stringify({
  clients: N,
  protocol: kind,
  closes: closeCodes,
  reconnected: opens.length,
  serverDownToFirstAnswer: firstUp ? ((firstUp[0] - t0) / 1000).toFixed(1) + ' s' : 'back within one scrape (250 ms)',
  reconnectMsFromServer: waits.length ? { min: waits[0], median: waits[Math.floor(waits.length / 2)], max: waits[waits.length - 1] } : null,
  reconnectedBy: { p10: pct(10) + ' s', p50: pct(50) + ' s', p90: pct(90) + ' s', p100: pct(100) + ' s' },
  acceptsPerSecondByClients: perSecond,
  acceptsPerSecondByServerGauge: serverPerSecond,
  peakAcceptsPerSecond: Math.max(...perSecond),
  statesAtEnd: [...states.values()].reduce((m, s) => ((m[s] = (m[s] ?? 0) + 1), m), {}),
}, null, 1));
for (const { c } of conns) c.close();
process.exit(opens.length >= N ? 0 : 1);
