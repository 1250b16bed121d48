package viewers

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"hash/maphash"
	"strconv"
	"strings"
	"time"

	"github.com/presenced/presenced/internal/keyring"
)

// The session cookie is "v1.<kid>.<payload>.<signature>" with base64url
// (unpadded) payload and signature. The payload is a random 16-byte session
// id and the issue time; the Ed25519 signature covers everything before the
// last dot. Verification needs only public keys, so a process that only
// verifies never holds the signing secret. What is counted is a 64-bit hash
// of the session id, never the cookie.
const (
	cookieVersion = "v1"
	sessionIDLen  = 16
	payloadLen    = sessionIDLen + 8
)

// Why a presented cookie was not trusted (a metric label).
const (
	replaceMalformed  = "malformed"
	replaceUnknownKid = "unknown_kid"
	replaceBadSig     = "bad_signature"
	replaceExpired    = "expired"
)

// session is the identity a heartbeat is counted under.
type session struct {
	hash uint64
	// setCookie is the cookie value to send back: a new session, or the
	// same session re-signed with the active key during a rotation.
	setCookie string
	// fresh marks a session issued by this request.
	fresh bool
	// replaced says why a presented cookie was refused ("" if none was).
	replaced string
}

// sessions issues and verifies session cookies. Verifying Ed25519 costs
// tens of microseconds, so verified cookies are remembered for a few
// minutes, keyed by a keyed 128-bit hash of the whole cookie: a tampered
// cookie never matches a remembered one.
type sessions struct {
	ring   *keyring.Ring
	maxAge time.Duration
	seedA  maphash.Seed
	seedB  maphash.Seed
	cache  *genMap[verified]
}

type verified struct {
	check  uint64 // second hash of the cookie, against collisions
	hash   uint64 // the session hash
	issued int64  // unix seconds
	kid    string
}

func newSessions(ring *keyring.Ring, maxAge time.Duration, cacheEntries int) *sessions {
	return &sessions{
		ring:   ring,
		maxAge: maxAge,
		seedA:  maphash.MakeSeed(),
		seedB:  maphash.MakeSeed(),
		cache:  newGenMap[verified](2*time.Minute, cacheEntries),
	}
}

// resolve returns the session of a request that presented cookie (possibly
// empty), issuing a new one when the cookie is missing or not trusted.
func (s *sessions) resolve(cookie string, now time.Time) (session, error) {
	if cookie != "" {
		hash, kid, reason := s.verify(cookie, now)
		if reason == "" {
			sess := session{hash: hash}
			if kid != s.ring.ActiveID() {
				// Signed by a key being retired: same session, new signature,
				// so the rotation completes without a drop in the count.
				id, _, _ := decodeCookie(cookie)
				v, err := s.sign(id, now)
				if err != nil {
					return session{}, err
				}
				s.remember(v, hash, now)
				sess.setCookie = v
			}
			return sess, nil
		}
		sess, err := s.issue(now)
		sess.replaced = reason
		return sess, err
	}
	return s.issue(now)
}

func (s *sessions) issue(now time.Time) (session, error) {
	var id [sessionIDLen]byte
	_, _ = rand.Read(id[:])
	v, err := s.sign(id, now)
	if err != nil {
		return session{}, err
	}
	h := sessionHash(id)
	s.remember(v, h, now)
	return session{hash: h, setCookie: v, fresh: true}, nil
}

// remember records a cookie this process just signed as verified: the
// session's next heartbeat (which, for a new session, is most of its
// first minute's cost) then needs no Ed25519 verification of a signature
// made here a moment ago.
func (s *sessions) remember(cookie string, hash uint64, now time.Time) {
	k := maphash.String(s.seedA, cookie)
	check := maphash.String(s.seedB, cookie)
	s.cache.Put(k, verified{check: check, hash: hash, issued: now.Unix(), kid: s.ring.ActiveID()}, now.UnixNano())
}

func (s *sessions) sign(id [sessionIDLen]byte, now time.Time) (string, error) {
	var payload [payloadLen]byte
	copy(payload[:], id[:])
	binary.BigEndian.PutUint64(payload[sessionIDLen:], uint64(now.Unix()))
	kid := s.ring.ActiveID()
	var b strings.Builder
	b.Grow(len(cookieVersion) + len(kid) + 2 + base64.RawURLEncoding.EncodedLen(payloadLen) + 1 + 86)
	b.WriteString(cookieVersion)
	b.WriteByte('.')
	b.WriteString(kid)
	b.WriteByte('.')
	b.WriteString(base64.RawURLEncoding.EncodeToString(payload[:]))
	_, sig, err := s.ring.Sign([]byte(b.String()))
	if err != nil {
		return "", err
	}
	b.WriteByte('.')
	b.WriteString(base64.RawURLEncoding.EncodeToString(sig))
	return b.String(), nil
}

