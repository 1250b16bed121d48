// presenced.js: the browser client of presenced. One ES module, no
// dependencies, served by every presenced process at /js/presenced.js.
//
// One object per socket protocol (Presence, Viewers, WaitingRoom,
// SeatMapLive) over one connection layer (Connection) that:
//   - reconnects with exponential backoff and full jitter (0.5 s → 30 s), so
//     a fleet of clients dropped at once comes back spread out, not in a spike;
//   - obeys the server: 1012 "service restart" waits the server's
//     {"reconnectMs":N}; a refused handshake is probed over plain HTTP to read
//     its status and Retry-After (a browser WebSocket cannot see them);
//     authentication failures (1008, 4001-style closes, 401/403) stop instead
//     of looping;
//   - resends each protocol's subscriptions after every reconnect;
//   - falls back to SSE or polling when WebSockets are blocked on the way;
//   - can be paused while the tab is hidden, where the protocol allows.
// Nothing here runs at import time: a page imports it with
// <script type="module"> (deferred) and connects after its first paint.

/** Close codes presenced sends (docs/http.md, docs/presence.md). */
export const Close = Object.freeze({
  NORMAL: 1000,
  POLICY: 1008,
  TOO_LARGE: 1009,
  RESTART: 1012,
  TRY_AGAIN_LATER: 1013,
  SLOW_CONSUMER: 4008,
  SESSION_ENDED: 4009,
});

/**
 * Closes that mean "your credentials are not (or no longer) good": a client
 * reconnecting with the same token would be refused forever, so it stops
 * and tells the page. 1008 is the server's expired-token close; 4001/4003
 * and 4401/4403 are the usual private codes for 401/403.
 */
export const AUTH_CLOSE_CODES = Object.freeze(new Set([Close.POLICY, 4001, 4003, 4401, 4403]));

/** @typedef {{minMs: number, maxMs: number}} Backoff */

/** The reconnect bounds: the ceiling doubles from 0.5 s up to 30 s. */
export const DEFAULT_BACKOFF = Object.freeze({ minMs: 500, maxMs: 30000 });

/**
 * backoffDelay is the wait before reconnect attempt number `attempt` (0 for
 * the first): full jitter, uniform in [0, min(maxMs, minMs·2^attempt)).
 * @param {number} attempt
 * @param {Backoff} [bounds]
 * @param {() => number} [random] uniform in [0, 1)
 * @returns {number} milliseconds
 */
export function backoffDelay(attempt, bounds = DEFAULT_BACKOFF, random = Math.random) {
  const ceiling = Math.min(bounds.maxMs, bounds.minMs * 2 ** Math.min(Math.max(attempt, 0), 30));
  return Math.floor(random() * ceiling);
}

/**
 * parseRetryAfter reads a Retry-After header: delay seconds or an HTTP date.
 * @param {string | null | undefined} value
 * @param {number} [now] Unix ms
 * @returns {number | null} milliseconds, or null when absent or unreadable
 */
export function parseRetryAfter(value, now = Date.now()) {
  if (value == null || value === '') return null;
  const text = String(value).trim();
  if (/^\d+$/.test(text)) return Number(text) * 1000;
  const at = Date.parse(text);
  return Number.isNaN(at) ? null : Math.max(0, at - now);
}

/** The longest wait a 1012 close may ask for; a larger one is a bug. */
const MAX_RESTART_WAIT_MS = 120000;

/**
 * restartDelay reads the wait a 1012 close asks for: {"reconnectMs":N}.
 * @param {string} reason
 * @returns {number | null}
 */
export function restartDelay(reason) {
  try {
    const ms = JSON.parse(reason).reconnectMs;
    if (Number.isFinite(ms) && ms >= 0) return Math.min(ms, MAX_RESTART_WAIT_MS);
  } catch {
    // not the shape presenced sends: fall back to the backoff
  }
  return null;
}

/** httpURL turns a ws(s) URL into the http(s) URL of the same endpoint. */
export function httpURL(wsURL) {
  return String(wsURL).replace(/^ws(s?):/i, 'http$1:');
}

/** wsURL turns an http(s) base and a path into a ws(s) URL. */
export function wsURL(base, path) {
  const u = new URL(path, base);
  u.protocol = u.protocol === 'https:' ? 'wss:' : 'ws:';
  return u.toString();
}

/**
 * @typedef {object} Clock
 * @property {(f: () => void, ms: number) => any} setTimeout
 * @property {(id: any) => void} clearTimeout
 * @property {() => number} now Unix ms
 */

/** @type {Clock} */
const realClock = {
  setTimeout: (f, ms) => globalThis.setTimeout(f, ms),
  clearTimeout: (id) => globalThis.clearTimeout(id),
  now: () => Date.now(),
};

/** A small event emitter: on() returns the function that removes the listener. */
export class Emitter {
  /** @type {Map<string, Set<Function>>} */
  #handlers = new Map();

