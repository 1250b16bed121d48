package faults_test

import (
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/websocket"
)

// pclient is one presence session kept up as a browser's presenced.js
// keeps it: on any close or refused upgrade it reconnects after a short
// backoff and subscribes again; it remembers the newest status of each
// user it follows.
type pclient struct {
	user, token string
	follows     []string
	base        func() string

	mu         sync.Mutex
	conn       *websocket.Conn
	statuses   map[string]pstatus
	connects   int
	away       bool // disconnected on purpose: no reconnect
	stop       chan struct{}
	done       chan struct{}
	stopOnce   sync.Once
	reconnectC chan struct{}
}

type pstatus struct {
	Status string `json:"status"`
	V      int64  `json:"v"`
}

func newPClient(user, token string, follows []string, base func() string) *pclient {
	c := &pclient{user: user, token: token, follows: follows, base: base, statuses: map[string]pstatus{},
		stop: make(chan struct{}), done: make(chan struct{}), reconnectC: make(chan struct{}, 1)}
	go c.run()
	return c
}

func (c *pclient) run() {
	defer close(c.done)
	for {
		select {
		case <-c.stop:
			return
		default:
		}
		c.mu.Lock()
		away := c.away
		c.mu.Unlock()
		if away {
			select {
			case <-c.stop:
				return
			case <-c.reconnectC:
				continue
			}
		}
		c.session()
		select {
		case <-c.stop:
			return
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// session runs one connection until it closes.
func (c *pclient) session() {
	hdr := http.Header{}
	hdr.Set("Authorization", "Bearer "+c.token)
	d := websocket.Dialer{HandshakeTimeout: 5 * time.Second}
	conn, resp, err := d.Dial("ws"+strings.TrimPrefix(c.base(), "http")+"/v1/presence/ws", hdr)
	if resp != nil && resp.Body != nil {
		resp.Body.Close()
	}
	if err != nil {
		return
	}
	c.mu.Lock()
	if c.away {
		c.mu.Unlock()
		conn.Close()
		return
	}
	c.conn = conn
	c.connects++
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		if c.conn == conn {
			c.conn = nil
		}
		c.mu.Unlock()
		conn.Close()
	}()
	if len(c.follows) > 0 {
		c.mu.Lock()
		err := conn.WriteJSON(map[string]any{"v": 1, "event": "subscriptions:set", "id": "s", "payload": map[string]any{"users": c.follows}})
		c.mu.Unlock()
		if err != nil {
			return
		}
	}
	for {
		_ = conn.SetReadDeadline(time.Now().Add(90 * time.Second))
		var f struct {
			Event   string `json:"event"`
			Payload struct {
				Users []struct {
					User string `json:"user"`
					pstatus
				} `json:"users"`
			} `json:"payload"`
		}
		if err := conn.ReadJSON(&f); err != nil {
			return
		}
		if f.Event != "presence:updated" {
			continue
		}
		c.mu.Lock()
		for _, u := range f.Payload.Users {
			if old, ok := c.statuses[u.User]; !ok || u.V >= old.V {
				c.statuses[u.User] = u.pstatus
			}
		}
		c.mu.Unlock()
	}
}

// sees tells whether this client's newest status of every user in want
// is the wanted one.
func (c *pclient) sees(want map[string]string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for u, s := range want {
		if c.statuses[u].Status != s {
			return false
		}
	}
	return true
}

func (c *pclient) view() map[string]pstatus {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]pstatus, len(c.statuses))
	for k, v := range c.statuses {
		out[k] = v
	}
	return out
}

// leave ends the session as a logout does (session:disconnect) and stays
// away until back.
func (c *pclient) leave() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.away = true
	if c.conn != nil {
		_ = c.conn.WriteJSON(map[string]any{"v": 1, "event": "session:disconnect"})
		_ = c.conn.Close()
	}
}

// back reconnects a client that left.
func (c *pclient) back() {
	c.mu.Lock()
	c.away = false
	c.mu.Unlock()
	select {
	case c.reconnectC <- struct{}{}:
	default:
	}
}

func (c *pclient) close() {
	c.stopOnce.Do(func() {
		close(c.stop)
		c.mu.Lock()
		if c.conn != nil {
			_ = c.conn.Close()
		}
		c.mu.Unlock()
		<-c.done
	})
}