// verify checks a cookie and returns its session hash and key id, or why
// it is refused.
func (s *sessions) verify(cookie string, now time.Time) (uint64, string, string) {
	k := maphash.String(s.seedA, cookie)
	check := maphash.String(s.seedB, cookie)
	nowNs := now.UnixNano()
	if v, ok := s.cache.Get(k, nowNs); ok && v.check == check {
		if now.Unix()-v.issued > int64(s.maxAge/time.Second) {
			return 0, "", replaceExpired
		}
		if _, known := s.ring.Public(v.kid); !known {
			return 0, "", replaceUnknownKid
		}
		return v.hash, v.kid, ""
	}
	signed, sigB64, ok := cutLast(cookie, '.')
	if !ok {
		return 0, "", replaceMalformed
	}
	ver, rest, ok := strings.Cut(signed, ".")
	if !ok || ver != cookieVersion {
		return 0, "", replaceMalformed
	}
	kid, payloadB64, ok := strings.Cut(rest, ".")
	if !ok || kid == "" {
		return 0, "", replaceMalformed
	}
	var payload [payloadLen]byte
	if base64.RawURLEncoding.DecodedLen(len(payloadB64)) != payloadLen {
		return 0, "", replaceMalformed
	}
	if _, err := base64.RawURLEncoding.Decode(payload[:], []byte(payloadB64)); err != nil {
		return 0, "", replaceMalformed
	}
	sig, err := base64.RawURLEncoding.DecodeString(sigB64)
	if err != nil {
		return 0, "", replaceMalformed
	}
	if _, known := s.ring.Public(kid); !known {
		return 0, "", replaceUnknownKid
	}
	if !s.ring.Verify(kid, []byte(signed), sig) {
		return 0, "", replaceBadSig
	}
	issued := int64(binary.BigEndian.Uint64(payload[sessionIDLen:]))
	if now.Unix()-issued > int64(s.maxAge/time.Second) {
		return 0, "", replaceExpired
	}
	var id [sessionIDLen]byte
	copy(id[:], payload[:sessionIDLen])
	h := sessionHash(id)
	s.cache.Put(k, verified{check: check, hash: h, issued: issued, kid: kid}, nowNs)
	return h, kid, ""
}

// decodeCookie extracts the session id of a cookie already verified.
func decodeCookie(cookie string) ([sessionIDLen]byte, string, bool) {
	var id [sessionIDLen]byte
	parts := strings.Split(cookie, ".")
	if len(parts) != 4 {
		return id, "", false
	}
	raw, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil || len(raw) != payloadLen {
		return id, "", false
	}
	copy(id[:], raw)
	return id, parts[1], true
}

// sessionHash is the 64-bit identity counted for a session id.
func sessionHash(id [sessionIDLen]byte) uint64 {
	h := sha256.New()
	h.Write([]byte("presenced viewers session\x00"))
	h.Write(id[:])
	var sum [sha256.Size]byte
	return binary.BigEndian.Uint64(h.Sum(sum[:0]))
}

func cutLast(s string, sep byte) (string, string, bool) {
	i := strings.LastIndexByte(s, sep)
	if i < 0 {
		return "", "", false
	}
	return s[:i], s[i+1:], true
}

// cookieValue finds the value of cookie name in a Cookie header without
// parsing the others (net/http parses all and allocates for each).
func cookieValue(header, name string) string {
	for header != "" {
		var part string
		part, header, _ = strings.Cut(header, ";")
		part = strings.TrimLeft(part, " \t")
		if len(part) > len(name) && part[len(name)] == '=' && part[:len(name)] == name {
			return strings.Trim(part[len(name)+1:], `"`)
		}
	}
	return ""
}

// setCookieHeader renders the Set-Cookie value for a session cookie.
func setCookieHeader(name, value string, maxAge time.Duration, secure bool) string {
	var b strings.Builder
	b.Grow(len(name) + len(value) + 80)
	b.WriteString(name)
	b.WriteByte('=')
	b.WriteString(value)
	b.WriteString("; Path=/v1/viewers; Max-Age=")
	b.WriteString(strconv.FormatInt(int64(maxAge/time.Second), 10))
	b.WriteString("; HttpOnly; SameSite=Lax")
	if secure {
		b.WriteString("; Secure")
	}
	return b.String()
}
