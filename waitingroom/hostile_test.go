package waitingroom

import (
	"errors"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/internal/testenv"
	"github.com/presenced/presenced/web/socket"
	"github.com/presenced/presenced/web/wire"
)

// queue:ping has no payload fields; a field sent anyway is a mistake the
// client hears about (bad_payload), as the protocol documents.
func TestPingRefusesUnknownPayloadFields(t *testing.T) {
	t.Parallel()
	s := newServer(t, setup(t, testenv.Redis(t), nil))
	s.openRoom(t, "ev", Settings{Paused: true})
	c, _, err := s.dialWS(t, "ev", "a")
	require.NoError(t, err)
	_, _, err = readFrame(t, c, 5*time.Second) // the first position
	require.NoError(t, err)
	// The answer to id, past the periodic position frames.
	answerTo := func(id string) (wire.Envelope, answer) {
		for {
			env, a, err := readFrame(t, c, 5*time.Second)
			require.NoError(t, err)
			if env.CorrelationID == id {
				return env, a
			}
		}
	}
	require.NoError(t, c.WriteMessage(websocket.TextMessage, []byte(`{"v":1,"event":"queue:ping","payload":{"eta":1},"id":"p1"}`)))
	env, a := answerTo("p1")
	require.Equal(t, "error", env.Event)
	require.Equal(t, wire.CodeBadPayload, a.Code)

	time.Sleep(1100 * time.Millisecond) // one frame a second
	require.NoError(t, c.WriteMessage(websocket.TextMessage, []byte(`{"v":1,"event":"queue:ping","payload":{},"id":"p2"}`)))
	env, _ = answerTo("p2")
	require.Equal(t, EventPosition, env.Event, "an empty payload is fine")
}

// One user may keep a few sockets per event (tabs, devices), not hundreds.
func TestSocketsPerUserAreCapped(t *testing.T) {
	t.Parallel()
	s := newServer(t, setup(t, testenv.Redis(t), nil))
	s.openRoom(t, "ev", Settings{Paused: true})
	limit := testConfig().MaxSocketsPerUser
	for i := 0; i < limit; i++ {
		c, _, err := s.dialWS(t, "ev", "greedy")
		require.NoError(t, err)
		env, _, err := readFrame(t, c, 5*time.Second)
		require.NoError(t, err)
		require.Equal(t, EventPosition, env.Event)
	}
	c, _, err := s.dialWS(t, "ev", "greedy")
	require.NoError(t, err)
	env, a, err := readFrame(t, c, 5*time.Second)
	require.NoError(t, err)
	require.Equal(t, "error", env.Event)
	require.Equal(t, wire.CodeLimitExceeded, a.Code)
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, _, err = c.ReadMessage()
	var ce *websocket.CloseError
	require.True(t, errors.As(err, &ce), "closed: %v", err)
	require.Equal(t, socket.ClosePolicy, ce.Code)

	other, _, err := s.dialWS(t, "ev", "someone-else")
	require.NoError(t, err)
	env, _, err = readFrame(t, other, 5*time.Second)
	require.NoError(t, err)
	require.Equal(t, EventPosition, env.Event, "other users are not affected")
}
