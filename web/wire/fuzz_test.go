package wire

import (
	"encoding/json"
	"testing"
)

// FuzzParseEnvelope: no frame a client sends panics the decoder, an
// accepted envelope is a valid one, and a payload decodes strictly or is
// refused as bad_payload. Seeds: testdata/fuzz/FuzzParseEnvelope.
func FuzzParseEnvelope(f *testing.F) {
	f.Add([]byte(`{"v":1,"event":"subscriptions:set","payload":{"users":["bob"]},"id":"s1"}`))
	f.Fuzz(func(t *testing.T, frame []byte) {
		env, perr := ParseEnvelope(frame)
		if perr != nil {
			if perr.Code == "" || len(env.ID) > 64 {
				t.Fatalf("refusal without a code or with an oversized id: %+v", perr)
			}
			return
		}
		if env.V != ProtocolVersion || env.Event == "" || len(env.ID) > 64 {
			t.Fatalf("accepted an invalid envelope: %+v", env)
		}
		var p struct {
			Users  []string        `json:"users"`
			Status json.RawMessage `json:"status"`
			Active *bool           `json:"active"`
		}
		if perr := DecodePayload(env, &p); perr != nil && perr.Code != CodeBadPayload {
			t.Fatalf("payload refusal with code %q", perr.Code)
		}
	})
}
