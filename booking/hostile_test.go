package booking

import (
	"encoding/json"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/internal/auth"
)

// Input that reached PostgreSQL and came back as a 500 is refused at the
// edge with a 4xx, and changes nothing.
func TestHostileInputIsA4xxNotA500(t *testing.T) {
	t.Parallel()
	b := setup(t)
	do := serveHTTP(t, b)
	admin := map[string]string{"X-API-Key": "admin-key"}
	id := "hostile-" + b.run[:len(b.run)-1]
	spec := func(name, section string) string {
		body, _ := json.Marshal(map[string]any{"id": id, "name": name, "currency": "EUR", "startsAt": "2030-01-01T20:00:00Z",
			"sections": []map[string]any{{"id": "A", "name": section, "rows": 1, "seatsPerRow": 4, "basePrice": 100}}})
		return string(body)
	}
	t.Run("names with NUL", func(t *testing.T) {
		code, _, body := do("POST", "/v1/admin/events", spec("bad\x00name", ""), admin)
		require.Equal(t, 422, code, "an event name with NUL: %s", body)
		code, _, body = do("POST", "/v1/admin/events", spec("", "sec\x00tion"), admin)
		require.Equal(t, 422, code, "a section name with NUL: %s", body)
	})
	code, _, body := do("POST", "/v1/admin/events", spec("Fine", ""), admin)
	require.Equal(t, 201, code, body)

	user := b.uid("eve")
	tok, err := auth.SignDev(testSecret, user, time.Hour, nil, "", "")
	require.NoError(t, err)
	authz := map[string]string{"Authorization": "Bearer " + tok}
	t.Run("reservation ids PostgreSQL does not read", func(t *testing.T) {
		res := uuid.NewString()
		for _, path := range []string{"/v1/reservations/urn:uuid:" + res, "/v1/reservations/{" + res + "}",
			"/v1/reservations/" + strings.ReplaceAll(res, "-", "")} {
			code, _, body := do("GET", path, "", authz)
			require.Equal(t, 404, code, "%s: %s", path, body)
			code, _, body = do("DELETE", path, "", authz)
			require.Equal(t, 404, code, "%s: %s", path, body)
		}
	})

	hold := "/v1/events/" + id + "/holds"
	hdr := map[string]string{"Authorization": "Bearer " + tok, HeaderAdmissionPass: b.desk.admit(id, user)}
	t.Run("idempotency keys that are not text", func(t *testing.T) {
		for _, key := range []string{"\xff\xfe", "tab\tkey", "\xc3", strings.Repeat("k", 256)} {
			hdr := maps.Clone(hdr)
			hdr[HeaderIdempotencyKey] = key
			code, _, body := do("POST", hold, `{"seats":[1]}`, hdr)
			require.Equal(t, 400, code, "Idempotency-Key %q: %s", key, body)
			require.Contains(t, body, "bad_idempotency_key")
		}
	})
	t.Run("field names are case-sensitive", func(t *testing.T) {
		hdr := maps.Clone(hdr)
		hdr[HeaderIdempotencyKey] = "k"
		code, _, body := do("POST", hold, `{"Seats":[1]}`, hdr)
		require.Equal(t, 400, code, "field names are case-sensitive: %s", body)
	})
	t.Run("a subject with NUL", func(t *testing.T) {
		nul := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": "a\x00b", "exp": time.Now().Add(time.Hour).Unix()})
		signed, err := nul.SignedString([]byte(testSecret))
		require.NoError(t, err)
		hdr := maps.Clone(hdr)
		hdr["Authorization"] = "Bearer " + signed
		hdr[HeaderIdempotencyKey] = "k"
		code, _, body := do("POST", hold, `{"seats":[1]}`, hdr)
		require.Equal(t, 401, code, body)
	})
	t.Run("promotions of ids no event has, and caps past PostgreSQL's integer", func(t *testing.T) {
		promo := `{"code":"P1","discountBps":100,"maxUses":1}`
		for _, path := range []string{"/v1/admin/events/a%00b/promotions", "/v1/admin/events/%FF%FE/promotions"} {
			code, _, body := do("POST", path, promo, admin)
			require.Equal(t, 404, code, "%s: %s", path, body)
		}
		for _, uses := range []string{"2147483648", "9223372036854775807", "-1"} {
			code, _, body := do("POST", "/v1/admin/events/"+id+"/promotions",
				`{"code":"P2","discountBps":100,"maxUses":`+uses+`}`, admin)
			require.Equal(t, 422, code, "maxUses %s: %s", uses, body)
			require.Contains(t, body, "invalid_promotion")
		}
		code, _, body := do("POST", "/v1/admin/events/"+id+"/promotions", `{"code":"P3","discountBps":100,"maxUses":2147483647}`, admin)
		require.Equal(t, 201, code, body)
	})
}
