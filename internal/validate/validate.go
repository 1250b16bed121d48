// Package validate is the one set of input rules at the edge: every
// identifier and text field a client sends is checked here before it
// reaches Redis or PostgreSQL, so hostile input gets a clear 4xx, never a
// 500 from a store (PostgreSQL refuses NUL and invalid UTF-8 with an
// error, and an unexpected byte in a Redis key could move it to another
// hash slot).
package validate

import (
	"fmt"
	"regexp"
	"unicode"
	"unicode/utf8"

	"github.com/google/uuid"
)

// Text checks free text a person typed (a name): valid UTF-8, no control
// characters (NUL, newlines, escapes), at most maxBytes bytes. Empty is
// allowed; callers that need a value check that themselves.
func Text(field, s string, maxBytes int) error {
	if len(s) > maxBytes {
		return fmt.Errorf("%s: at most %d bytes (got %d)", field, maxBytes, len(s))
	}
	if !utf8.ValidString(s) {
		return fmt.Errorf("%s: not valid UTF-8", field)
	}
	for _, r := range s {
		if unicode.IsControl(r) {
			return fmt.Errorf("%s: control characters are not allowed", field)
		}
	}
	return nil
}

// Token checks an opaque printable token (an Idempotency-Key, a user id):
// Text, not empty, and no spaces either.
func Token(field, s string, maxBytes int) error {
	if s == "" {
		return fmt.Errorf("%s: must not be empty", field)
	}
	if err := Text(field, s, maxBytes); err != nil {
		return err
	}
	for _, r := range s {
		if unicode.IsSpace(r) {
			return fmt.Errorf("%s: spaces are not allowed", field)
		}
	}
	return nil
}

// Kind is one kind of identifier with its pattern, so every module checks
// an event id (say) the same way.
type Kind struct {
	name    string
	rule    string
	pattern *regexp.Regexp
}

func newKind(name, rule, pattern string) Kind {
	return Kind{name: name, rule: rule, pattern: regexp.MustCompile(pattern)}
}

// Identifier kinds. Their charsets keep ids safe inside Redis keys (no ':'
// or hash-tag braces), URLs and log lines.
var (
	// EventID names a sale event (booking, waiting room).
	EventID = newKind("event id", "1-64 letters, digits, '.', '_' or '-', starting with a letter or digit",
		`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)
	// SectionID names a section of a venue.
	SectionID = newKind("section id", "1-16 letters, digits, '_' or '-', starting with a letter or digit",
		`^[A-Za-z0-9][A-Za-z0-9_-]{0,15}$`)
	// PromoCode is a promotion code.
	PromoCode = newKind("promotion code", "1-32 letters, digits, '_' or '-'", `^[A-Za-z0-9_-]{1,32}$`)
	// HotelID names a hotel page (viewers).
	HotelID = newKind("hotel id", "1-64 letters, digits, '.', '_' or '-'", `^[A-Za-z0-9_.-]{1,64}$`)
)

// Valid tells whether s is an identifier of this kind.
func (k Kind) Valid(s string) bool { return k.pattern.MatchString(s) }

// Check returns an error naming the kind and its rule when s is not one.
func (k Kind) Check(s string) error {
	if k.Valid(s) {
		return nil
	}
	return fmt.Errorf("%s: %s", k.name, k.rule)
}

// UUID parses the canonical textual form of a UUID only
// (xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx, any case) and returns it in lower
// case. uuid.Parse also takes urn:uuid:, braces and 32 bare hex digits,
// forms PostgreSQL does not all read.
func UUID(field, s string) (string, error) {
	if len(s) != 36 {
		return "", fmt.Errorf("%s: not a UUID", field)
	}
	u, err := uuid.Parse(s)
	if err != nil {
		return "", fmt.Errorf("%s: not a UUID", field)
	}
	return u.String(), nil
}

// Limits of common fields.
const (
	// MaxNameBytes bounds display names (events, sections).
	MaxNameBytes = 200
	// MaxIdempotencyKeyBytes bounds an Idempotency-Key header.
	MaxIdempotencyKeyBytes = 255
)
