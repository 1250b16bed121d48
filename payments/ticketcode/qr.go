package ticketcode

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
)

// The QR payload is "<ticket id>.<window>.<hex HMAC-SHA256(secret,
// "<ticket id>:<window>")>", the window being unix seconds / 15. A verifier
// accepts the current window and one either side (clock drift between phone
// and scanner), so a screenshot is stale within 30-45 seconds.

// WindowSeconds is the length of one QR window.
const WindowSeconds = 15

// maxPayload bounds what the parser reads: a uuid, a window and 64 hex.
const maxPayload = 128

// Errors of Verify.
var (
	ErrBadPayload = errors.New("not a ticket code")
	ErrStale      = errors.New("ticket code outside its time window")
	ErrForged     = errors.New("ticket code signature does not match")
)

// Window is the QR window of t.
func Window(t time.Time) int64 { return t.Unix() / WindowSeconds }

// Payload is the QR payload of ticket in window.
func Payload(secret []byte, ticket string, window int64) string {
	w := strconv.FormatInt(window, 10)
	return ticket + "." + w + "." + hex.EncodeToString(mac(secret, ticket, w))
}

func mac(secret []byte, ticket, window string) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(ticket + ":" + window))
	return m.Sum(nil)
}

// ParsePayload splits a payload, refusing anything not exactly shaped.
func ParsePayload(p string) (ticket string, window int64, sig []byte, err error) {
	if len(p) == 0 || len(p) > maxPayload {
		return "", 0, nil, ErrBadPayload
	}
	parts := strings.Split(p, ".")
	if len(parts) != 3 {
		return "", 0, nil, ErrBadPayload
	}
	id, err := uuid.Parse(parts[0])
	if err != nil || id.String() != parts[0] {
		return "", 0, nil, ErrBadPayload
	}
	window, err = strconv.ParseInt(parts[1], 10, 64)
	if err != nil || window < 0 || strconv.FormatInt(window, 10) != parts[1] {
		return "", 0, nil, ErrBadPayload
	}
	sig, err = hex.DecodeString(parts[2])
	if err != nil || len(sig) != sha256.Size {
		return "", 0, nil, ErrBadPayload
	}
	return parts[0], window, sig, nil
}

// Verify checks a parsed payload against the ticket's secret at now.
func Verify(secret []byte, ticket string, window int64, sig []byte, now time.Time) error {
	d := Window(now) - window
	if d < -1 || d > 1 {
		return ErrStale
	}
	if !hmac.Equal(sig, mac(secret, ticket, strconv.FormatInt(window, 10))) {
		return ErrForged
	}
	return nil
}
