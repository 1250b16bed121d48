package app

import (
	"context"
	"encoding/json"
	"slices"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"

	"github.com/presenced/presenced/docs"
	"github.com/presenced/presenced/internal/spectest"
	"github.com/presenced/presenced/internal/testenv"
	"github.com/presenced/presenced/payments/gate"
)

// Every route a process of every role registers is in docs/openapi.yaml,
// and every documented operation is served by `serve --roles=all` or by
// `presenced gate`. spectest.Excluded lists the routes left out on purpose.
func TestEveryRouteIsDocumentedAndEveryDocumentedOperationServed(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	cfg.Roles = []string{"all"}
	cfg.HTTP.Pprof = true // registered, and excluded on purpose
	a, err := New(cfg, testenv.Logger())
	require.NoError(t, err)
	require.NoError(t, a.Start(context.Background()))
	t.Cleanup(func() { _ = a.Shutdown() })

	served := spectest.RouteKeys(a.Server.Echo)
	ge := echo.New()
	(*gate.Gate)(nil).Routes(ge) // registers handlers only; nothing runs
	for _, k := range spectest.RouteKeys(ge) {
		if !slices.Contains(served, k) {
			served = append(served, k)
		}
	}
	documented := spectest.Operations(t)
	var undocumented, unserved []string
	for _, k := range served {
		if !slices.Contains(documented, k) {
			undocumented = append(undocumented, k)
		}
	}
	for _, k := range documented {
		if !slices.Contains(served, k) {
			unserved = append(unserved, k)
		}
	}
	require.Empty(t, undocumented, "routes registered but not in docs/openapi.yaml")
	require.Empty(t, unserved, "operations in docs/openapi.yaml that no process serves")
}

// /openapi.json is docs/openapi.yaml as JSON.
func TestOpenAPIIsServed(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	cfg.Roles = []string{"ingest"}
	a, err := New(cfg, testenv.Logger())
	require.NoError(t, err)
	require.NoError(t, a.Start(context.Background()))
	base := serve(t, a)
	code, body := get(t, base+"/openapi.json")
	require.Equal(t, 200, code)
	var served, doc any
	require.NoError(t, json.Unmarshal([]byte(body), &served))
	require.NoError(t, yaml.Unmarshal(docs.OpenAPI, &doc))
	want, err := json.Marshal(doc)
	require.NoError(t, err)
	require.JSONEq(t, string(want), body)
}
