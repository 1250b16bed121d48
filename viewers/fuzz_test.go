package viewers

import (
	"strings"
	"testing"
	"time"

	"github.com/presenced/presenced/internal/keyring"
)

// FuzzViewerCookie: no cookie a client makes up panics the verifier or is
// taken for a session, unless it is one this key signed.
// Seeds: testdata/fuzz/FuzzViewerCookie.
func FuzzViewerCookie(f *testing.F) {
	signing, _, err := keyring.Generate("k1")
	if err != nil {
		f.Fatal(err)
	}
	ring, err := keyring.Parse(signing, nil)
	if err != nil {
		f.Fatal(err)
	}
	s := newSessions(ring, time.Hour, 64)
	now := time.Now()
	good, err := s.issue(now)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good.setCookie)
	f.Fuzz(func(t *testing.T, cookie string) {
		_, _, reason := s.verify(cookie, now)
		if reason == "" && cookie != good.setCookie && !strings.HasPrefix(good.setCookie, cookie) {
			// Only the signed bytes verify; decoders that ignore trailing
			// bits could accept variants, which must still name one session.
			id1, _, ok1 := decodeCookie(cookie)
			id2, _, ok2 := decodeCookie(good.setCookie)
			if !ok1 || !ok2 || id1 != id2 {
				t.Fatalf("an unsigned cookie verified: %q", cookie)
			}
		}
		sess, err := s.resolve(cookie, now)
		if err != nil {
			t.Fatalf("resolve: %v", err)
		}
		if reason != "" && !sess.fresh {
			t.Fatalf("a refused cookie kept its session: %q", cookie)
		}
	})
}
