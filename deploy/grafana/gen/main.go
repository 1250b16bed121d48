// Command gen writes deploy/grafana/presenced.json from deploy/grafana
// (run from the repository root: go run ./deploy/grafana/gen).
package main

import (
	"fmt"
	"os"

	"github.com/presenced/presenced/deploy/grafana"
)

func main() {
	out, err := grafana.JSON()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if err := os.WriteFile("deploy/grafana/presenced.json", out, 0o644); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
