package pages_test

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
)

func TestBrowserIndex(t *testing.T) {
	ctx := browser(t)
	s := server(t)
	page := tab(t, ctx, "index", false)
	run(t, page, chromedp.Navigate(s.URL+"/"))
	waitJS(t, page, "the index lists the roles", `document.querySelectorAll('section.card').length >= 7`)
	accessible(t, page)
	shot(t, page, "index")

	// At a phone's width the routes and part names wrap after a slash, a
	// dot or a space, never inside a word.
	phone(t, page)
	run(t, page, chromedp.Reload())
	waitJS(t, page, "the index lists the roles", `document.querySelectorAll('section.card').length >= 7`)
	broken := evalJS[[]string](t, page, `(() => {
		const out = [];
		for (const code of document.querySelectorAll('td code')) {
			const walker = document.createTreeWalker(code, NodeFilter.SHOW_TEXT);
			const chars = [];
			for (let n = walker.nextNode(); n; n = walker.nextNode()) {
				for (let i = 0; i < n.length; i++) {
					const r = document.createRange();
					r.setStart(n, i);
					r.setEnd(n, i + 1);
					const box = r.getClientRects()[0];
					if (box) chars.push({c: n.data[i], top: Math.round(box.top)});
				}
			}
			for (let i = 1; i < chars.length; i++) {
				if (chars[i].top > chars[i - 1].top + 2 && !'/. '.includes(chars[i - 1].c) && chars[i].c !== ' ') {
					out.push(code.textContent + ' at ' + i);
				}
			}
		}
		return out;
	})()`)
	require.Empty(t, broken, "identifiers broken mid-word at phone width")
	desktop(t, page)
}

func TestBrowserHotelCountRisesWithOtherViewers(t *testing.T) {
	ctx := browser(t)
	s := server(t)
	// Hotels live in the package's database: ids and city of their own, so
	// the test can run again (-count) in the same database.
	suffix := strconv.FormatInt(time.Now().UnixNano(), 36)
	first, city := "bt-lisbon-1-"+suffix, "testville-"+suffix
	createHotel(t, s, first, city, "Harbour Test Hotel")
	createHotel(t, s, "bt-lisbon-2-"+suffix, city, "Old Town Test Inn")
	in := time.Now().AddDate(0, 0, 3).Format("2006-01-02")
	out := time.Now().AddDate(0, 0, 5).Format("2006-01-02")
	q := fmt.Sprintf("?city=%s&checkIn=%s&checkOut=%s&guests=2", city, in, out)

	// Search: both hotels, each with a link to its page.
	search := tab(t, ctx, "hotels", false)
	run(t, search, chromedp.Navigate(s.URL+"/demo/hotels"+q))
	waitJS(t, search, "the search lists both hotels", `document.querySelectorAll('#results a').length === 2`)
	accessible(t, search)
	shot(t, search, "hotels")

	// The hotel page counts its own viewer first...
	hotel := tab(t, ctx, "hotel", false)
	run(t, hotel, chromedp.Navigate(s.URL+"/demo/hotels/"+first+q))
	// Until the first count arrives the widget shows a dash, never an
	// error; the count may already have arrived by now.
	require.Regexp(t, `^(—|\d+)$`, textOf(t, hotel, "viewer-count"), "a dash until the first count, then a number")
	waitJS(t, hotel, "the page counts itself", `Number(document.getElementById('viewer-count').dataset.count) >= 1`)
	waitJS(t, hotel, "the hotel's name from the search", `document.getElementById('hotel-name').textContent === 'Harbour Test Hotel'`)

	// ...then rises, pushed live, as other people's sessions heartbeat.
	for range 4 {
		viewer(t, s, first)
	}
	waitJS(t, hotel, "the count rises to the five viewers", `Number(document.getElementById('viewer-count').dataset.count) >= 5`)
	require.Contains(t, textOf(t, hotel, "viewers"), "people are looking at this hotel")
	require.Empty(t, evalJS[string](t, hotel, `document.querySelector('.message.error')?.textContent ?? ''`))
	accessible(t, hotel)
	shot(t, hotel, "hotel")
	phone(t, hotel)
	shot(t, hotel, "hotel-phone")
}