  /**
   * @param {string} type
   * @param {(value: any) => void} fn
   * @returns {() => void}
   */
  on(type, fn) {
    if (!this.#handlers.has(type)) this.#handlers.set(type, new Set());
    this.#handlers.get(type).add(fn);
    return () => this.#handlers.get(type)?.delete(fn);
  }

  /** @protected */
  emit(type, value) {
    for (const fn of [...(this.#handlers.get(type) ?? [])]) {
      try {
        fn(value);
      } catch (err) {
        // One broken listener must not stop the connection layer.
        globalThis.console?.error?.('presenced.js listener failed', type, err);
      }
    }
  }
}

/**
 * @typedef {object} ProbeResult
 * @property {number} status HTTP status of a plain GET of the socket endpoint
 * @property {number | null} retryAfterMs
 */

/**
 * defaultProbe GETs the socket endpoint over plain HTTP after a handshake
 * failed, to learn what a browser WebSocket hides: 401, 404, 429 or 503 with
 * Retry-After, or 400 "send an upgrade" (the server is up and would let us
 * in: something on the way blocks WebSockets).
 * @param {string} url http(s) URL
 * @returns {Promise<ProbeResult | null>} null when the server is unreachable
 */
export async function defaultProbe(url) {
  if (typeof globalThis.fetch !== 'function') return null;
  try {
    const res = await globalThis.fetch(url, { credentials: 'same-origin', cache: 'no-store' });
    return { status: res.status, retryAfterMs: parseRetryAfter(res.headers.get('Retry-After')) };
  } catch {
    return null;
  }
}

/**
 * @typedef {'idle'|'connecting'|'open'|'waiting'|'paused'|'fallback'|'stopped'|'unauthorized'|'failed'} ConnectionState
 */

/**
 * @typedef {object} ConnectionOptions
 * @property {string | (() => string)} url ws(s) URL, or a function giving it (a fresh token per attempt)
 * @property {any} [WebSocket] constructor, default globalThis.WebSocket
 * @property {Clock} [clock]
 * @property {() => number} [random]
 * @property {Backoff} [backoff]
 * @property {number} [stableMs] an open this long resets the backoff
 * @property {((url: string) => Promise<ProbeResult | null>) | null} [probe] null: never probe
 * @property {number} [blockedAfter] failed handshakes of a reachable server before the fallback
 * @property {(() => (() => void)) | null} [fallback] starts a fallback transport, returns its stop
 * @property {(ev: {code: number, reason: string, wasOpen: boolean}) => ('reconnect'|'stop'|undefined)} [classify]
 */

/**
 * Connection is one logical connection that stays up: a WebSocket replaced
 * after every close by the rules above. Events: 'state' (ConnectionState),
 * 'open', 'message' (the frame's data), 'close' ({code, reason, wasOpen}),
 * 'retry' ({delayMs, attempt, why}), 'fallback'.
 */
export class Connection extends Emitter {
  /** @type {ConnectionState} */
  #state = 'idle';
  #ws = null;
  #opened = false;
  #attempt = 0;
  #blocked = 0;
  #timer = null;
  #stableTimer = null;
  #stopFallback = null;
  #generation = 0;
  #detail = null;
  #opts;

  /** @param {ConnectionOptions} opts */
  constructor(opts) {
    super();
    this.#opts = {
      WebSocket: globalThis.WebSocket,
      clock: realClock,
      random: Math.random,
      backoff: DEFAULT_BACKOFF,
      stableMs: 10000,
      probe: defaultProbe,
      blockedAfter: 2,
      fallback: null,
      classify: () => undefined,
      ...opts,
    };
  }

  /** @returns {ConnectionState} */
  get state() {
    return this.#state;
  }

  /** detail says why the last stop happened: {code, reason, status?}. */
  get detail() {
    return this.#detail;
  }

  /** attempt is the number of reconnects since the last stable connection. */
  get attempt() {
    return this.#attempt;
  }

  /** Starts connecting (again, after a stop); a no-op while connected. */
  connect() {
    if (this.#state === 'connecting' || this.#state === 'open' || this.#state === 'fallback') return;
    this.#clearTimers();
    this.#attempt = 0;
    this.#blocked = 0;
    this.#dial();
  }

  /**
   * send writes a frame; objects are sent as JSON.
   * @returns {boolean} false when not connected (the frame is dropped)
   */
  send(data) {
    if (this.#state !== 'open' || !this.#ws) return false;
    this.#ws.send(typeof data === 'string' ? data : JSON.stringify(data));
    return true;
  }

  /** close stops for good: no reconnect until connect(). */
  close(code = Close.NORMAL, reason = '') {
    this.#halt('stopped', code, reason);
  }

  /** pause closes the socket (or the fallback) until resume(). */
  pause() {
    if (['stopped', 'unauthorized', 'failed', 'idle', 'paused'].includes(this.#state)) return;
    this.#halt('paused', Close.NORMAL, 'paused');
  }

  /** resume reconnects at once after pause(). */
  resume() {
    if (this.#state !== 'paused') return;
    this.#attempt = 0;
    this.#dial();
  }

  #halt(state, code, reason) {
    this.#generation++;
    this.#clearTimers();
    if (this.#stopFallback) {
      this.#stopFallback();
      this.#stopFallback = null;
    }
    const ws = this.#ws;
    this.#ws = null;
    if (ws) {
      try {
        ws.close(code, reason);
      } catch {
        // already closing
      }
    }
    this.#setState(state);
  }

  #setState(s, detail) {
    if (this.#state === s) return;
    this.#state = s;
    this.#detail = detail ?? null;
    this.emit('state', s);
  }

  #clearTimers() {
    const { clock } = this.#opts;
    if (this.#timer) clock.clearTimeout(this.#timer);
    if (this.#stableTimer) clock.clearTimeout(this.#stableTimer);
    this.#timer = this.#stableTimer = null;
  }

  #url() {
    const u = this.#opts.url;
    return typeof u === 'function' ? u() : u;
  }

  #dial() {
    const { clock } = this.#opts;
    this.#setState('connecting');
    const gen = ++this.#generation;
    let ws;
    try {
      ws = new this.#opts.WebSocket(this.#url());
    } catch (err) {
      this.#afterClose({ code: 1006, reason: String(err?.message ?? err), wasOpen: false }, gen);
      return;
    }
    this.#ws = ws;
    this.#opened = false;
    ws.onopen = () => {
      if (gen !== this.#generation) return;
      this.#opened = true;
      this.#blocked = 0;
      this.#setState('open');
      // Only a connection that stays up forgives earlier failures: a
      // server that accepts and drops at once must still be backed off.
      this.#stableTimer = clock.setTimeout(() => {
        this.#stableTimer = null;
        this.#attempt = 0;
      }, this.#opts.stableMs);
      this.emit('open');
    };
    ws.onmessage = (ev) => {
      if (gen === this.#generation) this.emit('message', ev.data);
    };
    let ended = false;
    const end = (ev) => {
      if (ended || gen !== this.#generation) return;
      ended = true;
      this.#ws = null;
      if (this.#stableTimer) {
        clock.clearTimeout(this.#stableTimer);
        this.#stableTimer = null;
      }
      const info = { code: ev.code, reason: ev.reason ?? '', wasOpen: this.#opened };
      this.emit('close', info);
      this.#afterClose(info, gen);
    };
    ws.onerror = () => {
      // A browser follows an error with a close event; some WebSocket
      // implementations (Node 20's) never close a socket that failed to
      // connect. A handshake that failed is a 1006 either way.
      if (this.#opened || ended) return;
      end({ code: 1006, reason: '' });
      try {
        // Some implementations report the close of a connecting socket as
        // another error: ended is set first, so that one returns above.
        ws.close();
      } catch {
        // never opened
      }
    };
    ws.onclose = (ev) => end(ev);
  }

  async #afterClose(info, gen) {
    const { code, reason, wasOpen } = info;
    if (code === Close.RESTART) {
      // The server drew this wait from its drain window: obey it exactly,
      // and do not count a planned restart as a failure.
      const ms = restartDelay(reason);
      if (ms !== null) {
        this.#attempt = 0;
        this.#schedule(ms, 'restart');
        return;
      }
    }
    if (AUTH_CLOSE_CODES.has(code)) {
      this.#setState('unauthorized', info);
      return;
    }
    const verdict = this.#opts.classify(info);
    if (verdict === 'stop' || (code === Close.NORMAL && verdict !== 'reconnect')) {
      this.#setState('stopped', info);
      return;
    }
    let delay = this.#nextBackoff();
    if (!wasOpen && this.#opts.probe) {
      this.#setState('waiting');
      let res = null;
      try {
        res = await this.#opts.probe(httpURL(this.#url()));
      } catch {
        res = null;
      }
      if (gen !== this.#generation) return; // closed or paused meanwhile
      if (res) {
        if (res.status === 401 || res.status === 403) {
          this.#setState('unauthorized', { code, reason, status: res.status });
          return;
        }
        if (res.status === 404 || res.status === 410) {
          this.#setState('failed', { code, reason, status: res.status });
          return;
        }
        if (res.retryAfterMs !== null && (res.status === 429 || res.status === 503)) {
          delay = Math.max(delay, res.retryAfterMs);
        }
        // A plain answer from a socket endpoint that checked us and only
        // missed the upgrade: the server is fine, the path to it drops
        // WebSockets (a proxy). After a few of these, use the fallback.
        const reachable = res.status === 400 || res.status === 426 || (res.status >= 200 && res.status < 300);
        if (reachable && ++this.#blocked >= this.#opts.blockedAfter && this.#opts.fallback) {
          this.#startFallback();
          return;
        }
      }
    }
    this.#schedule(delay, 'backoff');
  }

  #nextBackoff() {
    const d = backoffDelay(this.#attempt, this.#opts.backoff, this.#opts.random);
    this.#attempt++;
    return d;
  }

  #schedule(delayMs, why) {
    const gen = this.#generation;
    this.#setState('waiting');
    this.emit('retry', { delayMs, attempt: this.#attempt, why });
    this.#timer = this.#opts.clock.setTimeout(() => {
      this.#timer = null;
      if (gen === this.#generation) this.#dial();
    }, delayMs);
  }

  #startFallback() {
    this.#setState('fallback');
    this.emit('fallback');
    this.#stopFallback = this.#opts.fallback();
  }
}

/**
 * ApiError is a refused HTTP call in presenced's error shape
 * ({"error":{"code","message"}}).
 */
export class ApiError extends Error {
  /**
   * @param {number} status
   * @param {string} code
   * @param {string} message
   * @param {number | null} retryAfterMs
   * @param {object} [details] other fields of the error object
   */
  constructor(status, code, message, retryAfterMs, details = {}) {
    super(message);
    this.name = 'ApiError';
    this.status = status;
    this.code = code;
    this.retryAfterMs = retryAfterMs;
    this.details = details;
  }
}

/**
 * @typedef {object} RequestOptions
 * @property {string} [method]
 * @property {string} [token] user JWT, sent as a bearer token
 * @property {string} [apiKey] server-to-server key (X-API-Key)
 * @property {any} [body] sent as JSON
 * @property {Record<string, string>} [headers]
 * @property {'json'|'blob'|'bytes'|'response'} [as] what to return (json by default)
 * @property {typeof fetch} [fetch]
 */

/**
 * request calls a presenced HTTP API and returns its JSON (null for 204),
 * or throws ApiError for a refusal and TypeError when unreachable.
 * @param {string} base origin, e.g. location.origin
 * @param {string} path
 * @param {RequestOptions} [opts]
 */
export async function request(base, path, opts = {}) {
  const f = opts.fetch ?? globalThis.fetch;
  const headers = { ...(opts.headers ?? {}) };
  if (opts.token) headers.Authorization = `Bearer ${opts.token}`;
  if (opts.apiKey) headers['X-API-Key'] = opts.apiKey;
  let body;
  if (opts.body !== undefined) {
    headers['Content-Type'] = 'application/json';
    body = JSON.stringify(opts.body);
  }
  const res = await f(new URL(path, base).toString(), {
    method: opts.method ?? 'GET',
    headers,
    body,
    credentials: 'same-origin',
    cache: 'no-store',
  });
  if (!res.ok) {
    let err = {};
    try {
      err = (await res.json()).error ?? {};
    } catch {
      // not our error shape (a proxy's page)
    }
    const { code = 'http_' + res.status, message = res.statusText, ...details } = err;
    throw new ApiError(res.status, code, message, parseRetryAfter(res.headers.get('Retry-After')), details);
  }
  switch (opts.as) {
    case 'response':
      return res;
    case 'blob':
      return res.blob();
    case 'bytes':
      return new Uint8Array(await res.arrayBuffer());
  }
  if (res.status === 204) return null;
  return res.json();
}

/**
 * signInDemo asks a development server for a user token (POST /demo/token).
 * Servers with a real identity provider do not offer it (404).
 * @returns {Promise<{user: string, token: string, expiresAt: string}>}
 */
export function signInDemo(base, user, opts = {}) {
  return request(base, '/demo/token', { ...opts, method: 'POST', body: { user } });
}

/**
 * @typedef {object} HoldOptions
 * @property {string} token the buyer's JWT
 * @property {string} pass the admission pass of the event's waiting room
 * @property {string} [key] Idempotency-Key, the same for every try (a new one by default)
 * @property {number} [retries] tries again after seats_being_held (2)
 * @property {(ms: number) => Promise<void>} [sleep]
 * @property {() => number} [random]
 * @property {typeof fetch} [fetch]
 */

/**
 * holdSeats holds seats of an event: named (`{seats: [101, 102]}`) or the
 * best available of a section (`{section: 'B', quantity: 2, adjacent:
 * true, maxPrice?}`), and returns the reservation. A named seat another
 * buyer is holding at this instant (409 seats_being_held) is tried again
 * after a jittered wait around the server's retryAfterMs, so that the
 * buyers of a hot seat do not all come back together; after `retries`
 * the ApiError is thrown, and a page can offer the best available
 * instead. No_seats_available carries the section's free count
 * (err.details.free).
 * @param {string} base
 * @param {string} event
 * @param {{seats: number[], promoCode?: string} | {section: string, quantity: number, adjacent?: boolean, maxPrice?: number, promoCode?: string}} body
 * @param {HoldOptions} opts
 */
export async function holdSeats(base, event, body, opts) {
  const key = opts.key ?? crypto.randomUUID();
  const sleep = opts.sleep ?? ((ms) => new Promise((r) => setTimeout(r, ms)));
  const random = opts.random ?? Math.random;
  const retries = opts.retries ?? 2;
  for (let attempt = 0; ; attempt++) {
    try {
      return await request(base, `/v1/events/${encodeURIComponent(event)}/holds`, {
        method: 'POST',
        token: opts.token,
        headers: { 'X-Admission-Pass': opts.pass, 'Idempotency-Key': key },
        body,
        fetch: opts.fetch,
      });
    } catch (err) {
      if (!(err instanceof ApiError) || err.code !== 'seats_being_held' || attempt >= retries) throw err;
      const around = Number(err.details.retryAfterMs) > 0 ? Number(err.details.retryAfterMs) : 300;
      await sleep(around / 2 + random() * around);
    }
  }
}

/**
 * fetchSections reads an event's sections without their seats: name, base
 * price, advisory multiplier (basis points), size and free seats.
 * @returns {Promise<{event: string, currency: string, seatCount: number, sections: {id: string, name: string, basePrice: number, multiplierBps: number, seatCount: number, available: number}[]}>}
 */
export function fetchSections(base, event, opts = {}) {
  return request(base, `/v1/events/${encodeURIComponent(event)}/sections`, opts);
}

/**
 * Activity follows the person in front of the page: the last input
 * (pointer, keys, scroll, touch) and whether the tab is visible. Events:
 * 'hidden', 'visible', 'active' (input after activeAfterMs without any).
 */
export class Activity extends Emitter {
  #last;
  #clock;
  #doc;
  #activeAfterMs;
  #stop = [];

  /**
   * @param {object} [opts]
   * @param {any} [opts.document] an EventTarget with visibilityState (default: the page's)
   * @param {any} [opts.window] where input events arrive (default: the page's window)
   * @param {Clock} [opts.clock]
   * @param {number} [opts.activeAfterMs] quiet time after which input counts as coming back
   */
  constructor(opts = {}) {
    super();
    this.#doc = opts.document ?? globalThis.document ?? null;
    this.#clock = opts.clock ?? realClock;
    this.#activeAfterMs = opts.activeAfterMs ?? 30000;
    this.#last = this.#clock.now();
    const win = opts.window ?? globalThis.window ?? null;
    const onInput = () => this.touch();
    for (const type of ['pointerdown', 'keydown', 'wheel', 'touchstart', 'scroll', 'mousemove']) {
      win?.addEventListener?.(type, onInput, { passive: true, capture: true });
      this.#stop.push(() => win?.removeEventListener?.(type, onInput, { capture: true }));
    }
    const onVisibility = () => {
      if (this.hidden) {
        this.emit('hidden');
      } else {
        this.touch();
        this.emit('visible');
      }
    };
    this.#doc?.addEventListener?.('visibilitychange', onVisibility);
    this.#stop.push(() => this.#doc?.removeEventListener?.('visibilitychange', onVisibility));
  }

  /** hidden tells whether the tab is in the background. */
  get hidden() {
    return this.#doc?.visibilityState === 'hidden';
  }

  /** idleMs is the time since the last input. */
  idleMs() {
    return Math.max(0, this.#clock.now() - this.#last);
  }

  /** touch records an interaction. */
  touch() {
    const now = this.#clock.now();
    const wasQuiet = now - this.#last >= this.#activeAfterMs;
    this.#last = now;
    if (wasQuiet) this.emit('active');
  }

  /** dispose removes the listeners. */
  dispose() {
    for (const f of this.#stop) f();
    this.#stop = [];
  }
}

/** A page without a document (Node, a worker) is always "visible". */
const alwaysVisible = {
  hidden: false,
  idleMs: () => 0,
  on: () => () => {},
};

/**
 * Envelope is the frame of the presence, viewers and waiting-room sockets.
 * @typedef {{v: number, event: string, payload?: any, id?: string, ts?: number, correlationId?: string}} Envelope
 */

function parseFrame(data) {
  try {
    const f = JSON.parse(typeof data === 'string' ? data : String(data));
    return f && typeof f === 'object' ? f : null;
  } catch {
    return null;
  }
}

/**
 * @typedef {object} ClientOptions
 * @property {string} [base] http(s) origin of presenced (default: the page's)
 * @property {any} [WebSocket]
 * @property {any} [EventSource] for the SSE fallback (default: the page's)
 * @property {typeof fetch} [fetch]
 * @property {Clock} [clock]
 * @property {() => number} [random]
 * @property {Backoff} [backoff]
 * @property {((url: string) => Promise<ProbeResult | null>) | null} [probe]
 * @property {Activity | typeof alwaysVisible} [activity]
 */

function baseOf(opts) {
  return opts.base ?? globalThis.location?.origin ?? 'http://127.0.0.1:8080';
}

function connectionOptions(opts) {
  const o = {};
  for (const k of ['WebSocket', 'clock', 'random', 'backoff', 'probe', 'stableMs', 'blockedAfter']) {
    if (opts[k] !== undefined) o[k] = opts[k];
  }
  return o;
}

/**
 * @typedef {{user: string, status: string, since?: number, lastActiveAt?: number, v: number, invisible?: boolean}} Status
 */

/**
 * Presence is the presence protocol (/v1/presence/ws): your own session and
 * the statuses of the users you follow. Events: 'status' (Status of a
 * followed user), 'self' (your own Status after a change you asked for:
 * your true status, with invisible: true while you appear offline),
 * 'privacy' ({status, lastActiveAt}: who may see them, after setPrivacy),
 * 'notification' ({user, on, status}), 'error' ({code, message, users,
 * request}), 'state' (the connection's). Following outlives reconnects:
 * every new connection names the whole list in its address (?subscribe=),
 * or sends it as subscriptions:set once open when it is long.
 */
// MAX_SUBSCRIBE_QUERY bounds the followed list named in a connection's
// address: request lines beyond a few KB are refused by common proxies.
const MAX_SUBSCRIBE_QUERY = 4000;

export class Presence extends Emitter {
  /** @type {Map<string, Status>} */
  statuses = new Map();
  #follow = new Set();
  #notify = new Set();
  #pending = new Map();
  #seq = 0;
  #conn;
  #opts;
  #activity;
  #pingTimer = null;
  #lastActivityPing = 0;
  #pollTimer = null;
  #stop = [];
  #token;
  #named = null; // the list named in the address of the connection opening

  /**
   * @param {ClientOptions & {token: string | (() => string), pingIntervalMs?: number}} opts
   */
  constructor(opts) {
    super();
    this.#opts = { pingIntervalMs: 60000, clock: realClock, ...opts };
    this.#token = opts.token;
    this.#activity = opts.activity ?? (globalThis.document ? new Activity({ clock: this.#opts.clock }) : alwaysVisible);
    const base = baseOf(opts);
    this.#conn = new Connection({
      ...connectionOptions(opts),
      url: () => wsURL(base, '/v1/presence/ws?token=' + encodeURIComponent(this.#tokenValue()) + this.#subscribeQuery()),
      // The session ended (expired while asleep) or the store failed at
      // connect: a new connection is how one comes back online.
      classify: ({ code }) => (code === Close.SESSION_ENDED || code === Close.TRY_AGAIN_LATER ? 'reconnect' : undefined),
      fallback: () => this.#startPolling(base),
    });
    this.#conn.on('state', (s) => this.emit('state', s));
    this.#conn.on('open', () => this.#onOpen());
    this.#conn.on('close', () => this.#stopPings());
    this.#conn.on('message', (d) => this.#onFrame(parseFrame(d)));
    this.#stop.push(
      this.#activity.on('hidden', () => this.#activityPing(false, true)),
      this.#activity.on('visible', () => this.#activityPing(true, true)),
      this.#activity.on('active', () => this.#activityPing(true, false)),
    );
  }

  /**
   * The list followed, named in the address of a new connection
   * (?subscribe=) so its session opens following them; kept short for
   * proxies (a longer list goes as subscriptions:set once open).
   */
  #subscribeQuery() {
    const q = [...this.#follow].map((u) => '&subscribe=' + encodeURIComponent(u)).join('');
    this.#named = q.length > 0 && q.length <= MAX_SUBSCRIBE_QUERY ? [...this.#follow] : null;
    return this.#named ? q : '';
  }

  #tokenValue() {
    return typeof this.#token === 'function' ? this.#token() : this.#token;
  }

  /** The underlying connection (its state, for a status line). */
  get connection() {
    return this.#conn;
  }

  /** following lists the users followed. */
  get following() {
    return [...this.#follow];
  }

  connect() {
    this.#conn.connect();
  }

  /** follow adds users to the list (subscriptions:add). */
  follow(...users) {
    const fresh = users.filter((u) => u && !this.#follow.has(u));
    if (fresh.length === 0) return;
    fresh.forEach((u) => this.#follow.add(u));
    this.#request('subscriptions:add', { users: fresh });
  }

  /** unfollow removes users (subscriptions:remove). */
  unfollow(...users) {
    const gone = users.filter((u) => this.#follow.delete(u));
    if (gone.length === 0) return;
    gone.forEach((u) => this.statuses.delete(u));
    this.#request('subscriptions:remove', { users: gone });
  }

  /** setFollowing replaces the list (subscriptions:set). */
  setFollowing(users) {
    this.#follow = new Set(users);
    for (const u of [...this.statuses.keys()]) if (!this.#follow.has(u)) this.statuses.delete(u);
    this.#request('subscriptions:set', { users: [...this.#follow] });
  }

  /**
   * setStatus chooses a manual status ("busy", "away", …), or null to go
   * back to automatic online / idle.
   * @param {string | null} status
   */
  setStatus(status) {
    return this.#request('presence:update', { status });
  }

  /**
   * setInvisible appears offline to everyone (true) until cleared (false:
   * which, like setStatus(null), also clears a manual status and marks this
   * device active). It outlives this session.
   * @param {boolean} on
   */
  setInvisible(on) {
    return this.#request('presence:update', { status: on ? 'invisible' : null });
  }

  /**
   * setPrivacy chooses who may see your status and your lastActiveAt:
   * 'everyone', 'contacts' (the users on your contact list) or 'nobody';
   * a field left out is unchanged ({} reads them). Answered with a
   * 'privacy' event.
   * @param {{status?: string, lastActiveAt?: string}} choice
   */
  setPrivacy(choice) {
    return this.#request('privacy:set', choice);
  }

  /** notifyWhenOnline asks for one notification when user next comes online. */
  notifyWhenOnline(user) {
    this.#notify.add(user);
    return this.#request('notifications:subscribe', { user, on: 'online' });
  }

  /** logout ends the session at once (no grace period) and stops. */
  logout() {
    this.#conn.send({ v: 1, event: 'session:disconnect' });
    this.#stopPings();
    this.#conn.close();
  }

  /** close stops without logging out: the session ends after the grace. */
  close() {
    this.#stopPings();
    this.#stopPolling();
    this.#conn.close();
    for (const f of this.#stop) f();
    this.#stop = [];
  }

  #request(event, payload) {
    const id = 'p' + ++this.#seq;
    this.#pending.set(id, event);
    // Requests silent on success never hear back: keep only recent ones.
    if (this.#pending.size > 256) this.#pending.delete(this.#pending.keys().next().value);
    // Not connected: the state is kept and sent on the next open.
    return this.#conn.send({ v: 1, event, payload, id });
  }

  #onOpen() {
    // A new connection is a new session: tell it everything the page wants
    // that its address did not already say.
    const named = this.#named;
    this.#named = null;
    const same = named && named.length === this.#follow.size && named.every((u) => this.#follow.has(u));
    if (this.#follow.size > 0 && !same) this.#request('subscriptions:set', { users: [...this.#follow] });
    for (const user of this.#notify) this.#request('notifications:subscribe', { user, on: 'online' });
    this.#startPings();
  }

  #startPings() {
    this.#stopPings();
    const tick = () => {
      this.#conn.send({ v: 1, event: 'session:ping', payload: { idleMs: Math.floor(this.#activity.idleMs()) } });
      this.#pingTimer = this.#opts.clock.setTimeout(tick, this.#opts.pingIntervalMs);
    };
    this.#pingTimer = this.#opts.clock.setTimeout(tick, this.#opts.pingIntervalMs);
  }

  #stopPings() {
    if (this.#pingTimer) this.#opts.clock.clearTimeout(this.#pingTimer);
    this.#pingTimer = null;
  }

  /** Tells the server at once when the person leaves or comes back. */
  #activityPing(active, always) {
    const now = this.#opts.clock.now();
    if (!always && now - this.#lastActivityPing < 5000) return; // frames are rate limited
    this.#lastActivityPing = now;
    this.#conn.send({ v: 1, event: 'session:ping', payload: { active } });
  }

  #onFrame(f) {
    if (!f) return;
    const request = f.correlationId ? this.#pending.get(f.correlationId) : undefined;
    if (f.correlationId) this.#pending.delete(f.correlationId);
    switch (f.event) {
      case 'presence:updated': {
        const users = f.payload?.users ?? [];
        if (request === 'presence:update' || f.payload?.self) {
          // Our own status: after our change, or one made on another of
          // our devices.
          for (const s of users) this.emit('self', s);
          return;
        }
        if (f.payload?.resync) {
          // The full list: whatever is missing is no longer followed.
          const listed = new Set(users.map((s) => s.user));
          for (const u of [...this.statuses.keys()]) if (!listed.has(u)) this.statuses.delete(u);
        }
        for (const s of users) this.#apply(s, !!f.payload?.resync);
        return;
      }
      case 'privacy:updated':
        this.emit('privacy', f.payload);
        return;
      case 'notifications:received':
        this.#notify.delete(f.payload?.user);
        if (f.payload?.status) this.#apply(f.payload.status, false);
        this.emit('notification', f.payload);
        return;
      case 'error':
        if (request === 'notifications:subscribe') {
          for (const u of f.payload?.users ?? []) this.#notify.delete(u);
        }
        if (f.payload?.code === 'forbidden' && !request) {
          // A contact list change, or their own choice, took these users
          // away from us.
          for (const u of f.payload?.users ?? []) {
            this.#follow.delete(u);
            this.statuses.delete(u);
          }
        }
        this.emit('error', { ...f.payload, request });
    }
  }

  #apply(s, force) {
    if (!s?.user) return;
    const old = this.statuses.get(s.user);
    // Changes may cross on the way: keep the newest by its version.
    if (!force && old && old.v > s.v) return;
    this.statuses.set(s.user, s);
    this.emit('status', s);
  }

  /** WebSockets blocked: read followed statuses over HTTP (you appear offline). */
  #startPolling(base) {
    const poll = async () => {
      for (const user of this.#follow) {
        try {
          const s = await request(base, '/v1/presence/users/' + encodeURIComponent(user), {
            token: this.#tokenValue(),
            fetch: this.#opts.fetch,
          });
          this.#apply(s, false);
        } catch (err) {
          if (err instanceof ApiError && err.status === 401) {
            this.emit('error', { code: 'unauthorized', message: err.message });
            return;
          }
        }
      }
      this.#pollTimer = this.#opts.clock.setTimeout(poll, 15000);
    };
    poll();
    return () => this.#stopPolling();
  }

  #stopPolling() {
    if (this.#pollTimer) this.#opts.clock.clearTimeout(this.#pollTimer);
    this.#pollTimer = null;
  }
}

/**
 * @typedef {{hotel: string, count: number, stale: boolean, asOf: string}} ViewerCount
 */

/**
 * Viewers is the live viewer count of hotels: watch(hotel) heartbeats the
 * hotel while the tab is visible (you are one of its viewers) and follows
 * its count over /v1/viewers/ws (SSE, then polling, when WebSockets are
 * blocked). Events: 'count' (ViewerCount), 'error' ({code, message}),
 * 'state'. A hidden tab stops heartbeating at once and closes the socket
 * after pauseAfterMs; the count is fetched afresh on return.
 */
export class Viewers extends Emitter {
  /** @type {Map<string, ViewerCount>} */
  counts = new Map();
  #hotels = new Map(); // hotel -> heartbeat timer (null while paused)
  #conn;
  #opts;
  #base;
  #activity;
  #pauseTimer = null;
  #seq = 0;
  #fallbackStops = [];
  #stop = [];

  /**
   * @param {ClientOptions & {heartbeatMs?: number, pauseAfterMs?: number, pollMs?: number}} [opts]
   */
  constructor(opts = {}) {
    super();
    this.#opts = { heartbeatMs: 15000, pauseAfterMs: 30000, pollMs: 5000, clock: realClock, ...opts };
    this.#base = baseOf(opts);
    this.#activity = opts.activity ?? (globalThis.document ? new Activity({ clock: this.#opts.clock }) : alwaysVisible);
    this.#conn = new Connection({
      ...connectionOptions(opts),
      url: wsURL(this.#base, '/v1/viewers/ws'),
      fallback: () => this.#startFallback(),
    });
    this.#conn.on('state', (s) => this.emit('state', s));
    this.#conn.on('open', () => this.#subscribe([...this.#hotels.keys()]));
    this.#conn.on('message', (d) => this.#onFrame(parseFrame(d)));
    this.#stop.push(
      this.#activity.on('hidden', () => this.#onHidden()),
      this.#activity.on('visible', () => this.#onVisible()),
    );
  }

  get connection() {
    return this.#conn;
  }

  /**
   * watch counts you as a viewer of hotel and follows its count.
   * @returns {() => void} stops watching
   */
  watch(hotel) {
    if (!this.#hotels.has(hotel)) {
      this.#hotels.set(hotel, null);
      if (!this.#activity.hidden) this.#heartbeat(hotel);
      if (this.#conn.state === 'idle') this.#conn.connect();
      else this.#subscribe([hotel]);
    }
    return () => this.unwatch(hotel);
  }

  unwatch(hotel) {
    if (!this.#hotels.has(hotel)) return;
    this.#clearHeartbeat(hotel);
    this.#hotels.delete(hotel);
    this.counts.delete(hotel);
    this.#conn.send({ v: 1, event: 'count:unsubscribe', payload: { hotels: [hotel] } });
  }

  close() {
    for (const h of [...this.#hotels.keys()]) this.#clearHeartbeat(h);
    this.#hotels.clear();
    this.#stopFallbacks();
    this.#conn.close();
    for (const f of this.#stop) f();
    this.#stop = [];
  }

  #subscribe(hotels) {
    if (hotels.length === 0) return;
    this.#conn.send({ v: 1, event: 'count:subscribe', payload: { hotels }, id: 'v' + ++this.#seq });
  }

  #onFrame(f) {
    if (!f) return;
    if (f.event === 'count:updated' && f.payload?.hotel) this.#setCount(f.payload);
    else if (f.event === 'error') this.emit('error', f.payload ?? {});
  }

  #setCount(c) {
    if (!this.#hotels.has(c.hotel)) return;
    this.counts.set(c.hotel, c);
    this.emit('count', c);
  }

  async #heartbeat(hotel) {
    if (!this.#hotels.has(hotel)) return;
    let next = this.#opts.heartbeatMs;
    try {
      await request(this.#base, `/v1/viewers/${encodeURIComponent(hotel)}/heartbeat`, {
        method: 'POST',
        fetch: this.#opts.fetch,
      });
    } catch (err) {
      // A refused heartbeat only delays the next one: the count on the
      // page must never turn into an error.
      if (err instanceof ApiError && err.retryAfterMs !== null) next = Math.max(next, err.retryAfterMs);
      if (err instanceof ApiError && err.status === 404) {
        this.emit('error', { code: err.code, message: err.message, hotel });
        return;
      }
    }
    if (!this.#hotels.has(hotel) || this.#activity.hidden) return;
    this.#hotels.set(hotel, this.#opts.clock.setTimeout(() => this.#heartbeat(hotel), next));
  }

  #clearHeartbeat(hotel) {
    const t = this.#hotels.get(hotel);
    if (t) this.#opts.clock.clearTimeout(t);
    if (this.#hotels.has(hotel)) this.#hotels.set(hotel, null);
  }

  #onHidden() {
    // Nobody is looking: stop counting this tab at once, and let the
    // socket go after a while (a quick tab switch keeps it).
    for (const h of this.#hotels.keys()) this.#clearHeartbeat(h);
    if (this.#pauseTimer) this.#opts.clock.clearTimeout(this.#pauseTimer);
    this.#pauseTimer = this.#opts.clock.setTimeout(() => {
      this.#pauseTimer = null;
      this.#conn.pause();
    }, this.#opts.pauseAfterMs);
  }

  #onVisible() {
    if (this.#pauseTimer) this.#opts.clock.clearTimeout(this.#pauseTimer);
    this.#pauseTimer = null;
    for (const h of this.#hotels.keys()) {
      this.#clearHeartbeat(h);
      this.#heartbeat(h);
    }
    this.#conn.resume();
  }

  /** WebSockets blocked: one EventSource per hotel, or polling the count. */
  #startFallback() {
    const ES = this.#opts.EventSource ?? globalThis.EventSource;
    for (const hotel of this.#hotels.keys()) {
      const path = `/v1/viewers/${encodeURIComponent(hotel)}`;
      if (ES) {
        const es = new ES(new URL(path + '/stream', this.#base).toString());
        es.addEventListener('count:updated', (ev) => {
          const c = parseFrame(ev.data);
          if (c) this.#setCount(c);
        });
        this.#fallbackStops.push(() => es.close());
        continue;
      }
      let timer = null;
      const poll = async () => {
        let next = this.#opts.pollMs;
        try {
          this.#setCount(await request(this.#base, path + '/count', { fetch: this.#opts.fetch }));
        } catch (err) {
          if (err instanceof ApiError && err.retryAfterMs !== null) next = Math.max(next, err.retryAfterMs);
        }
        timer = this.#opts.clock.setTimeout(poll, next);
      };
      poll();
      this.#fallbackStops.push(() => this.#opts.clock.clearTimeout(timer));
    }
    return () => this.#stopFallbacks();
  }

  #stopFallbacks() {
    for (const f of this.#fallbackStops) f();
    this.#fallbackStops = [];
  }
}

/**
 * @typedef {object} QueuedAnswer
 * @property {'queued'} state
 * @property {number | null} position
 * @property {number | null} aheadOfYou
 * @property {number | null} etaSeconds
 * @property {boolean} [paused]
 * @property {string} [opensAt]
 * @property {string} [lottery]
 */

/**
 * WaitingRoom is a place in the line of an event (/v1/waitingroom/{event}/ws):
 * connecting joins (or keeps your place). Events: 'position' (QueuedAnswer),
 * 'admitted' ({state, pass, expiresAt}; the socket then ends), 'error'
 * ({code, message}), 'state'. It is never paused: the open socket is what
 * keeps your place while the tab is hidden.
 */
export class WaitingRoom extends Emitter {
  /** @type {{pass: string, expiresAt: string} | null} */
  admitted = null;
  /** @type {QueuedAnswer | null} */
  position = null;
  #conn;
  #opts;
  #base;
  #event;
  #lastError = null;
  #pollTimer = null;

  /** @param {ClientOptions & {event: string, token: string | (() => string), pollMs?: number}} opts */
  constructor(opts) {
    super();
    this.#opts = { pollMs: 5000, clock: realClock, ...opts };
    this.#base = baseOf(opts);
    this.#event = opts.event;
    const path = `/v1/waitingroom/${encodeURIComponent(this.#event)}`;
    this.#conn = new Connection({
      ...connectionOptions(opts),
      url: () => wsURL(this.#base, `${path}/ws?token=${encodeURIComponent(this.#token())}`),
      classify: () => {
        if (this.admitted) return 'stop';
        // "not in line" (the place was lost): join again at the back.
        if (this.#lastError === 'not_in_line') return 'reconnect';
        if (this.#lastError === 'no_waiting_room') return 'stop';
        return undefined;
      },
      fallback: () => this.#startPolling(path),
    });
    this.#conn.on('state', (s) => this.emit('state', s));
    this.#conn.on('open', () => {
      this.#lastError = null;
    });
    this.#conn.on('message', (d) => this.#onFrame(parseFrame(d)));
  }

  #token() {
    return typeof this.#opts.token === 'function' ? this.#opts.token() : this.#opts.token;
  }

  get connection() {
    return this.#conn;
  }

  /** join takes (or keeps) a place in line and follows it. */
  join() {
    if (!this.admitted) this.#conn.connect();
  }

  /** ping refreshes the place now (a tab coming back to the front). */
  ping() {
    this.#conn.send({ v: 1, event: 'queue:ping', id: 'q' + this.#opts.clock.now() });
  }

  /** leave gives the place (or the checkout slot) back. */
  async leave() {
    this.close();
    await request(this.#base, `/v1/waitingroom/${encodeURIComponent(this.#event)}/leave`, {
      method: 'POST',
      token: this.#token(),
      fetch: this.#opts.fetch,
    });
  }

  close() {
    this.#stopPolling();
    this.#conn.close();
  }

  #onFrame(f) {
    if (!f) return;
    switch (f.event) {
      case 'queue:position':
        this.position = f.payload;
        this.emit('position', f.payload);
        return;
      case 'queue:admitted':
        this.#admit(f.payload);
        return;
      case 'error':
        this.#lastError = f.payload?.code ?? null;
        this.emit('error', f.payload ?? {});
    }
  }

  #admit(answer) {
    if (this.admitted) return;
    this.admitted = { pass: answer.pass, expiresAt: answer.expiresAt };
    this.#stopPolling();
    this.emit('admitted', answer);
  }

  /** WebSockets blocked: join once, then poll the status. */
  #startPolling(path) {
    let joined = false;
    const poll = async () => {
      let next = this.#opts.pollMs;
      try {
        const a = await request(this.#base, joined ? path + '/status' : path + '/join', {
          method: joined ? 'GET' : 'POST',
          token: this.#token(),
          fetch: this.#opts.fetch,
        });
        joined = true;
        if (a.state === 'admitted') {
          this.#admit(a);
          return;
        }
        this.position = a;
        this.emit('position', a);
      } catch (err) {
        if (err instanceof ApiError) {
          if (err.retryAfterMs !== null) next = Math.max(next, err.retryAfterMs);
          if (err.code === 'not_in_line') joined = false;
          this.emit('error', { code: err.code, message: err.message });
          if (err.status === 401 || err.code === 'no_waiting_room') return;
        }
      }
      this.#pollTimer = this.#opts.clock.setTimeout(poll, next);
    };
    poll();
    return () => this.#stopPolling();
  }

  #stopPolling() {
    if (this.#pollTimer) this.#opts.clock.clearTimeout(this.#pollTimer);
    this.#pollTimer = null;
  }
}

/** Seat states of the bitmap (two bits a seat). */
export const SeatState = Object.freeze({ AVAILABLE: 0, HELD: 1, SOLD: 2, BLOCKED: 3 });

/**
 * decodeSeatBitmap unpacks a seat bitmap: two bits a seat, four seats a
 * byte, most significant pair first.
 * @param {Uint8Array} bytes
 * @param {number} count seats
 * @returns {Uint8Array} one state (0–3) per seat
 */
export function decodeSeatBitmap(bytes, count) {
  const out = new Uint8Array(count);
  for (let i = 0; i < count; i++) {
    out[i] = (bytes[i >> 2] >> (6 - 2 * (i & 3))) & 3;
  }
  return out;
}

/**
 * fetchSeatStates reads the states of an event's seats (or one section's)
 * as a bitmap: positions come from the JSON map once, states from here.
 * @returns {Promise<{first: number, count: number, states: Uint8Array}>}
 */
export async function fetchSeatStates(base, event, section, opts = {}) {
  const q = section ? `?format=bitmap&section=${encodeURIComponent(section)}` : '?format=bitmap';
  const res = await request(base, `/v1/events/${encodeURIComponent(event)}/seats${q}`, { ...opts, as: 'response' });
  const count = Number(res.headers.get('X-Seat-Count'));
  const first = Number(res.headers.get('X-Seat-First'));
  const bytes = new Uint8Array(await res.arrayBuffer());
  return { first, count, states: decodeSeatBitmap(bytes, count) };
}

/**
 * SeatMapLive follows an event's seat-map invalidations
 * (/v1/events/{event}/live): 'reset' (fetch everything again: on every
 * (re)connect, and after the server lost track) and 'invalidate'
 * (section id: fetch that section again). SSE, then polling, when
 * WebSockets are blocked. A hidden tab closes it after pauseAfterMs; it
 * reopens with a reset on return. While an operator has paused the
 * event's pushes (load shedding) the server says 'paused' with a pollMs:
 * it then emits 'reset' every pollMs until the server's next reset.
 */
export class SeatMapLive extends Emitter {
  #conn;
  #opts;
  #activity;
  #pauseTimer = null;
  #stopFallback = null;
  #pollTimer = null;
  #stop = [];

  /** @param {ClientOptions & {event: string, sections?: string[], pauseAfterMs?: number, pollMs?: number}} opts */
  constructor(opts) {
    super();
    this.#opts = { pauseAfterMs: 30000, pollMs: 5000, clock: realClock, ...opts };
    const base = baseOf(opts);
    const q = opts.sections?.length ? '?section=' + opts.sections.map(encodeURIComponent).join(',') : '';
    const path = `/v1/events/${encodeURIComponent(opts.event)}/live${q}`;
    this.#activity = opts.activity ?? (globalThis.document ? new Activity({ clock: this.#opts.clock }) : alwaysVisible);
    this.#conn = new Connection({
      ...connectionOptions(opts),
      url: wsURL(base, path),
      fallback: () => this.#startFallback(new URL(path, base).toString()),
    });
    this.#conn.on('state', (s) => this.emit('state', s));
    this.#conn.on('message', (d) => this.#onMessage(parseFrame(d)));
    this.#stop.push(
      this.#activity.on('hidden', () => {
        this.#pauseTimer = this.#opts.clock.setTimeout(() => {
          this.#stopPolling();
          this.#conn.pause();
        }, this.#opts.pauseAfterMs);
      }),
      this.#activity.on('visible', () => {
        if (this.#pauseTimer) this.#opts.clock.clearTimeout(this.#pauseTimer);
        this.#pauseTimer = null;
        this.#conn.resume();
      }),
    );
  }

  get connection() {
    return this.#conn;
  }

  start() {
    this.#conn.connect();
  }

  close() {
    this.#stopPolling();
    this.#stopFallback?.();
    this.#conn.close();
    for (const f of this.#stop) f();
    this.#stop = [];
  }

  #onMessage(m) {
    if (m?.type === 'reset') {
      this.#stopPolling();
      this.emit('reset');
    } else if (m?.type === 'invalidate' && m.section) this.emit('invalidate', m.section);
    else if (m?.type === 'paused' && m.pollMs > 0) this.#startPolling(m.pollMs);
  }

  // Pushes paused by the server: fetch everything every pollMs instead.
  #startPolling(ms) {
    this.#stopPolling();
    const tick = () => {
      this.emit('reset');
      this.#pollTimer = this.#opts.clock.setTimeout(tick, ms);
    };
    this.#pollTimer = this.#opts.clock.setTimeout(tick, ms);
  }

  #stopPolling() {
    if (this.#pollTimer !== null) this.#opts.clock.clearTimeout(this.#pollTimer);
    this.#pollTimer = null;
  }

  #startFallback(url) {
    const ES = this.#opts.EventSource ?? globalThis.EventSource;
    if (ES) {
      const es = new ES(url);
      es.addEventListener('reset', () => this.#onMessage({ type: 'reset' }));
      es.addEventListener('invalidate', (ev) => this.#onMessage(parseFrame(ev.data)));
      es.addEventListener('paused', (ev) => this.#onMessage(parseFrame(ev.data)));
      this.#stopFallback = () => es.close();
    } else {
      // Without any push: refetch everything now and then.
      let timer = null;
      const tick = () => {
        this.emit('reset');
        timer = this.#opts.clock.setTimeout(tick, this.#opts.pollMs);
      };
      tick();
      this.#stopFallback = () => this.#opts.clock.clearTimeout(timer);
    }
    return () => {
      this.#stopFallback?.();
      this.#stopFallback = null;
    };
  }
}
