package main

import (
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// A back-quoted word in a flag's usage becomes the value's name in --help
// (`--manifest FILE`); back-quoting a phrase garbles the line, as
// "--manifest presenced manifest export" did. Every flag of every command
// names its value with one word, or none.
func TestHelpNamesFlagValuesWithOneWord(t *testing.T) {
	t.Parallel()
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		c.LocalFlags().VisitAll(func(f *pflag.Flag) {
			if name, _ := pflag.UnquoteUsage(f); strings.ContainsAny(name, " \t") {
				t.Errorf("%s --%s: its help names the value %q; back-quote one word, or none", c.CommandPath(), f.Name, name)
			}
		})
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(newRoot())
}
