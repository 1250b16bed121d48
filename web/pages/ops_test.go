package pages_test

import (
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
)

// The ops page shows this process's public figures (from /metrics) before
// any key is given, and says which part needs the key.
func TestBrowserOpsShowsPublicFiguresBeforeTheKey(t *testing.T) {
	ctx := browser(t)
	s := server(t)
	page := tab(t, ctx, "ops-public", true)
	run(t, page, chromedp.Navigate(s.URL+"/demo/ops"))
	run(t, page, chromedp.Evaluate[chromedp.Void](`sessionStorage.clear()`))
	run(t, page, chromedp.Reload())
	for _, id := range []string{"sockets", "holds-ok", "presence-conns", "outbox-age"} {
		waitJS(t, page, id+" is shown without the key", `document.getElementById('`+id+`').dataset.state === 'shown' && document.getElementById('`+id+`').textContent !== '—'`)
	}
	require.Regexp(t, `^\d+$`, textOf(t, page, "sockets"))
	require.False(t, evalJS[bool](t, page, `document.getElementById('line-needs-key').classList.contains('hidden')`), "says the line needs the key")
	require.Equal(t, "—", textOf(t, page, "queued"), "the line waits for the key")
	accessible(t, page)
	shot(t, page, "ops-public")
}
