package auth

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// The HS256 path checks a token exactly as the JWT library would with the
// Verifier's options (valid methods, exp required, 30 s leeway, issuer and
// audience), plus the numeric-times rule, at a fraction of the cost: one
// JSON decode of the claims into a fixed struct instead of a header map, a
// claims decode, a second decode for the numeric check and a decode per
// time. Every connect verifies a token, so this is on the connect path.
// Anything that is not plainly HS256 (another alg, a header that does not
// decode) goes to the library, which refuses it or checks it against the
// JWKS.

// leeway is the clock skew allowed on exp and nbf.
const leeway = 30 * time.Second

// hsClaims is the claims set as it is on the wire. The times stay raw so
// that a string ("123") is refused, as RFC 7519 makes them numbers.
type hsClaims struct {
	Issuer   string           `json:"iss"`
	Subject  string           `json:"sub"`
	Audience jwt.ClaimStrings `json:"aud"`
	Exp      json.RawMessage  `json:"exp"`
	Nbf      json.RawMessage  `json:"nbf"`
	Iat      json.RawMessage  `json:"iat"`
	ID       string           `json:"jti"`
	Rooms    []string         `json:"rooms"`
}

// knownHeader remembers the last header segment seen and its alg: the
// tokens of one issuer share their header, so it is decoded once.
type knownHeader struct {
	seg string
	alg string
}

// verifyHS256 checks token on the HS256 path; handled is false when the
// token is not for it and the library must judge it.
func (v *Verifier) verifyHS256(token string) (claims *Claims, handled bool, err error) {
	if len(v.secret) == 0 {
		return nil, false, nil
	}
	dot1 := strings.IndexByte(token, '.')
	if dot1 < 0 {
		return nil, false, nil
	}
	dot2 := strings.IndexByte(token[dot1+1:], '.')
	if dot2 < 0 {
		return nil, false, nil
	}
	dot2 += dot1 + 1
	if strings.IndexByte(token[dot2+1:], '.') >= 0 {
		return nil, false, nil
	}
	if v.headerAlg(token[:dot1]) != "HS256" {
		return nil, false, nil
	}
	sig, err := base64.RawURLEncoding.DecodeString(token[dot2+1:])
	if err != nil {
		return nil, true, fmt.Errorf("signature: %w", err)
	}
	mac := hmac.New(sha256.New, v.secret)
	mac.Write([]byte(token[:dot2]))
	if !hmac.Equal(sig, mac.Sum(nil)) {
		return nil, true, errors.New("signature is invalid")
	}
	payload, err := base64.RawURLEncoding.DecodeString(token[dot1+1 : dot2])
	if err != nil {
		return nil, true, fmt.Errorf("claims: %w", err)
	}
	var w hsClaims
	if err := json.Unmarshal(payload, &w); err != nil {
		return nil, true, fmt.Errorf("claims: %w", err)
	}
	c := &Claims{Rooms: w.Rooms}
	c.Issuer, c.Subject, c.Audience, c.ID = w.Issuer, w.Subject, w.Audience, w.ID
	if c.ExpiresAt, err = numericDate("exp", w.Exp); err != nil {
		return nil, true, err
	}
	if c.NotBefore, err = numericDate("nbf", w.Nbf); err != nil {
		return nil, true, err
	}
	if c.IssuedAt, err = numericDate("iat", w.Iat); err != nil {
		return nil, true, err
	}
	if err := v.validTimes(c, time.Now()); err != nil {
		return nil, true, err
	}
	if v.issuer != "" && c.Issuer != v.issuer {
		return nil, true, errors.New("issuer is not the one expected")
	}
	if v.audience != "" && !slices.Contains(c.Audience, v.audience) {
		return nil, true, errors.New("audience is not the one expected")
	}
	return c, true, nil
}

// validTimes applies exp (required) and nbf at now, with the leeway.
func (v *Verifier) validTimes(c *Claims, now time.Time) error {
	if c.ExpiresAt == nil {
		return errors.New("exp is required")
	}
	if !now.Before(c.ExpiresAt.Add(leeway)) {
		return errors.New("token is expired")
	}
	if c.NotBefore != nil && now.Before(c.NotBefore.Add(-leeway)) {
		return errors.New("token is not valid yet")
	}
	return nil
}

// headerAlg returns the alg of a header segment ("" if it has none or does
// not decode), decoding it only when it differs from the last one seen.
func (v *Verifier) headerAlg(seg string) string {
	if h := v.header.Load(); h != nil && h.seg == seg {
		return h.alg
	}
	b, err := base64.RawURLEncoding.DecodeString(seg)
	if err != nil {
		return ""
	}
	// A map, as the library reads it: the key is "alg", exactly.
	var h map[string]any
	if err := json.Unmarshal(b, &h); err != nil {
		return ""
	}
	alg, _ := h["alg"].(string)
	if len(seg) <= maxKnownHeader {
		v.header.Store(&knownHeader{seg: seg, alg: alg})
	}
	return alg
}

// maxKnownHeader bounds the header kept: a sender of huge headers must not
// make the verifier hold them.
const maxKnownHeader = 512

// numericDate reads a time claim: absent or null is none; anything but a
// JSON number is refused. Seconds with a fraction are cut to whole
// seconds, as the library does.
func numericDate(name string, raw json.RawMessage) (*jwt.NumericDate, error) {
	if len(raw) == 0 {
		return nil, nil
	}
	if raw[0] != '-' && (raw[0] < '0' || raw[0] > '9') {
		return nil, fmt.Errorf("%s must be a number", name)
	}
	f, err := strconv.ParseFloat(string(raw), 64)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	whole, frac := math.Modf(f)
	return jwt.NewNumericDate(time.Unix(int64(whole), int64(frac*1e9))), nil
}
