package presence

import (
	"bytes"
	"sync"
	"time"

	"github.com/gorilla/websocket"
	"github.com/valyala/fastjson"

	"github.com/presenced/presenced/presence"
)

type loadFrame struct {
	Event         string
	CorrelationID string
	Payload       struct {
		Users  []presence.Status
		Resync bool
		Code   string
	}
}

// Frame read buffers and parsers are shared by all connections: one of
// each per connection grew from empty on every new connection, and that
// growth was a quarter of this process's CPU during a burst of connects.
var (
	frameBufs    = sync.Pool{New: func() any { return new(bytes.Buffer) }}
	frameParsers fastjson.ParserPool
)

// readFrame reads and decodes a connection's next frame. at is when the
// frame was read, before it was decoded into f: with 20 deliveries of one
// change arriving together, each decode delays the reading of the next
// (encoding/json's reflection was over a third of this process's CPU, and
// a third more latency on every measured receipt). decoded is false for a
// frame that is not the JSON the load generator reads (f is then not to
// be used).
func readFrame(ws *websocket.Conn, f *loadFrame) (at time.Time, decoded bool, err error) {
	_, r, err := ws.NextReader()
	if err != nil {
		return time.Time{}, false, err
	}
	buf := frameBufs.Get().(*bytes.Buffer)
	defer frameBufs.Put(buf)
	buf.Reset()
	if _, err := buf.ReadFrom(r); err != nil {
		return time.Time{}, false, err
	}
	at = time.Now()
	return at, decodeFrame(buf.Bytes(), f) == nil, nil
}

// decodeFrame fills f from msg, keeping f's slice of users for reuse.
func decodeFrame(msg []byte, f *loadFrame) error {
	p := frameParsers.Get()
	defer frameParsers.Put(p)
	v, err := p.ParseBytes(msg)
	if err != nil {
		return err
	}
	users := f.Payload.Users[:0]
	*f = loadFrame{Event: string(v.GetStringBytes("event")), CorrelationID: string(v.GetStringBytes("correlationId"))}
	pl := v.Get("payload")
	if pl == nil {
		f.Payload.Users = users
		return nil
	}
	f.Payload.Resync = pl.GetBool("resync")
	f.Payload.Code = string(pl.GetStringBytes("code"))
	for _, u := range pl.GetArray("users") {
		users = append(users, presence.Status{
			User:   string(u.GetStringBytes("user")),
			Status: string(u.GetStringBytes("status")),
			Since:  u.GetInt64("since"),
			V:      u.GetInt64("v"),
		})
	}
	f.Payload.Users = users
	return nil
}
