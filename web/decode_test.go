package web

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

type strictInner struct {
	ID   string `json:"id"`
	Rows int    `json:"rows"`
}

type strictBody struct {
	Seats    []int64         `json:"seats"`
	Promo    string          `json:"promoCode,omitempty"`
	At       *time.Time      `json:"at,omitempty"`
	Raw      json.RawMessage `json:"raw,omitempty"`
	Sections []strictInner   `json:"sections"`
	Labels   map[string]int  `json:"labels"`
	Nested   *strictInner    `json:"nested"`
	Any      map[string]any  `json:"any"`
	Skip     string          `json:"-"`
}

// encoding/json matches "Seats" to "seats"; a request must be read as sent.
func TestStrictJSONRefusesWhatEncodingJSONForgives(t *testing.T) {
	t.Parallel()
	for name, body := range map[string]string{
		"case of a field":       `{"Seats":[1]}`,
		"case inside an array":  `{"sections":[{"ID":"A"}]}`,
		"case inside a pointer": `{"nested":{"Rows":1}}`,
		"unknown field":         `{"seats":[1],"extra":1}`,
		"field given twice":     `{"seats":[1],"seats":[2]}`,
		"a second value":        `{"seats":[1]} {}`,
		"trailing garbage":      `{"seats":[1]}x`,
		"a dash-tagged field":   `{"Skip":"x"}`,
		"not an object":         `[1]`,
		"truncated":             `{"seats":[1`,
	} {
		var v strictBody
		require.Errorf(t, StrictJSON([]byte(body), &v), "%s: %s", name, body)
	}
	// What encoding/json itself does with the first: it accepts it.
	var lax strictBody
	require.NoError(t, json.Unmarshal([]byte(`{"Seats":[1]}`), &lax))
	require.Equal(t, []int64{1}, lax.Seats)
}

func TestStrictJSONAcceptsExactBodies(t *testing.T) {
	t.Parallel()
	var v strictBody
	require.NoError(t, StrictJSON([]byte(`{"seats":[1,2],"promoCode":"X","at":"2030-01-01T00:00:00Z",
		"raw":{"Anything":[1,{"Goes":2}]},"sections":[{"id":"A","rows":2}],"labels":{"Free":1},
		"nested":{"id":"n"},"any":{"K":{"k":1}}}`), &v))
	require.Equal(t, []int64{1, 2}, v.Seats)
	require.Equal(t, "A", v.Sections[0].ID)
	require.Equal(t, 1, v.Labels["Free"])
	require.Equal(t, "n", v.Nested.ID)
}

// The allocation-free path and the token walk agree on every body: the
// same verdict, and the same value when accepted.
func TestStrictJSONFastPathAgreesWithTheTokenWalk(t *testing.T) {
	t.Parallel()
	bodies := []string{
		`{"seats":[1,2],"promoCode":"X","at":"2030-01-01T00:00:00Z","raw":{"Anything":[1,{"Goes":2}]},"sections":[{"id":"A","rows":2}],"labels":{"Free":1},"nested":{"id":"n"},"any":{"K":{"k":1}}}`,
		` { "seats" : [ ] , "sections" : [ { } ] } `, `{}`, `null`, `{"nested":null,"at":null}`,
		`{"Seats":[1]}`, `{"sections":[{"ID":"A"}]}`, `{"nested":{"Rows":1}}`, `{"seats":[1],"extra":1}`,
		`{"seats":[1],"seats":[2]}`, `{"seats":[1]} {}`, `{"seats":[1]}x`, `{"Skip":"x"}`, `[1]`, `{"seats":[1`,
		`{"raw":{"a":1,"a":2}}`, `{"any":{"k":{"x":1,"x":1}}}`, `{"labels":{"a":1,"b":2,"a":3}}`,
		`{"se\u0061ts":[1]}`, `{"promoCode":"a\"b\\","seats":[-1.5e3]}`, `{"seats":"no"}`, `{"rows":1}`,
		`{"labels":{"k0":0,"k1":1,"k2":2,"k3":3,"k4":4,"k5":5,"k6":6,"k7":7,"k8":8,"k9":9,"k10":10,"k11":11,"k12":12,"k13":13,"k14":14,"k15":15,"k16":16,"k17":17}}`,
		`{"labels":{"k0":0,"k1":1,"k2":2,"k3":3,"k4":4,"k5":5,"k6":6,"k7":7,"k8":8,"k9":9,"k10":10,"k11":11,"k12":12,"k13":13,"k14":14,"k15":15,"k16":16,"k0":17}}`,
		`{"seats":[1,2,3],"labels":{"":0},"any":{"":[true,false,null]}}`,
	}
	for _, body := range bodies {
		var fast, slow strictBody
		okFast := strictFast([]byte(body), &fast)
		errSlow := strictSlow([]byte(body), &slow)
		if !okFast && errSlow == nil {
			// Escaped keys are the one thing left to the token walk.
			require.Contains(t, body, `\u`, "refused only by the fast path")
			continue
		}
		require.Equal(t, errSlow == nil, okFast, "%s (token walk: %v)", body, errSlow)
		if okFast {
			require.Equal(t, slow, fast, body)
		}
	}
}

