// Package docs embeds the machine-readable descriptions of the API:
// openapi.yaml (OpenAPI 3.1, every HTTP endpoint; served at /openapi.json)
// and asyncapi.yaml (AsyncAPI 3, every WebSocket and SSE protocol). Tests
// in internal/apispec keep both equal to what the code does.
package docs

import _ "embed"

// OpenAPI is docs/openapi.yaml.
//
//go:embed openapi.yaml
var OpenAPI []byte

// AsyncAPI is docs/asyncapi.yaml.
//
//go:embed asyncapi.yaml
var AsyncAPI []byte
