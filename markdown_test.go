package main

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/yuin/goldmark"
	"github.com/yuin/goldmark/ast"
	"github.com/yuin/goldmark/text"
)

// Every Markdown file renders as CommonMark means it to, fences included:
// a closing fence that carries text does not close (CommonMark allows no
// info string on a closing fence), and everything after it up to the next
// bare fence renders as code.
func TestMarkdownFencesClose(t *testing.T) {
	t.Parallel()
	var files []string
	require.NoError(t, filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "var" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, ".md") {
			files = append(files, path)
		}
		return nil
	}))
	require.Contains(t, files, "README.md")
	for _, f := range files {
		src, err := os.ReadFile(f)
		require.NoError(t, err)
		var out bytes.Buffer
		require.NoError(t, goldmark.Convert(src, &out), f)
		require.Empty(t, fenceProblems(src), "%s: broken code fences", f)
	}
}

// The check itself finds both ways a fence breaks, and leaves a longer
// fence that shows a shorter one alone.
func TestFenceProblemsFindsBrokenFences(t *testing.T) {
	t.Parallel()
	carries := "# a\n\n```sh\necho hi\n``` Then a sentence.\n\n## b\n\n```\nx\n```\n"
	require.Equal(t, []string{"line 5: a fence carrying text does not close the block opened at line 3 (a closing fence is bare)"}, fenceProblems([]byte(carries)))
	unclosed := "# a\n\n~~~go\nfunc f() {}\n\n## b\n"
	require.Equal(t, []string{"line 3: the fenced block never closes"}, fenceProblems([]byte(unclosed)))
	nested := "````markdown\n```sh\necho hi\n```\n````\n\n- item\n\n  ```\n  x\n  ```\n\n> ```\n> y\n> ```\n"
	require.Empty(t, fenceProblems([]byte(nested)))
}

var fenceRun = regexp.MustCompile("`{3,}|~{3,}")

// fenceProblems lists the fenced code blocks of src (as goldmark parses
// them) that contain a line looking like their closing fence but carrying
// text, or that are never closed.
func fenceProblems(src []byte) []string {
	lines := strings.Split(string(src), "\n")
	lineOf := func(offset int) int { return bytes.Count(src[:offset], []byte("\n")) }
	var problems []string
	doc := goldmark.DefaultParser().Parse(text.NewReader(src))
	_ = ast.Walk(doc, func(n ast.Node, entering bool) (ast.WalkStatus, error) {
		block, ok := n.(*ast.FencedCodeBlock)
		if !entering || !ok {
			return ast.WalkContinue, nil
		}
		open := -1
		switch {
		case block.Info != nil:
			open = lineOf(block.Info.Segment.Start)
		case block.Lines().Len() > 0:
			open = lineOf(block.Lines().At(0).Start) - 1
		}
		if open < 0 {
			return ast.WalkContinue, nil // an empty block without info: nothing to misrender
		}
		fence := fenceRun.FindString(lines[open])
		last := open
		for i := 0; i < block.Lines().Len(); i++ {
			seg := block.Lines().At(i)
			last = lineOf(seg.Start)
			content := strings.TrimLeft(string(seg.Value(src)), " ")
			if fence != "" && strings.HasPrefix(content, fence) {
				problems = append(problems, fmt.Sprintf("line %d: a fence carrying text does not close the block opened at line %d (a closing fence is bare)", last+1, open+1))
			}
		}
		if last+1 >= len(lines) || !isClosingFence(lines[last+1], fence) {
			problems = append(problems, fmt.Sprintf("line %d: the fenced block never closes", open+1))
		}
		return ast.WalkContinue, nil
	})
	return problems
}

// isClosingFence tells whether line (inside any list or quote) is a bare
// run of the fence's character at least as long as the fence.
func isClosingFence(line, fence string) bool {
	if fence == "" {
		return false
	}
	s := strings.TrimSpace(strings.TrimLeft(line, " \t>"))
	return len(s) >= len(fence) && strings.Trim(s, fence[:1]) == ""
}