func TestBrowserPresenceDots(t *testing.T) {
	ctx := browser(t)
	s := server(t)
	suffix := strconv.FormatInt(time.Now().UnixNano()%1_000_000, 36)
	alice, bob := "alice-"+suffix, "bob-"+suffix

	a := tab(t, ctx, "presence-alice", false)
	run(t, a, chromedp.Navigate(s.URL+"/demo/presence"))
	signIn(t, a, alice)
	run(t, a,
		chromedp.SetValue(chromedp.ID("contact"), bob),
		chromedp.Click(chromedp.ID("add-button")),
	)
	// A second contact who never signs in: grey throughout.
	run(t, a,
		chromedp.SetValue(chromedp.ID("contact"), "carol-"+suffix),
		chromedp.Click(chromedp.ID("add-button")),
	)
	contact := fmt.Sprintf(`document.querySelector('#contacts li[data-user=%q]')`, bob)
	waitJS(t, a, "bob is listed, grey", contact+`?.dataset.status === 'offline' && `+contact+`.querySelector('.dot').classList.contains('offline')`)
	run(t, a, chromedp.Click(chromedp.CSS(`#contacts li[data-user="`+bob+`"] .notify`)))
	waitJS(t, a, "the notify button says it will", contact+`.querySelector('.notify').disabled`)

	// Bob signs in from another browser context: his dot turns green, and
	// alice gets the one-time notification.
	b := tab(t, ctx, "presence-bob", true)
	run(t, b, chromedp.Navigate(s.URL+"/demo/presence"))
	signIn(t, b, bob)
	waitJS(t, a, "bob's dot turns green", contact+`?.dataset.status === 'online' && `+contact+`.querySelector('.dot').classList.contains('online')`)
	waitJS(t, a, "alice is notified", `document.getElementById('notes').textContent.includes(`+strconv.Quote(bob+" is online now")+`)`)

	// Bob picks "busy": red at alice's.
	run(t, b, chromedp.SetValue(chromedp.ID("my-status"), "busy"))
	run(t, b, chromedp.Evaluate[chromedp.Void](`document.getElementById('my-status').dispatchEvent(new Event('change'))`))
	waitJS(t, a, "bob's dot turns red", contact+`?.dataset.status === 'busy' && `+contact+`.querySelector('.dot').classList.contains('busy')`)
	accessible(t, a)
	shot(t, a, "presence")
	phone(t, a)
	shot(t, a, "presence-phone")
	desktop(t, a)

	// Bob appears offline: grey at alice's, and still so after his reload,
	// whose page reads the choice back; turned off, green again.
	run(t, b, chromedp.Click(chromedp.ID("invisible")))
	waitJS(t, a, "bob's dot turns grey while he appears offline", contact+`?.dataset.status === 'offline'`)
	run(t, b, chromedp.Reload())
	waitJS(t, b, "the presence socket is live again", `document.body.dataset.presence === 'open'`)
	waitJS(t, b, "the toggle reads back on", `document.getElementById('invisible').checked`)
	waitJS(t, b, "the visibility settings read back", `document.getElementById('see-status').value === 'everyone'`)
	run(t, b, chromedp.Click(chromedp.ID("invisible")))
	waitJS(t, a, "bob's dot turns green when he shows again", contact+`?.dataset.status === 'online'`)

	// Bob's browser closes (no logout): grey once the grace has passed.
	closeTab(t, b)
	waitJS(t, a, "bob's dot turns grey", contact+`?.dataset.status === 'offline' && `+contact+`.querySelector('.dot').classList.contains('offline')`)
}

func signIn(t *testing.T, page context.Context, user string) {
	t.Helper()
	waitJS(t, page, "the sign-in form", `!!document.getElementById('user')`)
	run(t, page,
		chromedp.SetValue(chromedp.ID("user"), user),
		chromedp.Click(chromedp.ID("signin-button")),
	)
	waitJS(t, page, "the presence socket is live", `document.body.dataset.presence === 'open'`)
}

