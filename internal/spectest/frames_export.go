package spectest

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Channel is one channel of docs/asyncapi.yaml as a contract test sees it.
type Channel struct {
	Name      string
	Transport string // "websocket" or "sse"
	// CloseCodes are the channel's x-close-codes.
	CloseCodes []int
	// Received are the payload schemas of what clients send, by message
	// name, with every $ref inlined (JSON values as encoding/json decodes
	// them, numbers as json.Number).
	Received map[string]map[string]any
}

// AsyncChannel finds the channel of transport ("websocket" or "sse")
// whose address matches path, e.g. /v1/waitingroom/demo/ws.
func AsyncChannel(transport, path string) (*Channel, error) {
	_, adoc, err := load()
	if err != nil {
		return nil, err
	}
	for _, c := range adoc.channels {
		if c.transport == transport && c.address.MatchString(path) {
			return &Channel{Name: c.name, Transport: c.transport, CloseCodes: slices.Clone(c.closeCodes), Received: c.received}, nil
		}
	}
	return nil, fmt.Errorf("%s %s: no channel in docs/asyncapi.yaml", transport, path)
}

// FrameProblem checks one WebSocket text frame (event "") or SSE event the
// server sent on path against the document: nil when a message of the
// channel describes it.
func FrameProblem(transport, path, event string, data []byte) error {
	_, adoc, err := load()
	if err != nil {
		return err
	}
	rec := &recorder{}
	adoc.checker(rec, transport, path)(event, data)
	return problems(rec)
}

// CloseProblem checks a close code the server sent on the WebSocket at
// path against the channel's x-close-codes.
func CloseProblem(path string, code int) error {
	_, adoc, err := load()
	if err != nil {
		return err
	}
	rec := &recorder{}
	adoc.closeChecker(rec, path)(code)
	return problems(rec)
}

func problems(rec *recorder) error {
	if len(rec.problems) == 0 {
		return nil
	}
	return errors.New(strings.Join(rec.problems, "; "))
}

// inline returns v with every {"$ref": ...} replaced by what it names,
// for generating values from a schema without a resolver. refs counts the
// references followed to get here: the documents have no recursive ones.
func inline(root map[string]any, v any, refs int) (any, error) {
	if refs > 16 {
		return nil, errors.New("references nest too deeply")
	}
	switch x := v.(type) {
	case map[string]any:
		if ref, ok := x["$ref"].(string); ok {
			_, target, err := resolve(root, ref)
			if err != nil {
				return nil, err
			}
			return inline(root, target, refs+1)
		}
		out := make(map[string]any, len(x))
		for k, e := range x {
			ie, err := inline(root, e, refs)
			if err != nil {
				return nil, err
			}
			out[k] = ie
		}
		return out, nil
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			ie, err := inline(root, e, refs)
			if err != nil {
				return nil, err
			}
			out[i] = ie
		}
		return out, nil
	}
	return v, nil
}
