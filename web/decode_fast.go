package web

import (
	"bytes"
	"encoding/json"
	"reflect"
)

// strictFast decodes data into v when StrictJSON would accept it, and
// reports false (leaving the verdict and its message to strictSlow)
// otherwise. It checks the same rules as checkValue on the raw bytes of a
// document json.Valid has accepted, so walking it needs no bounds checks
// of its own beyond the value's end: exact field names, no unknown fields,
// no field given twice. Keys with escapes are left to strictSlow, which
// decodes them.
func strictFast(data []byte, v any) bool {
	if !json.Valid(data) {
		return false
	}
	if _, ok := walkStrict(data, 0, reflect.TypeOf(v)); !ok {
		return false
	}
	return json.Unmarshal(data, v) == nil
}

// strictTarget is what checkValue checks a value against: the pointed-to
// type, or nil for types that decode themselves (time.Time, RawMessage).
func strictTarget(t reflect.Type) reflect.Type {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t != nil && (reflect.PointerTo(t).Implements(unmarshalerType) || reflect.PointerTo(t).Implements(textUnmarshalerType)) {
		return nil
	}
	return t
}

func skipSpace(d []byte, i int) int {
	for i < len(d) {
		switch d[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// skipString returns the index just past the string opening at d[i].
func skipString(d []byte, i int) int {
	for j := i + 1; j < len(d); j++ {
		switch d[j] {
		case '\\':
			j++
		case '"':
			return j + 1
		}
	}
	return len(d)
}

// walkStrict walks the value at d[i] (after any space) against t and
// returns the index just past it.
func walkStrict(d []byte, i int, t reflect.Type) (int, bool) {
	t = strictTarget(t)
	i = skipSpace(d, i)
	switch d[i] {
	case '{':
		return walkObject(d, i+1, t)
	case '[':
		var elem reflect.Type
		if t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
			elem = t.Elem()
		}
		i = skipSpace(d, i+1)
		if d[i] == ']' {
			return i + 1, true
		}
		for {
			var ok bool
			if i, ok = walkStrict(d, i, elem); !ok {
				return i, false
			}
			i = skipSpace(d, i)
			if d[i] != ',' {
				return i + 1, true // the closing ]
			}
			i++
		}
	case '"':
		return skipString(d, i), true
	}
	for i < len(d) { // a number, true, false or null
		switch d[i] {
		case ',', ']', '}', ' ', '\t', '\n', '\r':
			return i, true
		}
		i++
	}
	return i, true
}

// walkObject walks an object whose { is just before d[i].
func walkObject(d []byte, i int, t reflect.Type) (int, bool) {
	var fields map[string]reflect.Type
	if t != nil && t.Kind() == reflect.Struct {
		fields = fieldsOf(t)
	}
	// Keys seen so far, for "given twice": a few on the stack, a map past
	// them.
	var few [16][]byte
	seen := few[:0]
	var many map[string]bool
	i = skipSpace(d, i)
	if d[i] == '}' {
		return i + 1, true
	}
	for {
		i = skipSpace(d, i)
		end := skipString(d, i)
		key := d[i+1 : end-1]
		if bytes.IndexByte(key, '\\') >= 0 {
			return i, false
		}
		if many != nil {
			if many[string(key)] {
				return i, false
			}
			many[string(key)] = true
		} else {
			for _, k := range seen {
				if bytes.Equal(k, key) {
					return i, false
				}
			}
			if len(seen) < len(few) {
				seen = append(seen, key)
			} else {
				many = make(map[string]bool, 2*len(few))
				for _, k := range seen {
					many[string(k)] = true
				}
				many[string(key)] = true
			}
		}
		var next reflect.Type
		switch {
		case t == nil:
		case t.Kind() == reflect.Struct:
			f, ok := fields[string(key)]
			if !ok {
				return i, false
			}
			next = f
		case t.Kind() == reflect.Map:
			next = t.Elem()
		}
		i = skipSpace(d, end) + 1 // past the colon
		var ok bool
		if i, ok = walkStrict(d, i, next); !ok {
			return i, false
		}
		i = skipSpace(d, i)
		if d[i] != ',' {
			return i + 1, true // the closing }
		}
		i++
	}
}
