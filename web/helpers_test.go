package web

import (
	"encoding/json"
	"net/http"
)

func jsonDecode(resp *http.Response, v any) error {
	defer resp.Body.Close()
	return json.NewDecoder(resp.Body).Decode(v)
}

// errorBody is the error shape, as a client decodes it.
type errorBody struct {
	Error map[string]any `json:"error"`
}
