package viewers

import (
	"encoding/base64"
	"errors"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/presenced/presenced/web"
	"github.com/presenced/presenced/web/wire"
)

const badHotel = "hotel id must be 1 to 64 letters, digits, '-', '_' or '.'"

// heartbeat is POST /v1/viewers/{hotel}/heartbeat: 204 when counted (or
// silently not counted, for a denylisted session), 400 for a bad hotel id,
// 404 for a hotel that does not exist,
// 413 for a body over heartbeat_body_limit, 429 over a rate limit, 503 when
// the counting store is failing. The body is ignored.
func (mod *Module) heartbeat(c echo.Context) error {
	hotel := c.Param("hotel")
	if !validHotel(hotel) {
		mod.m.hb.invalid.Inc()
		return wire.BadRequest(badHotel)
	}
	// From the in-process registry: no database round trip.
	if err := mod.knownHotel(hotel); err != nil {
		mod.m.hb.unknownHotel.Inc()
		return err
	}
	req := c.Request()
	if err := mod.drainBody(req); err != nil {
		mod.m.hb.tooLarge.Inc()
		return err
	}
	now := time.Now()
	nowNs := now.UnixNano()
	prefix, _ := prefixOf(c.RealIP())
	// The prefix bucket comes first: a flood without cookies must not make
	// us sign a cookie per request.
	if mod.prefixes != nil {
		if ok, wait := mod.prefixes.allow(prefix, nowNs); !ok {
			mod.m.hb.limitedPrefix.Inc()
			return rateLimited(wait, "too many heartbeats from this network")
		}
	}
	sess, err := mod.sessions.resolve(cookieValue(web.HeaderValue(req.Header, "Cookie"), mod.cfg.CookieName), now)
	if err != nil {
		return err
	}
	if sess.setCookie != "" {
		c.Response().Header().Add("Set-Cookie", setCookieHeader(mod.cfg.CookieName, sess.setCookie, mod.cfg.CookieMaxAge, mod.cfg.CookieSecure))
	}
	var flags byte
	if sess.fresh {
		flags |= flagNewSession
	}
	if sess.replaced != "" {
		flags |= flagReplaced
		mod.m.cookiesReplaced.WithLabelValues(sess.replaced).Inc()
	}
	if ok, wait := mod.sessLim.allow(sess.hash, nowNs); !ok {
		mod.m.hb.limitedSession.Inc()
		return rateLimited(wait, "more than %g heartbeats a second from this session", mod.cfg.SessionRate)
	}
	if mod.deny.denied(sess.hash, prefix, now) {
		mod.m.hb.denied.Inc()
		return c.NoContent(http.StatusNoContent)
	}
	if err := mod.writer.add(hotel, sess.hash, mod.tiers.get(hotel), now); err != nil {
		mod.m.hb.unavailable.Inc()
		return wire.Unavailable(mod.cfg.ProbeInterval*2, "heartbeats cannot be counted right now")
	}
	mod.recorder.record(hotel, sess.hash, prefix, uaHash(web.HeaderValue(req.Header, "User-Agent")), now, flags)
	mod.m.hb.accepted.Inc()
	return c.NoContent(http.StatusNoContent)
}

// drainBody enforces the heartbeat's own body limit, far below the
// server-wide one.
func (mod *Module) drainBody(req *http.Request) error {
	limit := mod.cfg.HeartbeatBodyLimit
	// Heartbeats come without a body: that case makes nothing, not even
	// the error it does not need.
	if req.ContentLength == 0 || req.Body == nil || req.Body == http.NoBody {
		return nil
	}
	tooLarge := wire.Errorf(http.StatusRequestEntityTooLarge, "body_too_large", "a heartbeat body is at most %d bytes", limit)
	if req.ContentLength > limit {
		return tooLarge
	}
	n, err := io.CopyN(io.Discard, req.Body, limit+1)
	if n > limit {
		return tooLarge
	}
	if err != nil && !errors.Is(err, io.EOF) {
		var maxErr *http.MaxBytesError
		if errors.As(err, &maxErr) {
			return tooLarge
		}
		return wire.ReadError(err) // the deadline's 408 among them
	}
	return nil
}

func rateLimited(wait time.Duration, format string, args ...any) error {
	e := wire.Errorf(http.StatusTooManyRequests, "rate_limited", format, args...)
	e.RetryAfter = max(wait, time.Second)
	return e
}

// count is GET /v1/viewers/{hotel}/count.
func (mod *Module) count(c echo.Context) error {
	hotel := c.Param("hotel")
	if err := mod.checkHotel(hotel); err != nil {
		return err
	}
	res, err := mod.counter.get(hotel)
	if err != nil {
		return wire.Unavailable(mod.cfg.BreakerCooldown, "the count is not available right now")
	}
	h := c.Response().Header()
	// A CDN may serve this for 5 s and keep serving it for 30 s more while
	// it revalidates: origin sees about one read per hotel per 5 s per PoP.
	h.Set(echo.HeaderCacheControl, "public, max-age=5, stale-while-revalidate=30")
	h.Set("ETag", res.etag)
	if etagMatch(c.Request().Header.Get("If-None-Match"), res.etag) {
		return c.NoContent(http.StatusNotModified)
	}
	if c.Request().Method == http.MethodHead {
		h.Set(echo.HeaderContentType, echo.MIMEApplicationJSON)
		return c.NoContent(http.StatusOK)
	}
	return c.Blob(http.StatusOK, echo.MIMEApplicationJSON, res.body)
}

func etagMatch(header, etag string) bool {
	if header == "" {
		return false
	}
	for _, t := range strings.Split(header, ",") {
		t = strings.TrimSpace(t)
		if t == "*" || strings.TrimPrefix(t, "W/") == strings.TrimPrefix(etag, "W/") {
			return true
		}
	}
	return false
}

// bundle is GET /v1/viewers/{hotel}/bundle (API key): the raw HyperLogLog
// of this region's current window, for peer regions to merge.
func (mod *Module) bundle(c echo.Context) error {
	hotel := c.Param("hotel")
	if !validHotel(hotel) {
		return wire.BadRequest(badHotel)
	}
	blob, asOf, err := mod.counter.bundle(c.Request().Context(), hotel)
	if err != nil {
		mod.log.Warn("viewers: bundle failed", "err", err)
		return wire.Unavailable(time.Second, "the bundle is not available right now")
	}
	mod.m.bundlesServed.Inc()
	c.Response().Header().Set(echo.HeaderCacheControl, "no-store")
	return c.JSON(http.StatusOK, bundleJSON{
		Hotel: hotel, Region: mod.cfg.Region, AsOf: asOf.UTC(),
		HLL: base64.StdEncoding.EncodeToString(blob),
	})
}

// codeHotelNotFound is the error code of ErrHotelNotFound, in a response
// and in a socket's error frame.
const codeHotelNotFound = "hotel_not_found"

// answered is a viewers handler whose refusals are answered as refusals
// maps them (a refusal's own message, when it has one, is the one sent).
func answered(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error { return wire.Refused(next(c), refusals) }
}

// refusals are the HTTP answers to the viewers' refusal kinds (invalid
// input 400 and busy 503 are wire's shared ones).
var refusals = []wire.Refusal{
	{Kind: ErrHotelNotFound, Status: http.StatusNotFound, Code: codeHotelNotFound},
}
