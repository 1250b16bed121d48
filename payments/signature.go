package payments

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// The webhook signature scheme of Stripe, implemented here for the sandbox
// (the Stripe adapter verifies with stripe-go's own webhook package, and a
// test holds the two in agreement):
//
//	Stripe-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<raw body>")>[,v1=...]
//
// Several v1 appear while a secret is rotated: one per secret in use. Other
// schemes (v0) are ignored.

// maxSignatureHeader bounds what the parser reads: ten secrets at once is
// already more than any rotation needs.
const maxSignatureHeader = 1024

type signatureHeader struct {
	timestamp time.Time
	v1        [][]byte
}

// parseSignatureHeader reads "t=...,v1=...". It refuses a header without a
// timestamp or without a v1 signature, duplicate timestamps, and junk.
func parseSignatureHeader(h string) (signatureHeader, error) {
	var out signatureHeader
	if h == "" || len(h) > maxSignatureHeader {
		return out, fmt.Errorf("%w: missing or oversized %s header", ErrBadSignature, HeaderSignature)
	}
	seenT := false
	for _, part := range strings.Split(h, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok || v == "" {
			return out, fmt.Errorf("%w: malformed %s header", ErrBadSignature, HeaderSignature)
		}
		switch k {
		case "t":
			if seenT {
				return out, fmt.Errorf("%w: two timestamps", ErrBadSignature)
			}
			sec, err := strconv.ParseInt(v, 10, 64)
			if err != nil || sec <= 0 || sec > 1<<40 {
				return out, fmt.Errorf("%w: bad timestamp", ErrBadSignature)
			}
			out.timestamp, seenT = time.Unix(sec, 0), true
		case "v1":
			sig, err := hex.DecodeString(v)
			if err != nil || len(sig) != sha256.Size {
				return out, fmt.Errorf("%w: bad v1 signature", ErrBadSignature)
			}
			out.v1 = append(out.v1, sig)
		}
	}
	if !seenT || len(out.v1) == 0 {
		return out, fmt.Errorf("%w: no timestamp or no v1 signature", ErrBadSignature)
	}
	return out, nil
}

func computeSignature(secret string, t time.Time, body []byte) []byte {
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(strconv.FormatInt(t.Unix(), 10)))
	mac.Write([]byte("."))
	mac.Write(body)
	return mac.Sum(nil)
}

// signHeader signs body at t with every secret.
func signHeader(secrets []string, t time.Time, body []byte) string {
	var b strings.Builder
	b.WriteString("t=")
	b.WriteString(strconv.FormatInt(t.Unix(), 10))
	for _, s := range secrets {
		b.WriteString(",v1=")
		b.WriteString(hex.EncodeToString(computeSignature(s, t, body)))
	}
	return b.String()
}

// verifySignature checks the header against the raw body: the timestamp
// within tolerance of now (either side: a clock far ahead is as suspect as
// a replay), and one v1 made with one of secrets.
func verifySignature(header string, body []byte, secrets []string, tolerance time.Duration, now time.Time) error {
	h, err := parseSignatureHeader(header)
	if err != nil {
		return err
	}
	if d := now.Sub(h.timestamp); d > tolerance || d < -tolerance {
		return fmt.Errorf("%w: timestamp outside the %s tolerance", ErrBadSignature, tolerance)
	}
	for _, s := range secrets {
		want := computeSignature(s, h.timestamp, body)
		for _, got := range h.v1 {
			if hmac.Equal(want, got) {
				return nil
			}
		}
	}
	return fmt.Errorf("%w: no signature matches", ErrBadSignature)
}
