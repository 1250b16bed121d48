package wire

import (
	"bytes"
	"encoding/json"
	"io"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/go-json-experiment/json/jsontext"
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

// Every decoder of a client's bytes costs time linear in their size and
// memory bounded whatever their shape: nesting is refused before the
// decoder descends. 30,000 levels once cost 979 MiB.
func TestStrictJSONRefusesDeepNestingCheaply(t *testing.T) {
	const size = 1 << 20
	for name, doc := range map[string][]byte{
		"arrays":          bytes.Repeat([]byte("["), size),
		"objects":         bytes.Repeat([]byte(`{"a":`), size/5),
		"arrays in a key": append([]byte(`{"seats":`), bytes.Repeat([]byte("["), size)...),
	} {
		var v strictBody
		err := StrictJSON(doc, &v)
		require.ErrorIs(t, err, ErrTooDeep, name)
		allocated := bytesAllocated(func() {
			var v strictBody
			_ = StrictJSON(doc, &v)
			var env Envelope
			_, _ = ParseEnvelope(doc)
			_ = DecodePayload(Envelope{Event: "x", Payload: doc}, &env)
		})
		require.Less(t, allocated, uint64(64<<10), "%s: %d bytes allocated", name, allocated)
	}
	// As deep as the limit is fine.
	var v any
	doc := strings.Repeat("[", MaxJSONDepth) + strings.Repeat("]", MaxJSONDepth)
	require.NoError(t, StrictJSON([]byte(doc), &v))
	doc = "[" + doc + "]"
	require.ErrorIs(t, StrictJSON([]byte(doc), &v), ErrTooDeep)
}

func bytesAllocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// Invalid UTF-8 is refused, not replaced: ["\xff","\xfe"] must not become
// one contact "\ufffd".
func TestStrictJSONRefusesInvalidUTF8(t *testing.T) {
	t.Parallel()
	for _, doc := range []string{"{\"promoCode\":\"\xff\"}", "{\"labels\":{\"\xfe\":1}}", "{\"any\":{\"k\":[\"a\xc3\"]}}"} {
		var v strictBody
		require.Error(t, StrictJSON([]byte(doc), &v), "%q", doc)
	}
	var v strictBody
	require.NoError(t, StrictJSON([]byte(`{"promoCode":"caf\u00e9 é"}`), &v))
	require.Equal(t, "café é", v.Promo)
}

// A frame on the WebSocket hot path costs little beyond its decoded value.
func TestStrictJSONAllocatesLittle(t *testing.T) {
	msg := []byte(`{"v":1,"event":"presence:update","payload":{"status":"busy"},"id":"u1"}`)
	allocs := testing.AllocsPerRun(100, func() {
		var env Envelope
		if err := StrictJSON(msg, &env); err != nil {
			t.Fatal(err)
		}
	})
	// The event, the id and the raw payload (4), and now and then the
	// decoder's state, which it keeps in a sync.Pool that may drop it (on
	// purpose, often, under the race detector).
	require.LessOrEqual(t, allocs, 8.0)
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

type userList struct {
	Users []string `json:"users"`
}

var depthDocs = []string{
	`[]`, `[[]]`, `[[[[[]]]]]`, `{"a":{"b":[{"c":[]}]}}`, `"[[[["`, `"\\"[[`, `"\\\""[`, `["]"]]]]`,
	`{"a":"}}}"}`, `[1,[2,[3]]`, `]]][[[`, `"`, `"\`, "[\"\xff[\"]", `{"\u005b":[[[]]]}`,
}

// CheckDepth sees the nesting the decoder sees: when it accepts a document
// at a limit, the decoder never goes deeper before its first refusal, and
// when the decoder reads a whole value within the limit, CheckDepth
// accepts it.
func checkDepthAgrees(t *testing.T, doc []byte, limit int) {
	dec := jsontext.NewDecoder(bytes.NewReader(doc), jsontext.AllowDuplicateNames(true))
	deepest, whole := 0, false
	for {
		if _, err := dec.ReadToken(); err != nil {
			whole = err == io.EOF
			break
		}
		deepest = max(deepest, dec.StackDepth())
	}
	err := CheckDepth(doc, limit)
	if err == nil && deepest > limit {
		t.Fatalf("%q: accepted at limit %d, the decoder went %d deep", doc, limit, deepest)
	}
	if err != nil && whole && deepest <= limit {
		t.Fatalf("%q: refused at limit %d (%v), a whole value only %d deep", doc, limit, err, deepest)
	}
}

func TestCheckDepthAgreesWithTheDecoder(t *testing.T) {
	t.Parallel()
	for _, doc := range depthDocs {
		for limit := range 6 {
			checkDepthAgrees(t, []byte(doc), limit)
		}
	}
}

func FuzzCheckDepth(f *testing.F) {
	for _, doc := range depthDocs {
		f.Add([]byte(doc), uint8(3))
	}
	f.Fuzz(func(t *testing.T, doc []byte, limit uint8) {
		checkDepthAgrees(t, doc, int(limit%8))
	})
}
