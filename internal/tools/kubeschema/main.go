// Command kubeschema turns the Kubernetes OpenAPI v2 document (swagger.json,
// shipped in the k8s.io/kubernetes module under api/openapi-spec) into one
// strict JSON schema per kind, laid out as kubeconform's
// -schema-location template {{.ResourceKind}}{{.KindSuffix}}.json expects.
// CI validates the rendered Helm chart against them offline: the public
// schema repositories kubeconform fetches by default are not reachable from
// every build machine, the Go module proxy is.
//
// Usage: kubeschema -in swagger.json -out DIR
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

const refPrefix = "#/definitions/"

func main() {
	in := flag.String("in", "", "swagger.json of k8s.io/kubernetes (api/openapi-spec)")
	out := flag.String("out", "", "folder to write the schemas to")
	flag.Parse()
	if *in == "" || *out == "" {
		flag.Usage()
		os.Exit(2)
	}
	n, err := run(*in, *out)
	if err != nil {
		fmt.Fprintln(os.Stderr, "kubeschema:", err)
		os.Exit(1)
	}
	fmt.Printf("kubeschema: %d kinds written to %s\n", n, *out)
}

func run(in, out string) (int, error) {
	raw, err := os.ReadFile(in)
	if err != nil {
		return 0, err
	}
	var doc struct {
		Definitions map[string]map[string]any `json:"definitions"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		return 0, fmt.Errorf("parse %s: %w", in, err)
	}
	if len(doc.Definitions) == 0 {
		return 0, fmt.Errorf("%s has no definitions", in)
	}
	for name, def := range doc.Definitions {
		doc.Definitions[name] = tighten(name, def).(map[string]any)
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return 0, err
	}
	n := 0
	for name, def := range doc.Definitions {
		gvks, _ := def["x-kubernetes-group-version-kind"].([]any)
		for _, g := range gvks {
			gvk := g.(map[string]any)
			group, version, kind := gvk["group"].(string), gvk["version"].(string), gvk["kind"].(string)
			file := strings.ToLower(kind) + kindSuffix(group, version) + ".json"
			schema := map[string]any{"$ref": refPrefix + name, "definitions": reachable(doc.Definitions, name)}
			b, err := json.Marshal(schema)
			if err != nil {
				return n, err
			}
			if err := os.WriteFile(filepath.Join(out, file), b, 0o644); err != nil {
				return n, err
			}
			n++
		}
	}
	return n, nil
}

// kindSuffix is kubeconform's {{.KindSuffix}}: "-v1" for the core group,
// else "-" + the group's first label + "-" + version ("-apps-v1").
func kindSuffix(group, version string) string {
	if group == "" {
		return "-" + strings.ToLower(version)
	}
	return "-" + strings.ToLower(strings.Split(group, ".")[0]) + "-" + strings.ToLower(version)
}

// tighten makes a schema strict the way kubeconform's published "-strict"
// schemas are: an object that lists its properties refuses any other
// (a misspelt field fails instead of being ignored by the API server's
// lenient decoder), and the two types YAML writes as numbers or strings
// accept both.
func tighten(name string, v any) any {
	switch s := v.(type) {
	case map[string]any:
		for k, c := range s {
			s[k] = tighten("", c)
		}
		if s["format"] == "int-or-string" {
			delete(s, "type")
			delete(s, "format")
			s["oneOf"] = []any{map[string]any{"type": "string"}, map[string]any{"type": "integer"}}
		}
		if name == "io.k8s.apimachinery.pkg.api.resource.Quantity" {
			delete(s, "type")
			s["oneOf"] = []any{map[string]any{"type": "string"}, map[string]any{"type": "number"}}
		}
		if _, ok := s["properties"]; ok {
			if _, set := s["additionalProperties"]; !set {
				s["additionalProperties"] = false
			}
		}
		return s
	case []any:
		for i, c := range s {
			s[i] = tighten("", c)
		}
		return s
	}
	return v
}

// reachable is the definitions name refers to, directly or not, itself
// included: each kind's file stands alone.
func reachable(defs map[string]map[string]any, name string) map[string]any {
	seen := map[string]any{}
	var walk func(v any)
	visit := func(n string) {
		if _, ok := seen[n]; ok {
			return
		}
		def, ok := defs[n]
		if !ok {
			return
		}
		seen[n] = def
		walk(def)
	}
	walk = func(v any) {
		switch s := v.(type) {
		case map[string]any:
			if ref, ok := s["$ref"].(string); ok && strings.HasPrefix(ref, refPrefix) {
				visit(strings.TrimPrefix(ref, refPrefix))
			}
			for _, c := range s {
				walk(c)
			}
		case []any:
			for _, c := range s {
				walk(c)
			}
		}
	}
	visit(name)
	return seen
}
