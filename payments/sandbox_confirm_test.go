package payments_test

import (
	"encoding/json"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"

	"github.com/presenced/presenced/config"
	"github.com/presenced/presenced/docs"
	"github.com/presenced/presenced/payments"
)

// The confirm step takes the faults that shape a charge's webhooks; the
// ones that act when an intent is created (create_timeout, create_error,
// webhook_early) are set by config and refused here, since at confirm they
// would change nothing. docs/openapi.yaml lists the same names, and
// docs/payments.md names every fault the sandbox knows.
func TestSandboxConfirmFaultsAgreeWithTheDocs(t *testing.T) {
	t.Parallel()
	var doc struct {
		Paths map[string]map[string]yaml.Node `yaml:"paths"`
	}
	require.NoError(t, yaml.Unmarshal(docs.OpenAPI, &doc))
	var op struct {
		RequestBody struct {
			Content map[string]struct {
				Schema struct {
					Properties map[string]struct {
						Items struct {
							Enum []string `yaml:"enum"`
						} `yaml:"items"`
					} `yaml:"properties"`
				} `yaml:"schema"`
			} `yaml:"content"`
		} `yaml:"requestBody"`
	}
	post := doc.Paths["/v1/sandbox/psp/intents/{id}/confirm"]["post"]
	require.NoError(t, post.Decode(&op))
	enum := op.RequestBody.Content["application/json"].Schema.Properties["faults"].Items.Enum
	require.ElementsMatch(t, payments.SandboxConfirmFaults, enum, "docs/openapi.yaml's faults of sandboxConfirm")
	for _, f := range payments.SandboxConfirmFaults {
		require.Contains(t, config.SandboxFaults, f)
	}

	md, err := os.ReadFile("../docs/payments.md")
	require.NoError(t, err)
	for _, f := range config.SandboxFaults {
		require.Contains(t, string(md), "`"+f+"`", "docs/payments.md names the fault")
	}
}

// The confirm step answers in the API's currency shape ("EUR"), refuses a
// create-time fault with 400 and charges nothing.
func TestSandboxConfirmAnswers(t *testing.T) {
	t.Parallel()
	s := startSale(t, 4, nil)
	b, res := s.hold(1)
	status, v, body := s.pay(b, res, "pay-1")
	require.Equal(t, 201, status, body)

	for _, f := range config.SandboxFaults {
		if slices.Contains(payments.SandboxConfirmFaults, f) {
			continue
		}
		status, body := s.do(http.MethodPost, v.ConfirmURL, nil, payments.SandboxConfirm{ClientSecret: v.ClientSecret, Faults: []string{f}})
		require.Equal(t, http.StatusBadRequest, status, "%s at confirm: %s", f, body)
		require.Contains(t, body, f)
	}
	require.EqualValues(t, 0, s.charges(res))

	status, body = s.do(http.MethodPost, v.ConfirmURL, nil, payments.SandboxConfirm{ClientSecret: v.ClientSecret})
	require.Equal(t, http.StatusOK, status, body)
	var in struct{ Currency string }
	require.NoError(t, json.Unmarshal([]byte(body), &in))
	require.Equal(t, strings.ToUpper(in.Currency), in.Currency, "currency as everywhere else in the API")
	require.Equal(t, v.Currency, in.Currency)
}
