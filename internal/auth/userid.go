package auth

import (
	"errors"
	"fmt"
	"unicode"
	"unicode/utf8"
)

// MaxUserIDBytes bounds user ids (token subjects, subscription targets).
const MaxUserIDBytes = 128

// ValidUserID is the one rule for user ids, applied to every token the
// server accepts and by `presenced token` before it signs one: printable
// UTF-8 without spaces, at most MaxUserIDBytes, and without braces, which
// delimit Redis Cluster hash tags and would move a user's keys to another
// slot.
func ValidUserID(id string) error {
	switch {
	case id == "":
		return errors.New("a user id must not be empty")
	case len(id) > MaxUserIDBytes:
		return fmt.Errorf("a user id has at most %d bytes, %q has %d", MaxUserIDBytes, id[:16]+"…", len(id))
	case !utf8.ValidString(id):
		return errors.New("a user id must be UTF-8")
	}
	for _, r := range id {
		if r == '{' || r == '}' || unicode.IsControl(r) || unicode.IsSpace(r) {
			return fmt.Errorf("user id %q: no spaces, control characters or braces", id)
		}
	}
	return nil
}