// A frame on the WebSocket hot path costs no garbage beyond its decoded
// value; the token walk alone left about 4 KiB of it per frame, a large
// part of what the collector had to chase under a fan-out load.
func TestStrictJSONAllocatesOnlyTheValue(t *testing.T) {
	msg := []byte(`{"v":1,"event":"presence:update","payload":{"status":"busy"},"id":"u1"}`)
	allocs := testing.AllocsPerRun(100, func() {
		var env Envelope
		if err := StrictJSON(msg, &env); err != nil {
			t.Fatal(err)
		}
	})
	// encoding/json decoding the envelope: its event, id and raw payload,
	// and its own parse state.
	require.LessOrEqual(t, allocs, 10.0)
}

func BenchmarkStrictJSONEnvelope(b *testing.B) {
	msg := []byte(`{"v":1,"event":"presence:update","payload":{"status":"busy"},"id":"u1"}`)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		var env Envelope
		if err := StrictJSON(msg, &env); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkStrictJSONSubscriptions(b *testing.B) {
	msg := []byte(`{"v":1,"event":"subscriptions:set","payload":{"users":["user-00001","user-00002","user-00003","user-00004","user-00005","user-00006","user-00007","user-00008","user-00009","user-00010","user-00011","user-00012","user-00013","user-00014","user-00015","user-00016","user-00017","user-00018","user-00019","user-00020"]},"id":"s1"}`)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		var env Envelope
		if err := StrictJSON(msg, &env); err != nil {
			b.Fatal(err)
		}
		var p userList
		if err := StrictJSON(env.Payload, &p); err != nil {
			b.Fatal(err)
		}
	}
}

// userList is a payload with a hand decoder, as a module declares one.
type userList struct {
	Users []string `json:"users"`
}

func (u *userList) DecodeStrict(data []byte) bool {
	users, ok := DecodeStrictStrings(data, "users")
	if ok {
		u.Users = users
	}
	return ok
}

// A hand decoder agrees with the token walk on every document: where it
// decodes, the walk accepts and decodes the same value; where the walk
// refuses, it gives up.
func checkHandDecoder[T any, PT interface {
	*T
	StrictDecoder
}](t *testing.T, doc []byte) {
	var hand, slow T
	if !json.Valid(doc) {
		return
	}
	handOK := PT(&hand).DecodeStrict(doc)
	errSlow := strictSlow(doc, &slow)
	if !handOK {
		var zero T
		require.Equal(t, zero, hand, "%s: a hand decoder that gives up leaves the value untouched", doc)
		return
	}
	require.NoError(t, errSlow, "%s: decoded by hand, refused by the walk", doc)
	require.Equal(t, slow, hand, "%s", doc)
}

var handDecoderDocs = []string{
	`{"v":1,"event":"presence:update","payload":{"status":"busy"},"id":"u1"}`,
	` { "v" : 1 , "event" : "a" , "payload" : [ 1 , 2 ] , "ts" : -12 , "correlationId" : "c" } `,
	`{}`, `{"v":1}`, `{"v":1,"v":1}`, `{"V":1}`, `{"v":1.0}`, `{"v":1e0}`, `{"v":"1"}`, `{"v":null}`,
	`{"v":1234567890123456789012}`, `{"v":-0}`, `{"event":"a\"b"}`, `{"event":"\u00e9"}`, `{"event":"é"}`,
	"{\"event\":\"\xff\"}", `{"event":null}`, `{"event":1}`, `{"payload":null}`, `{"payload":"x"}`,
	`{"payload":{"a":1,"a":2}}`, `{"payload":{"k\u0061":1}}`, `{"payload":{"a":[{"b":{}}]}}`,
	`{"extra":1}`, `{"id":"x","id":"y"}`, `{"ev\u0065nt":"a"}`, `[1]`, `null`, `"s"`, `1`,
	`{"users":["a","b"]}`, `{"users":[]}`, `{ "users" : [ "a" , "b" ] }`, `{"users":null}`,
	`{"users":["a",1]}`, `{"users":["a",null]}`, `{"users":[["a"]]}`, `{"users":["a\nb"]}`,
	`{"users":["a\\b"]}`, `{"users":["é"]}`, "{\"users\":[\"\xc3\"]}", `{"users":["a"],"users":["b"]}`,
	`{"Users":["a"]}`, `{"users":["a"],"x":1}`, `{"users":"a"}`, `{"users":{}}`, `{"users":[{}]}`,
}

func TestHandDecodersAgreeWithTheTokenWalk(t *testing.T) {
	t.Parallel()
	for _, doc := range handDecoderDocs {
		checkHandDecoder[Envelope](t, []byte(doc))
		checkHandDecoder[userList](t, []byte(doc))
	}
	var env Envelope
	require.True(t, env.DecodeStrict([]byte(handDecoderDocs[0])), "the usual frame takes the hand path")
	var users userList
	require.True(t, users.DecodeStrict([]byte(`{"users":["a","b"]}`)), "the usual list takes the hand path")
	require.True(t, users.DecodeStrict([]byte(`{"users":[]}`)))
	require.NotNil(t, users.Users, "an empty list is not a missing one")
}

func FuzzHandDecoders(f *testing.F) {
	for _, doc := range handDecoderDocs {
		f.Add([]byte(doc))
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		checkHandDecoder[Envelope](t, doc)
		checkHandDecoder[userList](t, doc)
	})
}
