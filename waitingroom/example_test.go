package waitingroom_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/presenced/presenced/config"
	"github.com/presenced/presenced/internal/admission"
	"github.com/presenced/presenced/internal/keyring"
	"github.com/presenced/presenced/internal/module/moduletest"
	"github.com/presenced/presenced/internal/testenv"
	"github.com/presenced/presenced/store"
	"github.com/presenced/presenced/waitingroom"
)

// The checks other modules call once the verify part started: CheckPass
// reads the pass alone (its signature, expiry, user and event); Verify also
// wants the checkout lease the waiting room grants whoever it lets in, so a
// pass whose lease ended no longer admits; a lease is never revived.
func ExampleModule_Verify() {
	env := testenv.Example("ExampleModule_Verify")
	defer env.Close()
	ctx := context.Background()
	signing, _, _ := keyring.Generate("k1") // waitingroom.signing_key
	ring, _ := keyring.Parse(signing, nil)
	m, err := waitingroom.New(waitingroom.Deps{
		Config: config.Default().Waitingroom, Keys: store.NewKeyspace(testenv.Prefix(env)),
		PassKeys: func() (*keyring.Ring, error) { return ring, nil },
		Metrics:  prometheus.NewRegistry(), Log: testenv.Logger(),
	})
	if err != nil {
		panic(err)
	}
	host := moduletest.New(env, nil, moduletest.Stores{Redis: testenv.Redis(env)})
	if err := m.StartVerify(ctx, host); err != nil {
		panic(err)
	}
	// The admit plane signs a pass as it lets ann in.
	issuer, _ := admission.NewIssuer(ring, 10*time.Minute)
	pass, _, _ := issuer.Issue("final-2027", "ann", time.Now().Add(10*time.Minute), time.Now())

	fmt.Println("ann's pass:", m.CheckPass(pass, "final-2027", "ann"))
	fmt.Println("bob with it:", errors.Is(m.CheckPass(pass, "final-2027", "bob"), waitingroom.ErrNotAdmitted))
	fmt.Println("without a lease:", errors.Is(m.Verify(ctx, pass, "final-2027", "ann"), waitingroom.ErrNotAdmitted))
	fmt.Println("extend:", errors.Is(m.Extend(ctx, "final-2027", "ann", time.Minute), waitingroom.ErrNotAdmitted))
	fmt.Println("release:", m.Release(ctx, "final-2027", "ann"))
	// Output:
	// ann's pass: <nil>
	// bob with it: true
	// without a lease: true
	// extend: true
	// release: <nil>
}
