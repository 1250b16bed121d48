package web

import (
	"bytes"
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"sync"

	"github.com/labstack/echo/v4"
)

// DecodeBody reads a request body as one JSON value into v, strictly (see
// StrictJSON). A body cut short by http.body_limit_bytes answers 413;
// anything else refused answers 400 bad_request naming the reason.
func DecodeBody(c echo.Context, v any) error {
	data, err := io.ReadAll(c.Request().Body)
	if err != nil {
		var tooBig *echo.HTTPError
		var late *Error
		switch {
		case errors.As(err, &tooBig):
			return tooBig // the body limit cut the read short
		case errors.As(err, &late):
			return late // the body read deadline passed
		}
		return BadRequest("the body could not be read: %v", err)
	}
	if err := StrictJSON(data, v); err != nil {
		return BadRequest("the body is not valid JSON for this request: %v", err)
	}
	return nil
}

// StrictJSON decodes data, one JSON value, into v. Unlike encoding/json's
// defaults it refuses what a typo or a hostile client would slip through:
// field names match exactly ("Seats" is not "seats"), unknown fields and
// fields given twice are refused, and nothing may follow the value.
//
// It runs for every WebSocket frame, so well-formed input takes a path
// that allocates nothing beyond the decoded value (a StrictDecoder's own,
// else strictFast); anything it would refuse goes through strictSlow,
// which names the reason.
func StrictJSON(data []byte, v any) error {
	if d, ok := v.(StrictDecoder); ok && json.Valid(data) && d.DecodeStrict(data) {
		return nil
	}
	if strictFast(data, v) {
		return nil
	}
	return strictSlow(data, v)
}

// strictSlow is StrictJSON walking tokens with encoding/json's decoder:
// about 4 KiB of garbage per call, but it says what is wrong and where.
func strictSlow(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := checkValue(dec, reflect.TypeOf(v), ""); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("more than one JSON value")
	}
	dec = json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

var (
	unmarshalerType     = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshalerType = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// checkValue walks one JSON value, checking object keys against t (nil:
// anything goes below, as for json.RawMessage or any).
func checkValue(dec *json.Decoder, t reflect.Type, path string) error {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t != nil && (reflect.PointerTo(t).Implements(unmarshalerType) || reflect.PointerTo(t).Implements(textUnmarshalerType)) {
		t = nil // decodes itself (time.Time, json.RawMessage)
	}
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	d, ok := tok.(json.Delim)
	if !ok {
		return nil
	}
	switch d {
	case '[':
		var elem reflect.Type
		if t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
			elem = t.Elem()
		}
		for dec.More() {
			if err := checkValue(dec, elem, path+"[]"); err != nil {
				return err
			}
		}
	case '{':
		seen := map[string]bool{}
		for dec.More() {
			tok, err := dec.Token()
			if err != nil {
				return err
			}
			key, _ := tok.(string)
			if seen[key] {
				return fmt.Errorf("field %q is given twice", path+key)
			}
			seen[key] = true
			var next reflect.Type
			switch {
			case t == nil:
			case t.Kind() == reflect.Struct:
				f, ok := fieldsOf(t)[key]
				if !ok {
					return unknownField(t, path+key)
				}
				next = f
			case t.Kind() == reflect.Map:
				next = t.Elem()
			}
			if err := checkValue(dec, next, path+key+"."); err != nil {
				return err
			}
		}
	}
	_, err = dec.Token() // the closing delimiter
	return err
}

func unknownField(t reflect.Type, name string) error {
	short := name[strings.LastIndexByte(name, '.')+1:]
	for known := range fieldsOf(t) {
		if strings.EqualFold(known, short) {
			return fmt.Errorf("unknown field %q (field names are case-sensitive: %q)", name, known)
		}
	}
	return fmt.Errorf("unknown field %q", name)
}

var fieldCache sync.Map // reflect.Type → map[string]reflect.Type

// fieldsOf maps a struct's JSON names to their types, embedded structs'
// fields included, as encoding/json names them.
func fieldsOf(t reflect.Type) map[string]reflect.Type {
	if m, ok := fieldCache.Load(t); ok {
		return m.(map[string]reflect.Type)
	}
	out := map[string]reflect.Type{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		ft := f.Type
		if f.Anonymous && name == "" {
			for ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				for k, v := range fieldsOf(ft) {
					if _, dup := out[k]; !dup {
						out[k] = v
					}
				}
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[name] = ft
	}
	fieldCache.Store(t, out)
	return out
}
