package contract

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
)

// The generator builds JSON documents from these, not from maps, so that
// it can repeat a field, keep an order, and put in bytes no encoder
// would write (invalid UTF-8, numbers past float64).
type (
	// object is a JSON object; a name may repeat.
	object []member
	member struct {
		name  string
		value any
	}
	// raw goes into the document as it is.
	raw string
)

// encode writes v as JSON: object, []any, raw, string, bool, nil and Go
// numbers.
func encode(b *bytes.Buffer, v any) {
	switch x := v.(type) {
	case nil:
		b.WriteString("null")
	case raw:
		b.WriteString(string(x))
	case object:
		b.WriteByte('{')
		for i, m := range x {
			if i > 0 {
				b.WriteByte(',')
			}
			encodeString(b, m.name)
			b.WriteByte(':')
			encode(b, m.value)
		}
		b.WriteByte('}')
	case []any:
		b.WriteByte('[')
		for i, e := range x {
			if i > 0 {
				b.WriteByte(',')
			}
			encode(b, e)
		}
		b.WriteByte(']')
	case string:
		encodeString(b, x)
	case bool:
		b.WriteString(strconv.FormatBool(x))
	case int64:
		b.WriteString(strconv.FormatInt(x, 10))
	case int:
		b.WriteString(strconv.Itoa(x))
	case float64:
		b.WriteString(strconv.FormatFloat(x, 'g', -1, 64))
	case json.Number:
		b.WriteString(string(x))
	default:
		panic(fmt.Sprintf("contract: cannot encode %T", v))
	}
}

func encodeString(b *bytes.Buffer, s string) {
	enc, _ := json.Marshal(s) // valid UTF-8 only: the hostile bytes are raw values
	b.Write(enc)
}

func marshal(v any) []byte {
	var b bytes.Buffer
	encode(&b, v)
	return b.Bytes()
}

// get returns the value of the first member named name.
func (o object) get(name string) (any, bool) {
	for _, m := range o {
		if m.name == name {
			return m.value, true
		}
	}
	return nil, false
}

// with returns o with name set to v (replacing the first such member, or
// added at the end).
func (o object) with(name string, v any) object {
	out := append(object(nil), o...)
	for i, m := range out {
		if m.name == name {
			out[i].value = v
			return out
		}
	}
	return append(out, member{name, v})
}

func (o object) without(name string) object {
	var out object
	for _, m := range o {
		if m.name != name {
			out = append(out, m)
		}
	}
	return out
}
