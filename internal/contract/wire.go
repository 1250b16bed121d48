package contract

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// request is one request as the bytes it puts on the wire: whatever the
// generator chose, including what net/http's client refuses to send
// (control bytes in a header, invalid UTF-8, a method with odd case, a
// length that lies).
type request struct {
	method string
	target string // the request-target as sent; may hold raw bytes
	header []field
	body   []byte

	chunked bool // send body as one chunk, with Transfer-Encoding: chunked
	// declared, when above len(body), is the Content-Length sent: the
	// server waits for bytes that never come (a slow body).
	declared int
	// noLength leaves out Content-Length even with a body.
	noLength bool
	// rawLength, when set, is the Content-Length value sent as is.
	rawLength string
	proto     string // "HTTP/1.1" unless set
	noHost    bool   // leave out the Host header
}

type field struct{ name, value string }

// lies tells a request whose framing leaves the connection in a state no
// next request should inherit: the server may still be reading a body
// the length promised.
func (r *request) lies() bool {
	if r.declared > len(r.body) || r.rawLength != "" || r.noLength || r.proto != "" || strings.ContainsAny(r.target, "\r\n") {
		return true
	}
	for _, f := range r.header {
		// A line break in a field ends the head early: what follows is
		// read as another request, whose answer no one should take for
		// the next one's.
		if strings.ContainsAny(f.name+f.value, "\r\n") {
			return true
		}
	}
	return false
}

func (r *request) get(name string) string {
	for _, f := range r.header {
		if strings.EqualFold(f.name, name) {
			return f.value
		}
	}
	return ""
}

func (r *request) set(name, value string) {
	r.del(name)
	r.header = append(r.header, field{name, value})
}

func (r *request) del(name string) {
	out := r.header[:0]
	for _, f := range r.header {
		if !strings.EqualFold(f.name, name) {
			out = append(out, f)
		}
	}
	r.header = out
}

// bytes is the request on the wire.
func (r *request) bytes(host string) []byte {
	var b bytes.Buffer
	proto := r.proto
	if proto == "" {
		proto = "HTTP/1.1"
	}
	fmt.Fprintf(&b, "%s %s %s\r\n", r.method, r.target, proto)
	if r.get("Host") == "" && !r.noHost {
		fmt.Fprintf(&b, "Host: %s\r\n", host)
	}
	for _, f := range r.header {
		fmt.Fprintf(&b, "%s: %s\r\n", f.name, f.value)
	}
	switch {
	case r.chunked:
		b.WriteString("Transfer-Encoding: chunked\r\n\r\n")
		if len(r.body) > 0 {
			fmt.Fprintf(&b, "%x\r\n", len(r.body))
			b.Write(r.body)
			b.WriteString("\r\n")
		}
		b.WriteString("0\r\n\r\n")
		return b.Bytes()
	case r.rawLength != "":
		fmt.Fprintf(&b, "Content-Length: %s\r\n", r.rawLength)
	case r.noLength:
	case r.declared > len(r.body):
		fmt.Fprintf(&b, "Content-Length: %d\r\n", r.declared)
	case len(r.body) > 0 || r.method == http.MethodPost || r.method == http.MethodPut:
		fmt.Fprintf(&b, "Content-Length: %d\r\n", len(r.body))
	}
	b.WriteString("\r\n")
	b.Write(r.body)
	return b.Bytes()
}

// answer is what came back.
type answer struct {
	status int
	header http.Header
	body   []byte
	// events are the SSE events read from a stream before it was left.
	events []sseEvent
	took   time.Duration
}

type sseEvent struct {
	name string
	data []byte
}

// wire is one keep-alive connection to the server.
type wire struct {
	addr string
	conn net.Conn
	br   *bufio.Reader
}

// maxAnswer bounds the answer body read (the largest documented answer,
// /openapi.json, is about 100 KB).
const maxAnswer = 8 << 20

// errNoAnswer is a connection closed without an answer.
var errNoAnswer = errors.New("the connection closed without an answer")

// do sends r and reads its answer, on the open connection or a new one.
// A connection that answered "Connection: close", or failed, is dropped.
func (w *wire) do(r *request, timeout time.Duration) (*answer, error) {
	if w.conn == nil {
		c, err := net.DialTimeout("tcp", w.addr, 5*time.Second)
		if err != nil {
			return nil, err
		}
		w.conn, w.br = c, bufio.NewReaderSize(c, 16<<10)
	}
	start := time.Now()
	_ = w.conn.SetDeadline(start.Add(timeout))
	ans, err := w.roundTrip(r)
	if err != nil || ans.header.Get("Connection") == "close" || r.lies() {
		w.close()
	}
	if ans != nil {
		ans.took = time.Since(start)
	}
	return ans, err
}

func (w *wire) roundTrip(r *request) (*answer, error) {
	if _, err := w.conn.Write(r.bytes(w.addr)); err != nil {
		// The server may refuse before the whole body is written (413);
		// its answer is still there to read.
		if _, perr := w.br.Peek(1); perr != nil {
			return nil, fmt.Errorf("write: %w", err)
		}
	}
	var resp *http.Response
	for {
		var err error
		resp, err = http.ReadResponse(w.br, &http.Request{Method: r.method})
		if err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				return nil, errNoAnswer
			}
			return nil, err
		}
		// 100 Continue comes before the answer.
		if resp.StatusCode >= 200 || resp.StatusCode == http.StatusSwitchingProtocols {
			break
		}
	}
	defer resp.Body.Close()
	ans := &answer{status: resp.StatusCode, header: resp.Header}
	switch {
	case resp.StatusCode == http.StatusSwitchingProtocols:
		w.close()
	case strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream"):
		// A stream does not end: read what comes for a moment, then leave.
		_ = w.conn.SetReadDeadline(time.Now().Add(150 * time.Millisecond))
		raw, _ := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
		ans.events = parseSSE(raw)
		w.close()
	default:
		var err error
		ans.body, err = io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
		if err != nil {
			return ans, fmt.Errorf("read the answer's body: %w", err)
		}
		if resp.Close {
			w.close()
		}
	}
	return ans, nil
}

func (w *wire) close() {
	if w.conn != nil {
		_ = w.conn.Close()
		w.conn, w.br = nil, nil
	}
}

// parseSSE splits a stream's bytes into its complete events.
func parseSSE(raw []byte) []sseEvent {
	var out []sseEvent
	for {
		i := bytes.Index(raw, []byte("\n\n"))
		if i < 0 {
			return out
		}
		block := raw[:i]
		raw = raw[i+2:]
		var ev sseEvent
		var data [][]byte
		for _, line := range bytes.Split(block, []byte("\n")) {
			switch {
			case bytes.HasPrefix(line, []byte("event:")):
				ev.name = strings.TrimSpace(string(line[len("event:"):]))
			case bytes.HasPrefix(line, []byte("data:")):
				data = append(data, bytes.TrimPrefix(line[len("data:"):], []byte(" ")))
			}
		}
		if data == nil {
			continue // a comment or a retry: line
		}
		if ev.name == "" {
			ev.name = "message"
		}
		ev.data = bytes.Join(data, []byte("\n"))
		out = append(out, ev)
	}
}

// statusLine names an answer for a report.
func statusLine(a *answer) string {
	if a == nil {
		return "no answer"
	}
	return strconv.Itoa(a.status) + " " + http.StatusText(a.status)
}
