package web

import (
	"encoding/json"
	"unicode/utf8"
)

// StrictDecoder is a type that decodes its usual shape by hand, faster
// than StrictJSON's reflection. DecodeStrict is given a document json.Valid
// accepted; it fills the value and reports true only when StrictJSON would
// accept the document and decode the very same value, and otherwise leaves
// the value untouched and reports false, handing the document to the
// general path (which decodes it or names what is wrong).
//
// Every WebSocket frame is an Envelope and every connect sends a list of
// users: decoded by reflection they were 10 us of a connect's 200.
type StrictDecoder interface {
	DecodeStrict(data []byte) bool
}

// DecodeStrict decodes an envelope whose keys and strings have no escapes
// and whose numbers are plain integers.
func (e *Envelope) DecodeStrict(d []byte) bool {
	var out Envelope
	var seen uint8
	ok := scanObject(d, func(key []byte, i int) (int, bool) {
		var bit uint8
		var j int
		var ok bool
		switch string(key) {
		case "v":
			var n int64
			n, j, ok = plainInt(d, i)
			out.V, bit = int(n), 1
		case "event":
			out.Event, j, ok = plainString(d, i)
			bit = 2
		case "payload":
			// null would decode as "null"; left to the general path.
			if d[i] == 'n' {
				return i, false
			}
			j, ok = walkStrict(d, i, nil)
			out.Payload, bit = json.RawMessage(append([]byte(nil), d[i:j]...)), 4
		case "id":
			out.ID, j, ok = plainString(d, i)
			bit = 8
		case "ts":
			out.TS, j, ok = plainInt(d, i)
			bit = 16
		case "correlationId":
			out.CorrelationID, j, ok = plainString(d, i)
			bit = 32
		default:
			return i, false
		}
		if !ok || seen&bit != 0 {
			return i, false
		}
		seen |= bit
		return j, true
	})
	if ok {
		*e = out
	}
	return ok
}

// DecodeStrictStrings decodes {"<key>":[...]}, an object holding only a
// list of strings without escapes, for a StrictDecoder of that shape; ok is
// false for anything else. An empty list is an empty, not a nil, slice, as
// encoding/json decodes it.
func DecodeStrictStrings(d []byte, key string) (list []string, ok bool) {
	seen := false
	ok = scanObject(d, func(k []byte, i int) (int, bool) {
		if string(k) != key || seen || d[i] != '[' {
			return i, false
		}
		seen = true
		list = make([]string, 0, countElems(d, i))
		i = skipSpace(d, i+1)
		if d[i] == ']' {
			return i + 1, true
		}
		for {
			s, j, ok := plainString(d, i)
			if !ok {
				return i, false
			}
			list = append(list, s)
			i = skipSpace(d, j)
			if d[i] == ']' {
				return i + 1, true
			}
			i = skipSpace(d, i+1) // past the comma
		}
	})
	if !ok || !seen {
		return nil, false
	}
	return list, true
}

// scanObject walks the object that is all of d (valid JSON), calling value
// with each key (without escapes) and the index of its value; value returns
// the index just past the value, or false to give up.
func scanObject(d []byte, value func(key []byte, i int) (int, bool)) bool {
	i := skipSpace(d, 0)
	if i >= len(d) || d[i] != '{' {
		return false
	}
	i = skipSpace(d, i+1)
	if d[i] != '}' {
		for {
			end := skipString(d, i)
			key := d[i+1 : end-1]
			if !plain(key) {
				return false
			}
			i = skipSpace(d, skipSpace(d, end)+1) // past the colon
			var ok bool
			if i, ok = value(key, i); !ok {
				return false
			}
			i = skipSpace(d, i)
			if d[i] == '}' {
				break
			}
			i = skipSpace(d, i+1) // past the comma
		}
	}
	return skipSpace(d, i+1) == len(d)
}

// plain reports whether a string's raw bytes are its value: no escapes,
// and valid UTF-8 (encoding/json replaces invalid bytes).
func plain(s []byte) bool {
	ascii := true
	for _, c := range s {
		if c == '\\' {
			return false
		}
		if c >= utf8.RuneSelf {
			ascii = false
		}
	}
	return ascii || utf8.Valid(s)
}

// plainString reads the string at d[i] if it is plain.
func plainString(d []byte, i int) (string, int, bool) {
	if d[i] != '"' {
		return "", i, false
	}
	end := skipString(d, i)
	raw := d[i+1 : end-1]
	if !plain(raw) {
		return "", i, false
	}
	return string(raw), end, true
}

// plainInt reads the number at d[i] if it is an integer of at most 18
// digits (no fraction or exponent, which encoding/json refuses for an
// integer field, and no overflow).
func plainInt(d []byte, i int) (int64, int, bool) {
	j := i
	neg := d[j] == '-'
	if neg {
		j++
	}
	var n int64
	start := j
	for ; j < len(d) && d[j] >= '0' && d[j] <= '9'; j++ {
		n = n*10 + int64(d[j]-'0')
	}
	if j == start || j-start > 18 || j < len(d) && (d[j] == '.' || d[j] == 'e' || d[j] == 'E') {
		return 0, i, false
	}
	if neg {
		n = -n
	}
	return n, j, true
}

// countElems counts the values of the array at d[i], for sizing: commas
// outside strings, nested values counted once by the caller's walk.
func countElems(d []byte, i int) int {
	n := 1
	for j := i + 1; j < len(d); j++ {
		switch d[j] {
		case '"':
			j = skipString(d, j) - 1
		case ',':
			n++
		case ']', '[', '{', '}':
			return n
		}
	}
	return n
}
