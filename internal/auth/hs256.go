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
// token is not for it and the library must judge it. Its errors wrap the
// library's (jwt.ErrTokenMalformed, jwt.ErrTokenExpired, ...), found in the
// order the library finds them, so callers that explain a refusal (the
// token check command) read them alike.
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
	payload, err := base64.RawURLEncoding.DecodeString(token[dot1+1 : dot2])
	if err != nil {
		return nil, true, fmt.Errorf("%w: claims: %w", jwt.ErrTokenMalformed, err)
	}
	var w hsClaims
	if err := json.Unmarshal(payload, &w); err != nil {
		return nil, true, fmt.Errorf("%w: claims: %w", jwt.ErrTokenMalformed, err)
	}
	c := &Claims{Rooms: w.Rooms}
	c.Issuer, c.Subject, c.Audience, c.ID = w.Issuer, w.Subject, w.Audience, w.ID
	var notNumber []string
	for _, t := range []struct {
		name string
		raw  json.RawMessage
		to   **jwt.NumericDate
	}{{"exp", w.Exp, &c.ExpiresAt}, {"nbf", w.Nbf, &c.NotBefore}, {"iat", w.Iat, &c.IssuedAt}} {
		d, number, err := numericDate(t.raw)
		if err != nil {
			return nil, true, fmt.Errorf("%w: %s: %w", jwt.ErrTokenMalformed, t.name, err)
		}
		*t.to = d
		if !number {
			notNumber = append(notNumber, t.name)
		}
	}
	sig, err := base64.RawURLEncoding.DecodeString(token[dot2+1:])
	if err != nil {
		return nil, true, fmt.Errorf("%w: signature: %w", jwt.ErrTokenMalformed, err)
	}
	mac := hmac.New(sha256.New, v.secret)
	mac.Write([]byte(token[:dot2]))
	if !hmac.Equal(sig, mac.Sum(nil)) {
		return nil, true, fmt.Errorf("%w: %w", jwt.ErrTokenSignatureInvalid, jwt.ErrSignatureInvalid)
	}
	if err := v.validClaims(c, time.Now()); err != nil {
		return nil, true, err
	}
	if len(notNumber) > 0 {
		// After the checks, as numericTimes runs after the library's.
		return nil, true, fmt.Errorf("%s must be a number", notNumber[0])
	}
	return c, true, nil
}

// validClaims applies exp (required) and nbf at now with the leeway, and
// the issuer and audience when configured; like the library it reports
// every failure, joined.
func (v *Verifier) validClaims(c *Claims, now time.Time) error {
	var errs []error
	switch {
	case c.ExpiresAt == nil:
		errs = append(errs, fmt.Errorf("%w: exp claim is required", jwt.ErrTokenRequiredClaimMissing))
	case !now.Before(c.ExpiresAt.Add(leeway)):
		errs = append(errs, jwt.ErrTokenExpired)
	}
	if c.NotBefore != nil && now.Before(c.NotBefore.Add(-leeway)) {
		errs = append(errs, jwt.ErrTokenNotValidYet)
	}
	if v.audience != "" {
		switch {
		case len(c.Audience) == 0 || len(c.Audience) == 1 && c.Audience[0] == "":
			errs = append(errs, fmt.Errorf("%w: aud claim is required", jwt.ErrTokenRequiredClaimMissing))
		case !slices.Contains(c.Audience, v.audience):
			errs = append(errs, jwt.ErrTokenInvalidAudience)
		}
	}
	if v.issuer != "" {
		switch {
		case c.Issuer == "":
			errs = append(errs, fmt.Errorf("%w: iss claim is required", jwt.ErrTokenRequiredClaimMissing))
		case c.Issuer != v.issuer:
			errs = append(errs, jwt.ErrTokenInvalidIssuer)
		}
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %w", jwt.ErrTokenInvalidClaims, errors.Join(errs...))
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

// numericDate reads a time claim as the library does (absent or null is
// none; a string holding a number counts) and tells whether it was a JSON
// number, which RFC 7519 requires. Seconds with a fraction are cut to
// whole seconds, as the library does.
func numericDate(raw json.RawMessage) (d *jwt.NumericDate, number bool, err error) {
	if len(raw) == 0 {
		return nil, true, nil
	}
	text := string(raw)
	switch {
	case text == "null":
		return nil, false, nil
	case raw[0] == '"':
		var n json.Number
		if err := json.Unmarshal(raw, &n); err != nil {
			return nil, false, err
		}
		text = n.String()
	case raw[0] != '-' && (raw[0] < '0' || raw[0] > '9'):
		return nil, false, errors.New("not a number")
	default:
		number = true
	}
	f, err := strconv.ParseFloat(text, 64)
	if err != nil {
		return nil, false, err
	}
	whole, frac := math.Modf(f)
	return jwt.NewNumericDate(time.Unix(int64(whole), int64(frac*1e9))), number, nil
}
