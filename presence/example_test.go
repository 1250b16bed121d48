package presence_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/presenced/presenced/config"
	"github.com/presenced/presenced/internal/auth"
	"github.com/presenced/presenced/internal/hub"
	"github.com/presenced/presenced/internal/module/moduletest"
	"github.com/presenced/presenced/internal/testenv"
	"github.com/presenced/presenced/presence"
	"github.com/presenced/presenced/store"
	"github.com/presenced/presenced/web"
)

// Presence is used through its parts: New builds the module, and each
// StartX part takes its stores from the host and mounts its routes. Here
// the read part, as the presence plane starts it: a contact list is set and
// a user's status asked for with the API key.
func ExampleModule_StartRead() {
	env := testenv.Example("ExampleModule_StartRead")
	defer env.Close()
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	m, err := presence.New(presence.Deps{Config: config.Default().Presence,
		Keys: store.NewKeyspace(testenv.Prefix(env)), Metrics: reg, Log: testenv.Logger()})
	if err != nil {
		panic(err)
	}
	rdb := testenv.Redis(env)
	hb, _ := hub.New(rdb, reg, testenv.Logger())
	env.Cleanup(func() { _ = hb.Close() })
	users, _ := auth.NewVerifier(ctx, config.Auth{JWTSecret: "example-secret-0123456789abcdef0123"})
	srv, _ := web.NewServer(config.Default(), prometheus.NewRegistry(), testenv.Logger())
	host := moduletest.New(env, srv, moduletest.Stores{Redis: rdb, Hub: hb, Postgres: testenv.Postgres(env),
		Users: users, APIKey: "example-api-key"})
	if err := m.StartRead(ctx, host); err != nil {
		panic(err)
	}

	call := func(method, path, body string) {
		req := httptest.NewRequest(method, path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-API-Key", "example-api-key")
		rec := httptest.NewRecorder()
		srv.Echo.ServeHTTP(rec, req)
		fmt.Println(rec.Code, strings.TrimSpace(rec.Body.String()))
	}
	call(http.MethodPut, "/v1/presence/contacts/example-ann", `{"contacts":["example-bob"]}`)
	call(http.MethodPost, "/v1/presence/query", `{"users":["example-bob"]}`)
	// Output:
	// 200 {"user":"example-ann","contacts":["example-bob"]}
	// 200 {"users":[{"user":"example-bob","status":"offline","v":0}]}
}
