package web

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

type strictInner struct {
	ID   string `json:"id"`
	Rows int    `json:"rows"`
}

type strictBody struct {
	Seats    []int64         `json:"seats"`
	Promo    string          `json:"promoCode,omitempty"`
	At       *time.Time      `json:"at,omitempty"`
	Raw      json.RawMessage `json:"raw,omitempty"`
	Sections []strictInner   `json:"sections"`
	Labels   map[string]int  `json:"labels"`
	Nested   *strictInner    `json:"nested"`
	Any      map[string]any  `json:"any"`
	Skip     string          `json:"-"`
}

// encoding/json matches "Seats" to "seats"; a request must be read as sent.
func TestStrictJSONRefusesWhatEncodingJSONForgives(t *testing.T) {
	t.Parallel()
	for name, body := range map[string]string{
		"case of a field":       `{"Seats":[1]}`,
		"case inside an array":  `{"sections":[{"ID":"A"}]}`,
		"case inside a pointer": `{"nested":{"Rows":1}}`,
		"unknown field":         `{"seats":[1],"extra":1}`,
		"field given twice":     `{"seats":[1],"seats":[2]}`,
		"a second value":        `{"seats":[1]} {}`,
		"trailing garbage":      `{"seats":[1]}x`,
		"a dash-tagged field":   `{"Skip":"x"}`,
		"not an object":         `[1]`,
		"truncated":             `{"seats":[1`,
	} {
		var v strictBody
		require.Errorf(t, StrictJSON([]byte(body), &v), "%s: %s", name, body)
	}
	// What encoding/json itself does with the first: it accepts it.
	var lax strictBody
	require.NoError(t, json.Unmarshal([]byte(`{"Seats":[1]}`), &lax))
	require.Equal(t, []int64{1}, lax.Seats)
}

func TestStrictJSONAcceptsExactBodies(t *testing.T) {
	t.Parallel()
	var v strictBody
	require.NoError(t, StrictJSON([]byte(`{"seats":[1,2],"promoCode":"X","at":"2030-01-01T00:00:00Z",
		"raw":{"Anything":[1,{"Goes":2}]},"sections":[{"id":"A","rows":2}],"labels":{"Free":1},
		"nested":{"id":"n"},"any":{"K":{"k":1}}}`), &v))
	require.Equal(t, []int64{1, 2}, v.Seats)
	require.Equal(t, "A", v.Sections[0].ID)
	require.Equal(t, 1, v.Labels["Free"])
	require.Equal(t, "n", v.Nested.ID)
}
