package testenv

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
)

// ExampleTB stands in for the test an Example function is not given, so an
// example starts its stores with the same helpers as a test. A failure
// panics, which fails the example; cleanups run at Close, newest first.
type ExampleTB struct {
	// testing.TB is nil: a helper calling a method not defined below
	// panics, and so fails the example rather than pass unnoticed.
	testing.TB
	name string

	mu       sync.Mutex
	cleanups []func()
}

// Example returns the stand-in for the example called name.
func Example(name string) *ExampleTB { return &ExampleTB{name: name} }

// Close runs the cleanups registered so far.
func (e *ExampleTB) Close() {
	e.mu.Lock()
	fs := e.cleanups
	e.cleanups = nil
	e.mu.Unlock()
	for i := len(fs) - 1; i >= 0; i-- {
		fs[i]()
	}
}

func (e *ExampleTB) Name() string { return e.name }
func (e *ExampleTB) Helper()      {}
func (e *ExampleTB) Failed() bool { return false }

func (e *ExampleTB) Cleanup(f func()) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.cleanups = append(e.cleanups, f)
}

func (e *ExampleTB) Context() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	e.Cleanup(cancel)
	return ctx
}

func (e *ExampleTB) TempDir() string {
	dir, err := os.MkdirTemp("", "example")
	if err != nil {
		e.Fatal(err)
	}
	e.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

func (e *ExampleTB) Log(args ...any)                 {}
func (e *ExampleTB) Logf(format string, args ...any) {}
func (e *ExampleTB) Error(args ...any)               { e.Fatal(args...) }
func (e *ExampleTB) Errorf(format string, args ...any) {
	e.Fatalf(format, args...)
}
func (e *ExampleTB) Fatal(args ...any) { panic(e.name + ": " + fmt.Sprint(args...)) }
func (e *ExampleTB) Fatalf(format string, args ...any) {
	panic(e.name + ": " + fmt.Sprintf(format, args...))
}
func (e *ExampleTB) FailNow() { panic(e.name + ": failed") }
