package presence

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/presence"
)

// The load generator's decoder reads what encoding/json reads from every
// kind of frame it meets, escapes included, and reuses nothing stale.
func TestFrameDecoderAgreesWithEncodingJSON(t *testing.T) {
	frames := []string{
		`{"event":"presence:updated","payload":{"users":[{"user":"lg-1","status":"busy","since":1796154578763,"lastActiveAt":1796154578000,"v":7}]}}`,
		`{"event":"presence:updated","correlationId":"c12","payload":{"users":[{"user":"lg-2","status":"away","since":5,"v":1}]}}`,
		`{"event":"presence:updated","payload":{"resync":true,"users":[{"user":"a\"b\\u00e9","status":"online","v":3},{"user":"x","status":"offline","v":0}]}}`,
		`{"event":"presence:updated","payload":{"users":[]}}`,
		`{"event":"error","correlationId":"s","payload":{"code":"too_many_subscriptions","message":"no"}}`,
		`{"event":"session:pong"}`,
	}
	type mirror struct {
		Event         string `json:"event"`
		CorrelationID string `json:"correlationId"`
		Payload       struct {
			Users  []presence.Status `json:"users"`
			Resync bool              `json:"resync"`
			Code   string            `json:"code"`
		} `json:"payload"`
	}
	var got loadFrame
	for _, in := range frames {
		var want mirror
		require.NoError(t, json.Unmarshal([]byte(in), &want))
		require.NoError(t, decodeFrame([]byte(in), &got), in)
		require.Equal(t, want.Event, got.Event, in)
		require.Equal(t, want.CorrelationID, got.CorrelationID, in)
		require.Equal(t, want.Payload.Resync, got.Payload.Resync, in)
		require.Equal(t, want.Payload.Code, got.Payload.Code, in)
		require.Len(t, got.Payload.Users, len(want.Payload.Users), in)
		for i, w := range want.Payload.Users {
			g := got.Payload.Users[i]
			require.Equal(t, [4]any{w.User, w.Status, w.Since, w.V}, [4]any{g.User, g.Status, g.Since, g.V}, in)
		}
	}
	require.Error(t, decodeFrame([]byte(`{"event":`), &got))
}
