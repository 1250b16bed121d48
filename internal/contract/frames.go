package contract

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
)

// socketRoute is one WebSocket route and how to open it.
type socketRoute struct {
	channel string // its channel in docs/asyncapi.yaml
	path    func(fx *fixtures) string
	// token: the route needs a user token (sent as ?token=).
	token bool
}

var socketRoutes = []socketRoute{
	{"presence", func(*fixtures) string { return "/v1/presence/ws" }, true},
	{"viewersSocket", func(*fixtures) string { return "/v1/viewers/ws" }, false},
	// The quiet event's room admits nobody: its sockets stay in line.
	{"waitingroom", func(*fixtures) string { return "/v1/waitingroom/cf-quiet/ws" }, true},
	{"seatMapLiveSocket", func(fx *fixtures) string { return "/v1/events/" + fx.events[0] + "/live" }, false},
}

// frame is one thing a client sends on a socket: a message (text or
// binary) or raw bytes (a frame gorilla would never write).
type frame struct {
	what   string
	text   []byte
	binary bool
	raw    []byte
}

// frameGen draws frames for a channel.
type frameGen struct {
	rng      *rand.Rand
	fx       *fixtures
	received map[string]map[string]any // the channel's client messages
	maxBytes int                       // realtime.max_message_bytes
}

func (g *frameGen) next() frame {
	names := slices.Sorted(maps.Keys(g.received))
	valid := func() []byte {
		if len(names) == 0 {
			return []byte(`{"v":1,"event":"nothing"}`)
		}
		name := names[g.rng.IntN(len(names))]
		return marshal(g.value(g.received[name], "", 0))
	}
	switch n := g.rng.IntN(100); {
	case n < 35:
		return frame{what: "valid", text: valid()}
	case n < 60:
		return g.hostileMessage(valid())
	case n < 75:
		return g.hostileText()
	default:
		return g.hostileFrame()
	}
}

