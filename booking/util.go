package booking

import (
	"regexp"
	"strconv"
)

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

var (
	eventIDPattern   = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)
	sectionIDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,15}$`)
	promoPattern     = regexp.MustCompile(`^[A-Za-z0-9_-]{1,32}$`)
)

// validEventID tells whether id can name an event (and a Redis hash tag).
func validEventID(id string) bool { return eventIDPattern.MatchString(id) }