func TestBrowserSaleFromQueueToTicket(t *testing.T) {
	ctx := browser(t)
	s := server(t)
	event := "bt-sale-" + strconv.FormatInt(time.Now().UnixNano(), 36) // its own, so the test can run again (-count)
	createEvent(t, s, event, 4, 8)
	// A room that admits nobody yet: capacity 0.
	admin(t, s, http.MethodPut, "/v1/admin/waitingrooms/"+event, map[string]any{"capacity": 0, "batch": 5}, http.StatusCreated)

	ops := tab(t, ctx, "ops", false)
	run(t, ops, chromedp.Navigate(s.URL+"/demo/ops"))
	run(t, ops,
		chromedp.SetValue(chromedp.ID("event"), event),
		chromedp.SetValue(chromedp.ID("apikey"), s.App.Config.Auth.APIKey),
		chromedp.Click(chromedp.ID("watch")),
	)
	waitJS(t, ops, "the ops page shows the room", `document.getElementById('capacity').textContent === '0'`)

	// The fan queues.
	fan := tab(t, ctx, "sale", true)
	run(t, fan, chromedp.Navigate(s.URL+"/demo/sale/"+event))
	waitJS(t, fan, "the seat map is drawn", `document.getElementById('seatmap').dataset.free === '32'`)
	run(t, fan,
		chromedp.SetValue(chromedp.ID("fan"), "fan-one"),
		chromedp.Click(chromedp.ID("join")),
	)
	waitJS(t, fan, "first in line", `document.getElementById('line').dataset.position === '1'`)
	waitJS(t, ops, "ops sees one queued", `document.getElementById('queued').textContent === '1'`)

	// The ops dial pauses the line; the fan's page says so.
	run(t, ops, chromedp.Click(chromedp.ID("dial-pause")))
	waitJS(t, ops, "the room is paused", `document.getElementById('room-state').dataset.paused === 'true'`)
	waitJS(t, fan, "the fan sees the pause", `document.getElementById('line').dataset.paused === 'true' && !document.getElementById('paused').classList.contains('hidden')`)
	accessible(t, ops)
	shot(t, ops, "ops")
	accessible(t, fan)
	shot(t, fan, "sale-queue")
	phone(t, fan)
	shot(t, fan, "sale-phone")
	desktop(t, fan)

	// Capacity and resume: the fan is let in. Focused as a person typing
	// would be, so the page's refresh leaves the field alone.
	run(t, ops,
		chromedp.Focus(chromedp.ID("dial-capacity")),
		chromedp.SetValue(chromedp.ID("dial-capacity"), "5"),
		chromedp.Click(chromedp.ID("dial-save")),
	)
	waitJS(t, ops, "capacity applied", `document.getElementById('capacity').textContent === '5'`)
	run(t, ops, chromedp.Click(chromedp.ID("dial-pause")))
	waitJS(t, fan, "admitted", `document.body.dataset.admitted === 'true'`)

	// Two seats picked on the canvas, held, with a countdown.
	for _, n := range []int{3, 4} {
		clickSeat(t, fan, 2, n)
	}
	waitJS(t, fan, "two seats picked", `document.getElementById('picked').dataset.count === '2'`)
	run(t, fan, chromedp.Click(chromedp.ID("hold")))
	waitJS(t, fan, "the hold and its countdown", `!document.getElementById('step-hold').classList.contains('hidden') && Number(document.getElementById('countdown').dataset.seconds) > 500`)
	require.Contains(t, textOf(t, fan, "hold-summary"), "A-2-3")
	first := evalJS[int](t, fan, `Number(document.getElementById('countdown').dataset.seconds)`)
	waitJS(t, fan, "the countdown runs", fmt.Sprintf(`Number(document.getElementById('countdown').dataset.seconds) < %d`, first))
	waitJS(t, fan, "the live map shows the two seats taken", `document.getElementById('seatmap').dataset.free === '30'`)
	shot(t, fan, "sale-hold")

	// Pay on the sandbox's checkout page, come back to tickets.
	run(t, fan, chromedp.Click(chromedp.ID("pay")))
	waitJS(t, fan, "the checkout page", `location.pathname === '/demo/checkout' && !document.getElementById('confirm').disabled`)
	accessible(t, fan)
	shot(t, fan, "checkout")
	run(t, fan, chromedp.Click(chromedp.ID("confirm")))
	waitJS(t, fan, "two tickets with codes", `location.pathname === '/demo/sale/`+event+`' && document.querySelectorAll('#tickets li[data-window]').length === 2`)
	window := evalJS[string](t, fan, `document.querySelector('#tickets li').dataset.window`)
	payload := textOf(t, fan, "tickets")
	shot(t, fan, "sale-tickets")
	// The code changes with its 15-second window.
	waitJS(t, fan, "the QR code rotates", fmt.Sprintf(`document.querySelector('#tickets li').dataset.window !== %q`, window))
	require.NotEqual(t, payload, textOf(t, fan, "tickets"))
	require.True(t, evalJS[bool](t, fan, `[...document.querySelectorAll('#tickets img')].every((i) => i.complete && i.naturalWidth > 0)`), "QR images load")
}

// clickSeat clicks seat (row, number) of the section shown, where the
// page drew it on the canvas.
func clickSeat(t *testing.T, page context.Context, row, number int) {
	t.Helper()
	xy := evalJS[[]float64](t, page, fmt.Sprintf(`(() => {
		const c = document.getElementById('seatmap');
		c.scrollIntoView({block: 'center'});
		const r = c.getBoundingClientRect();
		const cell = Number(c.dataset.cell), pad = Number(c.dataset.pad);
		return [r.left + pad + (%d - 0.5) * cell, r.top + pad + (%d - 0.5) * cell];
	})()`, number, row))
	run(t, page, chromedp.MouseClickXY(xy[0], xy[1]))
}
