package spectest

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"gopkg.in/yaml.v3"
)

// asyncDoc is docs/asyncapi.yaml reduced to what frame checks need: per
// channel, its address, its transport and the payload schemas of the
// messages the server sends.
type asyncDoc struct {
	channels []*channel
}

type channel struct {
	name       string
	transport  string // "websocket" or "sse"
	address    *regexp.Regexp
	closeCodes []int
	// sent are the messages the server sends, by message name.
	sent map[string]*jsonschema.Schema
	// received are the messages clients send: their payload schemas with
	// every $ref inlined, by message name.
	received map[string]map[string]any
}

const asyncURL = "mem:///asyncapi.json"

func loadAsyncAPI(data []byte) (*asyncDoc, error) {
	var raw any
	if err := yaml.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("docs/asyncapi.yaml: %w", err)
	}
	js, err := json.Marshal(raw)
	if err != nil {
		return nil, fmt.Errorf("docs/asyncapi.yaml: %w", err)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(js))
	if err != nil {
		return nil, fmt.Errorf("docs/asyncapi.yaml: %w", err)
	}
	comp := jsonschema.NewCompiler()
	comp.DefaultDraft(jsonschema.Draft7) // AsyncAPI's schema format is a draft-07 superset
	if err := comp.AddResource(asyncURL, doc); err != nil {
		return nil, fmt.Errorf("docs/asyncapi.yaml: %w", err)
	}
	root, _ := doc.(map[string]any)
	out := &asyncDoc{}
	channels, _ := root["channels"].(map[string]any)
	for name, c := range channels {
		cm, _ := c.(map[string]any)
		addr, _ := cm["address"].(string)
		ch := &channel{name: name, transport: "sse", address: addressPattern(addr),
			sent: map[string]*jsonschema.Schema{}, received: map[string]map[string]any{}}
		if b, ok := cm["bindings"].(map[string]any); ok && b["ws"] != nil {
			ch.transport = "websocket"
		}
		if codes, ok := cm["x-close-codes"].([]any); ok {
			for _, c := range codes {
				if n, ok := c.(json.Number); ok {
					v, _ := n.Int64()
					ch.closeCodes = append(ch.closeCodes, int(v))
				}
			}
		}
		out.channels = append(out.channels, ch)
	}
	ops, _ := root["operations"].(map[string]any)
	for opName, o := range ops {
		om, _ := o.(map[string]any)
		chRef, _ := om["channel"].(map[string]any)
		ref, _ := chRef["$ref"].(string)
		ch := out.byRef(ref)
		if ch == nil {
			return nil, fmt.Errorf("docs/asyncapi.yaml: operation %s: no channel %s", opName, ref)
		}
		msgs, _ := om["messages"].([]any)
		for _, m := range msgs {
			mref, _ := m.(map[string]any)["$ref"].(string)
			ptr, msg, err := resolve(root, mref)
			if err != nil {
				return nil, fmt.Errorf("docs/asyncapi.yaml: operation %s: %w", opName, err)
			}
			name, _ := msg["name"].(string)
			if om["action"] != "send" {
				payload, err := inline(root, msg["payload"], 0)
				if err != nil {
					return nil, fmt.Errorf("docs/asyncapi.yaml: message %s: %w", name, err)
				}
				ch.received[name], _ = payload.(map[string]any)
				continue
			}
			sch, err := comp.Compile(asyncURL + "#" + ptr + "/payload")
			if err != nil {
				return nil, fmt.Errorf("docs/asyncapi.yaml: message %s: %w", name, err)
			}
			ch.sent[name] = sch
		}
	}
	return out, nil
}

func (d *asyncDoc) byRef(ref string) *channel {
	for _, c := range d.channels {
		if ref == "#/channels/"+c.name {
			return c
		}
	}
	return nil
}

// resolve follows $refs from ref to the object it names, returning its
// JSON pointer.
func resolve(root map[string]any, ref string) (string, map[string]any, error) {
	for i := 0; i < 8; i++ {
		ptr := strings.TrimPrefix(ref, "#")
		var cur any = root
		for _, tok := range strings.Split(strings.TrimPrefix(ptr, "/"), "/") {
			tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
			m, ok := cur.(map[string]any)
			if !ok {
				return "", nil, fmt.Errorf("bad reference %s", ref)
			}
			cur = m[tok]
		}
		obj, ok := cur.(map[string]any)
		if !ok {
			return "", nil, fmt.Errorf("bad reference %s", ref)
		}
		next, isRef := obj["$ref"].(string)
		if !isRef {
			return ptr, obj, nil
		}
		ref = next
	}
	return "", nil, fmt.Errorf("reference loop at %s", ref)
}

func addressPattern(addr string) *regexp.Regexp {
	q := regexp.QuoteMeta(addr)
	q = regexp.MustCompile(`\\\{[A-Za-z0-9_]+\\\}`).ReplaceAllString(q, `[^/]+`)
	return regexp.MustCompile("^" + q + "$")
}

