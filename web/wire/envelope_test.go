package wire

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseEnvelope(t *testing.T) {
	t.Parallel()
	env, perr := ParseEnvelope([]byte(`{"v":1,"event":"a:b","payload":{"x":1},"id":"r1"}`))
	require.Nil(t, perr)
	require.Equal(t, "a:b", env.Event)
	require.Equal(t, "r1", env.ID)
	var p struct {
		X int `json:"x"`
	}
	require.Nil(t, DecodePayload(env, &p))
	require.Equal(t, 1, p.X)
	var strict struct{ Y int }
	require.Equal(t, CodeBadPayload, DecodePayload(env, &strict).Code, "unknown field")
	var miscased struct{ X int }
	require.Equal(t, CodeBadPayload, DecodePayload(env, &miscased).Code, "field names are case-sensitive")

	for frame, code := range map[string]string{
		`{"v":1,`:                               CodeBadJSON,
		`{"v":1,"event":"a"} {}`:                CodeBadJSON,
		`[1]`:                                   CodeBadJSON,
		`{"v":2,"event":"a"}`:                   CodeUnsupportedVersion,
		`{"event":"a","id":"x"}`:                CodeUnsupportedVersion,
		`{"v":1,"id":"x"}`:                      CodeBadPayload,
		`{"V":1,"event":"a"}`:                   CodeBadJSON,
		`{"v":1,"event":"a","more":1,"id":"x"}`: CodeBadJSON,
	} {
		env, perr := ParseEnvelope([]byte(frame))
		require.NotNil(t, perr, frame)
		require.Equal(t, code, perr.Code, frame)
		if frame == `{"event":"a","id":"x"}` || frame == `{"v":1,"event":"a","more":1,"id":"x"}` {
			require.Equal(t, "x", env.ID, "the id survives to correlate the error")
		}
	}
	var out Envelope
	require.NoError(t, json.Unmarshal(ErrorFrame(CodeUnknownEvent, "no such event", "r7"), &out))
	require.Equal(t, "error", out.Event)
	require.Equal(t, "r7", out.CorrelationID)
	require.JSONEq(t, `{"code":"unknown_event","message":"no such event"}`, string(out.Payload))
}