// hostileMessage breaks one thing in a valid envelope.
func (g *frameGen) hostileMessage(valid []byte) frame {
	var env map[string]any
	_ = json.Unmarshal(valid, &env)
	edits := []struct {
		what string
		do   func() []byte
	}{
		{"v 2", func() []byte { env["v"] = 2; return mustJSON(env) }},
		{"v a string", func() []byte { env["v"] = "1"; return mustJSON(env) }},
		{"no v", func() []byte { delete(env, "v"); return mustJSON(env) }},
		{"an unknown event", func() []byte {
			env["event"] = "nope:" + hostileStrings[g.rng.IntN(len(hostileStrings))]
			return mustJSON(env)
		}},
		{"event a number", func() []byte { env["event"] = 7; return mustJSON(env) }},
		{"payload a string", func() []byte { env["payload"] = "x"; return mustJSON(env) }},
		{"payload null", func() []byte { env["payload"] = nil; return mustJSON(env) }},
		{"payload with an unknown field", func() []byte {
			p, _ := env["payload"].(map[string]any)
			if p == nil {
				p = map[string]any{}
			}
			p["extra"] = true
			env["payload"] = p
			return mustJSON(env)
		}},
		{"a field of the envelope twice", func() []byte { return append(bytes.TrimSuffix(valid, []byte("}")), []byte(`,"v":1}`)...) }},
		{"an unknown envelope field", func() []byte { env["extra"] = 1; return mustJSON(env) }},
		{"id a number", func() []byte { env["id"] = 5; return mustJSON(env) }},
		{"id of 4000 bytes", func() []byte { env["id"] = strings.Repeat("i", 4000); return mustJSON(env) }},
		{"id hostile", func() []byte { env["id"] = hostileStrings[g.rng.IntN(len(hostileStrings))]; return mustJSON(env) }},
		{"many users", func() []byte {
			users := make([]any, 2000)
			for i := range users {
				users[i] = fmt.Sprintf("u%d", i)
			}
			env["payload"] = map[string]any{"users": users, "hotels": users[:300]}
			return mustJSON(env)
		}},
		{"an invalid user id", func() []byte {
			env["payload"] = map[string]any{"users": []any{"a b", "", "{x}", strings.Repeat("u", 200)}, "hotels": []any{"a b", ""}}
			return mustJSON(env)
		}},
		{"the payload nested", func() []byte {
			return []byte(`{"v":1,"event":"` + fmt.Sprint(env["event"]) + `","payload":` + strings.Repeat("[", 40) + strings.Repeat("]", 40) + `}`)
		}},
		{"a field miscased", func() []byte { return bytes.Replace(valid, []byte(`"event"`), []byte(`"Event"`), 1) }},
	}
	e := edits[g.rng.IntN(len(edits))]
	return frame{what: "message: " + e.what, text: e.do()}
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// hostileText is a text message that is no envelope at all.
func (g *frameGen) hostileText() frame {
	max := g.maxBytes
	texts := []struct {
		what string
		text []byte
	}{
		{"empty", nil},
		{"not JSON", []byte("hello")},
		{"cut short", []byte(`{"v":1,"event":`)},
		{"null", []byte("null")},
		{"an array", []byte("[]")},
		{"trailing data", []byte(`{"v":1,"event":"session:ping"}{}`)},
		{"not UTF-8", []byte("{\"v\":1,\"event\":\"\xff\"}")},
		{"a frame of [", []byte(strings.Repeat("[", max))},
		{`a frame of {"a":`, []byte(strings.Repeat(`{"a":`, max/5))},
		{"33 levels", []byte(strings.Repeat("[", 33) + strings.Repeat("]", 33))},
		{"over the frame limit", []byte(strings.Repeat(" ", max+1))},
		{"a number past float64", []byte(`{"v":1e400,"event":"x"}`)},
	}
	t := texts[g.rng.IntN(len(texts))]
	f := frame{what: "text: " + t.what, text: t.text}
	if g.rng.IntN(5) == 0 {
		f.binary, f.what = true, "binary: "+t.what
	}
	return f
}

// hostileFrame is a frame no conforming client sends.
func (g *frameGen) hostileFrame() frame {
	ping := bytes.Repeat([]byte("p"), 125)
	frames := []struct {
		what string
		raw  []byte
	}{
		{"unmasked", wsFrame(true, 0, 1, []byte(`{"v":1,"event":"session:ping"}`), false)},
		{"reserved bits", wsFrame(true, 4, 1, []byte(`{}`), true)},
		{"opcode 3", wsFrame(true, 0, 3, []byte(`{}`), true)},
		{"opcode 11", wsFrame(true, 0, 11, nil, true)},
		{"a ping of 125 bytes", wsFrame(true, 0, 9, ping, true)},
		{"a ping of 126 bytes", wsFrame(true, 0, 9, append(ping, 'p'), true)},
		{"a fragmented ping", wsFrame(false, 0, 9, []byte("p"), true)},
		{"a continuation first", wsFrame(true, 0, 0, []byte("x"), true)},
		{"a text frame left open, then another", append(wsFrame(false, 0, 1, []byte(`{"v":`), true), wsFrame(true, 0, 1, []byte(`1}`), true)...)},
		{"a message in three fragments", append(append(wsFrame(false, 0, 1, []byte(`{"v":1,`), true), wsFrame(false, 0, 0, []byte(`"event":"queue:`), true)...), wsFrame(true, 0, 0, []byte(`ping"}`), true)...)},
		{"a close with code 999", wsFrame(true, 0, 8, []byte{0x03, 0xe7}, true)},
		{"a close with code 1005", wsFrame(true, 0, 8, []byte{0x03, 0xed}, true)},
		{"a close with code 4321", wsFrame(true, 0, 8, []byte{0x10, 0xe1, 'b', 'y', 'e'}, true)},
		{"a close of one byte", wsFrame(true, 0, 8, []byte{0x03}, true)},
		{"a close with a reason not UTF-8", wsFrame(true, 0, 8, []byte{0x03, 0xe8, 0xff}, true)},
		{"a length of 2^63", append([]byte{0x81, 0xff, 0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, 1, 2, 3, 4)},
		{"a length in 64 bits for 5 bytes", wsFrame64(1, []byte("hello"))},
		{"a pong", wsFrame(true, 0, 10, []byte("unasked"), true)},
		{"a flood of pings", bytes.Repeat(wsFrame(true, 0, 9, nil, true), 200)},
	}
	f := frames[g.rng.IntN(len(frames))]
	return frame{what: "frame: " + f.what, raw: f.raw}
}

// wsFrame writes one frame as RFC 6455 lays it out (masked with a fixed
// key when masked).
func wsFrame(fin bool, rsv, op byte, payload []byte, masked bool) []byte {
	var b bytes.Buffer
	b0 := rsv<<4 | op&0x0f
	if fin {
		b0 |= 0x80
	}
	b.WriteByte(b0)
	var m byte
	if masked {
		m = 0x80
	}
	switch n := len(payload); {
	case n < 126:
		b.WriteByte(m | byte(n))
	case n < 1<<16:
		b.WriteByte(m | 126)
		_ = binary.Write(&b, binary.BigEndian, uint16(n))
	default:
		b.WriteByte(m | 127)
		_ = binary.Write(&b, binary.BigEndian, uint64(n))
	}
	if !masked {
		b.Write(payload)
		return b.Bytes()
	}
	key := []byte{0x12, 0x34, 0x56, 0x78}
	b.Write(key)
	for i, c := range payload {
		b.WriteByte(c ^ key[i%4])
	}
	return b.Bytes()
}

// wsFrame64 is a masked frame whose short length is sent in the 64-bit
// form (RFC 6455 asks for the shortest).
func wsFrame64(op byte, payload []byte) []byte {
	b := []byte{0x80 | op, 0x80 | 127}
	b = binary.BigEndian.AppendUint64(b, uint64(len(payload)))
	key := []byte{1, 2, 3, 4}
	b = append(b, key...)
	for i, c := range payload {
		b = append(b, c^key[i%4])
	}
	return b
}

// value draws a value of a JSON Schema (as docs/asyncapi.yaml decodes:
// allOf, const, enum, type, properties, items).
func (g *frameGen) value(s map[string]any, name string, depth int) any {
	switch name {
	case "users":
		ids := g.fx.userIDs()
		return []any{ids[g.rng.IntN(len(ids))], ids[g.rng.IntN(len(ids))]}
	case "hotels":
		return []any{g.fx.hotels[0]}
	case "user":
		return g.fx.userIDs()[g.rng.IntN(len(g.fx.users))]
	case "status":
		return []any{"busy", "online", "idle", nil, "away"}[g.rng.IntN(5)]
	}
	if all, ok := s["allOf"].([]any); ok {
		merged := map[string]any{"type": "object"}
		props := map[string]any{}
		var required []any
		for _, part := range all {
			pm, _ := part.(map[string]any)
			if p, ok := pm["properties"].(map[string]any); ok {
				for k, v := range p {
					props[k] = v // later parts narrow earlier ones
				}
			}
			if r, ok := pm["required"].([]any); ok {
				required = append(required, r...)
			}
		}
		merged["properties"], merged["required"] = props, required
		return g.value(merged, name, depth)
	}
	if c, ok := s["const"]; ok {
		return c
	}
	if e, ok := s["enum"].([]any); ok && len(e) > 0 {
		return e[g.rng.IntN(len(e))]
	}
	typ := s["type"]
	if list, ok := typ.([]any); ok && len(list) > 0 {
		typ = list[g.rng.IntN(len(list))]
	}
	if typ == nil && s["properties"] != nil {
		typ = "object"
	}
	switch typ {
	case "object":
		props, _ := s["properties"].(map[string]any)
		required, _ := s["required"].([]any)
		var o object
		for _, k := range slices.Sorted(maps.Keys(props)) {
			ps, _ := props[k].(map[string]any)
			if !slices.Contains(required, any(k)) && (depth > 2 || g.rng.IntN(2) == 0) {
				continue
			}
			o = append(o, member{k, g.value(ps, k, depth+1)})
		}
		return o
	case "array":
		items, _ := s["items"].(map[string]any)
		out := make([]any, 1+g.rng.IntN(3))
		for i := range out {
			out[i] = g.value(items, "", depth+1)
		}
		return out
	case "integer":
		return int64(g.rng.IntN(10000))
	case "number":
		return float64(g.rng.IntN(1000)) / 7
	case "boolean":
		return g.rng.IntN(2) == 0
	case "null":
		return nil
	}
	return "s" + fmt.Sprint(g.rng.IntN(1000))
}
