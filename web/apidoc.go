package web

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sync"

	"github.com/labstack/echo/v4"
	"gopkg.in/yaml.v3"

	"github.com/presenced/presenced/docs"
)

// openAPIJSON is docs/openapi.yaml as JSON, converted once.
var openAPIJSON = sync.OnceValues(func() ([]byte, error) {
	var doc any
	if err := yaml.Unmarshal(docs.OpenAPI, &doc); err != nil {
		return nil, fmt.Errorf("docs/openapi.yaml: %w", err)
	}
	b, err := json.Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("docs/openapi.yaml: %w", err)
	}
	return b, nil
})

// serveOpenAPI is GET /openapi.json: the API description, for client
// generators and gateways.
func serveOpenAPI(c echo.Context) error {
	b, err := openAPIJSON()
	if err != nil {
		return err
	}
	c.Response().Header().Set(echo.HeaderCacheControl, "public, max-age=300")
	return c.Blob(http.StatusOK, echo.MIMEApplicationJSON, b)
}
