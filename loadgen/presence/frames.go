package presence

import (
	"bytes"

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

// frameReader reads and decodes one connection's frames into reused
// memory. The load generator takes a receipt's time before decoding, but
// with 20 deliveries of one change arriving together, each decode delays
// the reading of the next: encoding/json's reflection was over a third of
// this process's CPU, and a third more latency on every measured receipt.
type frameReader struct {
	ws  *websocket.Conn
	buf bytes.Buffer
	p   fastjson.Parser
}

// next reads the next data frame.
func (fr *frameReader) next() ([]byte, error) {
	_, r, err := fr.ws.NextReader()
	if err != nil {
		return nil, err
	}
	fr.buf.Reset()
	if _, err := fr.buf.ReadFrom(r); err != nil {
		return nil, err
	}
	return fr.buf.Bytes(), nil
}

// decode fills f from msg, keeping f's slice of users for reuse.
func (fr *frameReader) decode(msg []byte, f *loadFrame) error {
	v, err := fr.p.ParseBytes(msg)
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