// checker returns a function that validates one frame sent on the channel
// of transport and path, or reports that none is documented.
func (d *asyncDoc) checker(rec *recorder, transport, path string) func(event string, data []byte) {
	var ch *channel
	for _, c := range d.channels {
		if c.transport == transport && c.address.MatchString(path) {
			ch = c
		}
	}
	if ch == nil {
		rec.add("%s %s: no channel in docs/asyncapi.yaml", transport, path)
		return func(string, []byte) {}
	}
	return func(event string, data []byte) {
		var v any
		if err := json.Unmarshal(data, &v); err != nil {
			rec.add("%s %s: a frame that is not JSON: %s", ch.name, path, truncate(string(data), 200))
			return
		}
		inst, _ := jsonschema.UnmarshalJSON(bytes.NewReader(data))
		if event != "" { // SSE: the event names the message
			sch := ch.sent[event]
			if sch == nil {
				rec.add("%s: event %q not in docs/asyncapi.yaml", ch.name, event)
				return
			}
			if err := sch.Validate(inst); err != nil {
				rec.add("%s: event %s: %v\n  data: %s", ch.name, event, err, truncate(string(data), 400))
			}
			return
		}
		// WebSocket: one of the channel's messages must describe the frame.
		var errs []string
		names := make([]string, 0, len(ch.sent))
		for name := range ch.sent {
			names = append(names, name)
		}
		slices.Sort(names)
		for _, name := range names {
			err := ch.sent[name].Validate(inst)
			if err == nil {
				return
			}
			if frameNames(v, name) {
				errs = append(errs, name+": "+err.Error())
			}
		}
		rec.add("%s: a frame no message of docs/asyncapi.yaml describes: %s\n  frame: %s", ch.name, strings.Join(errs, "; "), truncate(string(data), 400))
	}
}

// frameNames tells whether a frame claims to be message name (its event or
// type field), so only that message's errors are reported.
func frameNames(v any, name string) bool {
	m, _ := v.(map[string]any)
	return m["event"] == name || m["type"] == name
}

func (d *asyncDoc) closeChecker(rec *recorder, path string) func(code int) {
	for _, c := range d.channels {
		if c.transport == "websocket" && c.address.MatchString(path) {
			return func(code int) {
				if !slices.Contains(c.closeCodes, code) {
					rec.add("%s: close code %d not in its x-close-codes", c.name, code)
				}
			}
		}
	}
	return func(int) {}
}

// sseParser splits an event stream into events.
type sseParser struct {
	buf   bytes.Buffer
	check func(event string, data []byte)
}

func (p *sseParser) write(b []byte) {
	p.buf.Write(b)
	for {
		all := p.buf.Bytes()
		i := bytes.Index(all, []byte("\n\n"))
		if i < 0 {
			return
		}
		block := string(all[:i])
		p.buf.Next(i + 2)
		var event string
		var data []string
		for _, line := range strings.Split(block, "\n") {
			switch {
			case strings.HasPrefix(line, "event:"):
				event = strings.TrimSpace(strings.TrimPrefix(line, "event:"))
			case strings.HasPrefix(line, "data:"):
				data = append(data, strings.TrimPrefix(strings.TrimPrefix(line, "data:"), " "))
			}
		}
		if data == nil {
			continue // a comment or a retry: line
		}
		if event == "" {
			event = "message"
		}
		p.check(event, []byte(strings.Join(data, "\n")))
	}
}

// Hijack hands the WebSocket library a connection whose server-sent
// frames are checked on their way out.
func (w *teeWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, brw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err != nil {
		return conn, brw, err
	}
	w.hijacked = true
	return &frameConn{Conn: conn, ws: &wsParser{
		check:      w.async.checker(w.rec, "websocket", w.path),
		checkClose: w.async.closeChecker(w.rec, w.path),
	}}, brw, nil
}

// frameConn parses what the server writes as WebSocket frames.
type frameConn struct {
	net.Conn
	ws *wsParser
}

func (c *frameConn) Write(p []byte) (int, error) {
	c.ws.write(p)
	return c.Conn.Write(p)
}

// wsParser follows the server's side of a WebSocket: the 101 answer, then
// frames (never masked, per RFC 6455), reassembling fragmented messages.
type wsParser struct {
	mu         sync.Mutex
	buf        bytes.Buffer
	upgraded   bool
	message    []byte
	text       bool
	check      func(event string, data []byte)
	checkClose func(code int)
}

func (p *wsParser) write(b []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.buf.Write(b)
	if !p.upgraded {
		i := bytes.Index(p.buf.Bytes(), []byte("\r\n\r\n"))
		if i < 0 {
			return
		}
		p.buf.Next(i + 4)
		p.upgraded = true
	}
	for {
		all := p.buf.Bytes()
		if len(all) < 2 {
			return
		}
		fin, op := all[0]&0x80 != 0, all[0]&0x0f
		n, hdr := uint64(all[1]&0x7f), 2
		switch n {
		case 126:
			if len(all) < 4 {
				return
			}
			n, hdr = uint64(binary.BigEndian.Uint16(all[2:])), 4
		case 127:
			if len(all) < 10 {
				return
			}
			n, hdr = binary.BigEndian.Uint64(all[2:]), 10
		}
		if uint64(len(all)-hdr) < n {
			return
		}
		payload := append([]byte(nil), all[hdr:hdr+int(n)]...)
		p.buf.Next(hdr + int(n))
		switch op {
		case 0x1, 0x2:
			p.message, p.text = payload, op == 0x1
		case 0x0:
			p.message = append(p.message, payload...)
		case 0x8:
			if len(payload) >= 2 {
				p.checkClose(int(binary.BigEndian.Uint16(payload)))
			}
			continue
		default:
			continue // ping, pong
		}
		if fin && p.text {
			p.check("", p.message)
			p.message = nil
		}
	}
}
