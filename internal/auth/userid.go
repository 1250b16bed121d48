package auth

import (
	"fmt"
	"strings"

	"github.com/presenced/presenced/internal/validate"
)

// MaxUserIDBytes bounds user ids (token subjects, subscription targets).
const MaxUserIDBytes = 128

// ValidUserID is the one rule for user ids, applied to every token the
// server accepts and by `presenced token` before it signs one: a printable
// token (validate.Token: UTF-8 without spaces or control characters) of at
// most MaxUserIDBytes, and without braces, which delimit Redis Cluster hash
// tags and would move a user's keys to another slot.
func ValidUserID(id string) error {
	if err := validate.Token("user id", id, MaxUserIDBytes); err != nil {
		return err
	}
	if strings.ContainsAny(id, "{}") {
		return fmt.Errorf("user id %q: no braces", id)
	}
	return nil
}
