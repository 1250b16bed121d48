package contract

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/internal/spectest"
)

// socketTally counts a socket run.
type socketTally struct {
	mu       sync.Mutex
	sessions int
	sent     int
	received map[string]int // by event (or type)
	closes   map[int]int    // by close code; 1006: closed without a close frame
	problems []string
}

func (s *socketTally) problem(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.problems) < maxFailures {
		s.problems = append(s.problems, fmt.Sprintf(format, args...))
	}
}

// Every WebSocket route, sent valid and hostile frames: every frame the
// server sends is a message its channel documents, every close code is in
// the channel's x-close-codes, and the server lives on.
func testSockets(t *testing.T, s *server) {
	tl := &socketTally{received: map[string]int{}, closes: map[int]int{}}
	host := strings.TrimPrefix(s.base, "http://")
	var wg sync.WaitGroup
	sessions := make(chan int)
	for range *flagWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := range sessions {
				socketSession(t, host, s.fx, n, tl)
			}
		}()
	}
	for n := range *flagSockets {
		sessions <- n
	}
	close(sessions)
	wg.Wait()
	var closes []string
	for _, c := range slices.Sorted(maps.Keys(tl.closes)) {
		closes = append(closes, fmt.Sprintf("%d×%d", c, tl.closes[c]))
	}
	var got []string
	for _, e := range slices.Sorted(maps.Keys(tl.received)) {
		got = append(got, fmt.Sprintf("%s×%d", e, tl.received[e]))
	}
	t.Logf("contract: %d WebSocket sessions over %d routes, %d frames sent; received %s; closes %s; %d problems",
		tl.sessions, len(socketRoutes), tl.sent, strings.Join(got, " "), strings.Join(closes, " "), len(tl.problems))
	for _, p := range tl.problems {
		t.Error(p)
	}
}

// framesPerSession are the frames one session sends.
const framesPerSession = 6

func socketSession(t *testing.T, host string, fx *fixtures, n int, tl *socketTally) {
	rng := rand.New(rand.NewPCG(*flagSeed, uint64(1<<32+n)))
	route := socketRoutes[n%len(socketRoutes)]
	path := route.path(fx)
	ch, err := spectest.AsyncChannel("websocket", path)
	require.NoError(t, err)
	u := url.URL{Scheme: "ws", Host: host, Path: path}
	user := fx.users[rng.IntN(len(fx.users))]
	if route.token {
		u.RawQuery = "token=" + url.QueryEscape(user.token)
	}
	d := websocket.Dialer{HandshakeTimeout: 5 * time.Second}
	conn, resp, err := d.Dial(u.String(), nil)
	if err != nil {
		status := 0
		if resp != nil {
			status = resp.StatusCode
		}
		tl.problem("session %d (%s): the handshake failed: %v (status %d)", n, path, err, status)
		return
	}
	defer conn.Close()
	tl.mu.Lock()
	tl.sessions++
	tl.mu.Unlock()

	var log []string // what was sent, for the report
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			kind, data, err := conn.ReadMessage()
			if err != nil {
				code := 1006
				var ce *websocket.CloseError
				if errors.As(err, &ce) {
					code = ce.Code
				}
				tl.mu.Lock()
				tl.closes[code]++
				tl.mu.Unlock()
				if code != 1006 {
					if err := spectest.CloseProblem(path, code); err != nil {
						tl.problem("session %d (%s) after %s: %v", n, ch.Name, strings.Join(log, ", "), err)
					}
				}
				return
			}
			if kind != websocket.TextMessage {
				tl.problem("session %d (%s): a binary frame from the server", n, ch.Name)
				continue
			}
			if err := spectest.FrameProblem("websocket", path, "", data); err != nil {
				tl.problem("session %d (%s) after %s: %v", n, ch.Name, strings.Join(log, ", "), err)
			}
			tl.mu.Lock()
			tl.received[frameName(data)]++
			tl.mu.Unlock()
		}
	}()
	g := &frameGen{rng: rng, fx: fx, received: ch.Received, maxBytes: 4096}
	for range framesPerSession {
		f := g.next()
		log = append(log, f.what)
		_ = conn.SetWriteDeadline(time.Now().Add(2 * time.Second))
		switch {
		case f.raw != nil:
			_, err = conn.NetConn().Write(f.raw)
		case f.binary:
			err = conn.WriteMessage(websocket.BinaryMessage, f.text)
		default:
			err = conn.WriteMessage(websocket.TextMessage, f.text)
		}
		tl.mu.Lock()
		tl.sent++
		tl.mu.Unlock()
		if err != nil {
			break // the server closed: the reader says with what
		}
	}
	select {
	case <-done:
	case <-time.After(300 * time.Millisecond):
		_ = conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(time.Second))
		select {
		case <-done:
		case <-time.After(3 * time.Second):
			tl.problem("session %d (%s): no close answered ours within 3 s", n, ch.Name)
		}
	}
}

// frameName is a frame's event (envelopes) or type (seat-map frames).
func frameName(data []byte) string {
	var f struct{ Event, Type string }
	_ = json.Unmarshal(data, &f)
	if f.Event != "" {
		return f.Event
	}
	return f.Type
}
