package pages_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
)

// The browser tests drive the demo pages in Debian's headless Chromium as a
// person would, against real presenced processes (app/apptest). Each writes
// a screenshot of its pages to its artifact directory (go test -artifacts
// keeps them) and one on failure; -update-screenshots also copies them to
// docs/screenshots for the README.

var updateScreenshots = flag.Bool("update-screenshots", false, "copy the pages' screenshots to docs/screenshots")

// chromeFlags work on a closed network: without the background-networking
// switches Chromium keeps dialling Google hosts, refused many at a time.
var chromeFlags = []chromedp.ExecAllocatorOption{
	chromedp.Flag("headless", true),
	chromedp.NoSandbox,
	chromedp.DisableGPU,
	chromedp.Flag("disable-quic", true),
	chromedp.NoFirstRun,
	chromedp.Flag("disable-background-networking", true),
	chromedp.Flag("disable-component-update", true),
	chromedp.Flag("disable-sync", true),
	chromedp.Flag("hide-scrollbars", true),
	chromedp.Flag("mute-audio", true),
	chromedp.NoDefaultBrowserCheck,
}

// browserPath finds Chromium, or skips the test with what to install; CI
// (CI set) always has one, so there a missing browser fails.
func browserPath(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("PRESENCED_TEST_CHROME"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatal("no Chromium on a CI machine: .ci/run installs it (apt-get install chromium)")
	}
	t.Skip("browser tests skipped: no Chromium installed (apt-get install chromium, or set PRESENCED_TEST_CHROME)")
	return ""
}

// browser starts one headless Chromium for the test, with a fresh profile.
func browser(t *testing.T) context.Context {
	t.Helper()
	opts := append([]chromedp.ExecAllocatorOption{
		chromedp.ExecPath(browserPath(t)),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1100, 900),
	}, chromeFlags...)
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(alloc, chromedp.WithErrorf(t.Logf))
	// Start the browser now, so a broken install fails here and clearly.
	require.NoError(t, chromedp.Do(ctx), "start Chromium")
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
	})
	return ctx
}

// tab opens a tab in the browser of ctx; isolated gives it a browser
// context of its own (cookies and storage apart: another person).
func tab(t *testing.T, browserCtx context.Context, name string, isolated bool) context.Context {
	t.Helper()
	var opts []chromedp.ContextOption
	if isolated {
		opts = append(opts, chromedp.WithNewBrowserContext())
	}
	ctx, cancel := chromedp.NewContext(browserCtx, opts...)
	require.NoError(t, chromedp.Do(ctx))
	t.Cleanup(func() {
		if t.Failed() {
			saveShot(t, ctx, "failure-"+name)
		}
		cancel()
	})
	return ctx
}

// closeTab closes the tab as a person closing the window would.
func closeTab(t *testing.T, ctx context.Context) {
	t.Helper()
	require.NoError(t, chromedp.Cancel(ctx))
}

// run runs actions with a generous deadline: the machine is shared.
func run(t *testing.T, ctx context.Context, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	c, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	require.NoError(t, chromedp.Do(c, actions...))
}

// waitJS polls a JavaScript expression until it is true, or fails the test
// after the deadline with what it last evaluated to.
func waitJS(t *testing.T, ctx context.Context, what, expr string) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	var last any
	for time.Now().Before(deadline) {
		c, cancel := context.WithTimeout(ctx, 10*time.Second)
		ok, err := chromedp.Run(c, chromedp.Evaluate[bool]("Boolean("+expr+")"))
		cancel()
		if err == nil && ok {
			return
		}
		last = err
		if err == nil {
			last = ok
		}
		poll(ctx)
	}
	t.Fatalf("%s: still not true after 90 s (%v): %s", what, last, expr)
}

// evalJS evaluates expr in the page.
func evalJS[T any](t *testing.T, ctx context.Context, expr string) T {
	t.Helper()
	c, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	v, err := chromedp.Run(c, chromedp.Evaluate[T](expr))
	require.NoError(t, err, expr)
	return v
}

// poll waits a little between looks at the page.
func poll(ctx context.Context) {
	select {
	case <-ctx.Done():
	case <-time.After(200 * time.Millisecond):
	}
}

// phone switches the tab to a phone's viewport.
func phone(t *testing.T, ctx context.Context) {
	t.Helper()
	run(t, ctx, chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(2), chromedp.EmulateMobile))
}

// desktop switches the tab back to a desktop viewport.
func desktop(t *testing.T, ctx context.Context) {
	t.Helper()
	run(t, ctx, chromedp.ResetViewport())
}

// shot writes a full-page screenshot of the tab as an artifact (and to
// docs/screenshots with -update-screenshots).
func shot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	saveShot(t, ctx, name)
}

func saveShot(t *testing.T, ctx context.Context, name string) {
	c, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	png, err := chromedp.Run(c, chromedp.FullScreenshot(100))
	if err != nil {
		t.Logf("screenshot %s: %v", name, err)
		return
	}
	path := filepath.Join(t.ArtifactDir(), name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Logf("screenshot %s: %v", name, err)
		return
	}
	t.Logf("screenshot: %s", path)
	if *updateScreenshots && !strings.HasPrefix(name, "failure-") {
		_, file, _, _ := runtime.Caller(0)
		dst := filepath.Join(filepath.Dir(file), "..", "..", "docs", "screenshots", name+".png")
		require.NoError(t, os.MkdirAll(filepath.Dir(dst), 0o755))
		require.NoError(t, os.WriteFile(dst, png, 0o644))
	}
}

// accessible checks what a screen reader and a keyboard need on the page
// as it stands: a language, every control labelled, every image described,
// every button named.
func accessible(t *testing.T, ctx context.Context) {
	t.Helper()
	problems := evalJS[[]string](t, ctx, `(() => {
		const out = [];
		if (!document.documentElement.lang) out.push('html has no lang');
		for (const el of document.querySelectorAll('input:not([type=hidden]), select, textarea')) {
			if (el.closest('.hidden')) continue;
			if (!(el.labels && el.labels.length) && !el.getAttribute('aria-label')) out.push('unlabelled ' + el.outerHTML.slice(0, 80));
		}
		for (const el of document.querySelectorAll('img')) if (!el.hasAttribute('alt')) out.push('image without alt');
		for (const el of document.querySelectorAll('button')) {
			if (!(el.textContent.trim() || el.getAttribute('aria-label'))) out.push('button without a name');
		}
		if (!document.querySelector('main')) out.push('no main landmark');
		return out;
	})()`)
	require.Empty(t, problems, "accessibility")
}

// text reads the text of the element with id.
func textOf(t *testing.T, ctx context.Context, id string) string {
	t.Helper()
	return evalJS[string](t, ctx, fmt.Sprintf(`document.getElementById(%q)?.textContent ?? ''`, id))
}
