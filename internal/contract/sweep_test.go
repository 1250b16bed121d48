package contract

import (
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/internal/spectest"
)

// Every documented path answers every method it does not serve 405 with
// Allow (OPTIONS: 204 with Allow), whatever middleware its routes have.
func testWrongMethods(t *testing.T, s *server) {
	fx := s.fx
	doc := spectest.OpenAPI(t)
	gn := &generator{seed: 1, ops: operations(doc), rs: routes(doc), fx: fx, bodyLimit: 1 << 20}
	k := &checker{doc: doc, routes: gn.rs}
	w := &wire{addr: strings.TrimPrefix(s.base, "http://")}
	defer w.close()
	tried := 0
	for _, o := range gn.ops {
		g := &gen{rng: rand.New(rand.NewPCG(1, 2)), fx: fx, where: o.method + " " + o.path, run: gn}
		r := gn.valid(g, o)
		path, _, _ := strings.Cut(r.target, "?")
		rt := match(gn.rs, path)
		require.NotNil(t, rt, path)
		for _, m := range methodsTried {
			if rt.allows(m) {
				continue
			}
			r.method = m
			a, err := w.do(r, 10*time.Second)
			require.NoError(t, err, "%s %s", m, path)
			tried++
			for _, p := range k.wrongMethod(rt, m, a) {
				t.Errorf("%s %s: %s", m, path, p)
			}
			if a.header.Get("X-Request-Id") == "" {
				t.Errorf("%s %s: no X-Request-Id", m, path)
			}
		}
	}
	t.Logf("%d wrong methods tried over %d operations", tried, len(gn.ops))
}

// Every operation that takes a body refuses one over the limit with 413
// and one that does not arrive in time with 408, both documented: one
// body reader for all of them (wire.ReadBody).
func testBodyReaders(t *testing.T, s *server) {
	fx := s.fx
	doc := spectest.OpenAPI(t)
	gn := &generator{seed: 1, ops: operations(doc), rs: routes(doc), fx: fx, bodyLimit: 1 << 20}
	k := &checker{doc: doc, routes: gn.rs}
	// Each waits http.body_read_timeout: all at once.
	var wg sync.WaitGroup
	for _, o := range gn.ops {
		if o.spec.RequestBody == nil {
			continue
		}
		g := &gen{rng: rand.New(rand.NewPCG(1, 2)), fx: fx, where: o.method + " " + o.path, run: gn}
		for _, c := range []struct {
			what   string
			status int
			edit   func(r *request)
		}{
			{"over the limit", http.StatusRequestEntityTooLarge, func(r *request) { r.body = []byte(strings.Repeat(" ", gn.bodyLimit+1)) }},
			{"cut short", http.StatusRequestTimeout, func(r *request) { r.body = []byte("{"); r.declared = 100 }},
		} {
			r := gn.valid(g, o)
			// A provider that is configured reads the body.
			r.target = strings.Replace(r.target, "/webhooks/stripe", "/webhooks/sandbox", 1)
			c.edit(r)
			if o.signature {
				gn.sign(r)
			}
			if why := excludedBodyReader(o, c.status); why != "" {
				t.Logf("%s %s, a body %s: left out (%s)", o.method, o.path, c.what, why)
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				w := &wire{addr: strings.TrimPrefix(s.base, "http://")}
				defer w.close()
				a, err := w.do(r, 10*time.Second)
				if err != nil {
					t.Errorf("%s %s, a body %s: %v", o.method, o.path, c.what, err)
					return
				}
				if a.status != c.status {
					t.Errorf("%s %s, a body %s: %s, want %d: %s", o.method, o.path, c.what, statusLine(a), c.status, excerpt(a.body, 200))
					return
				}
				for _, p := range k.check(r, false, a) {
					t.Errorf("%s %s, a body %s: %s", o.method, o.path, c.what, p)
				}
			}()
		}
	}
	wg.Wait()
}
