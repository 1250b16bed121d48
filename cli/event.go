package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/presenced/presenced/booking"
)

// EventCmd is `presenced event create`.
func EventCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "event", Short: "Manage on-sale events", Example: "  presenced event create --help"}
	var (
		spec                            booking.EventSpec
		sections, starts, opens, closes string
	)
	create := &cobra.Command{
		Use:   "create --id ID --sections A:20x30@4500,B:40x50@3000 --starts-at 2027-06-01T20:00:00Z",
		Short: "Create an event with its sections and seats (prices in minor units)",
		Example: `  # two sections: A with 20 rows of 30 seats at 45.00, B with 40 rows of 50 at 30.00
  presenced event create --id final-2027 --name "Cup Final" \
    --sections A:20x30@4500,B:40x50@3000 --starts-at 2027-06-01T20:00:00Z`,
		Args: cobra.NoArgs,
	}
	flags := configFlags(create, flagPostgres)
	create.RunE = func(cmd *cobra.Command, _ []string) error {
		var err error
		if spec.Sections, err = booking.ParseSections(sections); err != nil {
			return err
		}
		if spec.StartsAt, err = parseTime("--starts-at", starts); err != nil {
			return err
		}
		if opens != "" {
			if spec.SaleOpensAt, err = parseTime("--opens-at", opens); err != nil {
				return err
			}
		}
		if closes != "" {
			t, err := parseTime("--closes-at", closes)
			if err != nil {
				return err
			}
			spec.SaleClosesAt = &t
		}
		return withBooking(cmd, flags, func(b *booking.Module) error {
			sum, err := b.CreateEvent(cmd.Context(), spec)
			if err != nil {
				return err
			}
			out, _ := json.Marshal(sum)
			printf(cmd, "%s\n", out)
			return nil
		})
	}
	f := create.Flags()
	f.StringVar(&spec.ID, "id", "", "event id (letters, digits, '.', '_', '-')")
	f.StringVar(&spec.Name, "name", "", "display name (default: the id)")
	f.StringVar(&spec.Currency, "currency", "EUR", "ISO 4217 currency of the prices")
	f.StringVar(&sections, "sections", "", "sections as ID:ROWSxSEATS@PRICE, comma separated")
	f.StringVar(&starts, "starts-at", "", "when the event starts (RFC 3339)")
	f.StringVar(&opens, "opens-at", "", "when the sale opens (RFC 3339; default now)")
	f.StringVar(&closes, "closes-at", "", "when the sale closes (RFC 3339; default never)")
	f.IntVar(&spec.HoldMinutes, "hold-minutes", 10, "how long a hold lasts")
	cmd.AddCommand(create)
	return cmd
}

func parseTime(flag, s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, fmt.Errorf("%s is required", flag)
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("%s: want RFC 3339 (2027-06-01T20:00:00Z): %w", flag, err)
	}
	return t, nil
}

// DemoCmd is `presenced demo`: seed a realistic venue to play with.
func DemoCmd() *cobra.Command {
	var id string
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Seed a demo on-sale event (a 50,000-seat arena with a promotion code) and hotels in six cities",
		Example: `  presenced demo                  # into the development server's database (./var)
  presenced demo --event arena-2  # another arena beside it`,
		Args: cobra.NoArgs,
	}
	flags := configFlags(cmd, flagPostgres)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		return withBooking(cmd, flags, func(b *booking.Module) error {
			spec := demoArena(id)
			sum, err := b.CreateEvent(cmd.Context(), spec)
			if errors.Is(err, booking.ErrEventExists) {
				printf(cmd, "event %s already exists\n", id)
				return seedDemoHotels(cmd, b)
			}
			if err != nil {
				return err
			}
			if err := b.CreatePromotion(cmd.Context(), id, booking.PromotionSpec{
				Code: "EARLYBIRD", DiscountBps: 2000, MaxUses: 500,
			}); err != nil {
				return err
			}
			printf(cmd, "event %s: %d seats in %d sections, promotion EARLYBIRD (20%% off, 500 uses)\n", sum.ID, sum.Seats, sum.Sections)
			printf(cmd, "seat map: GET /v1/events/%s/seats  live: GET /v1/events/%s/live\n", id, id)
			return seedDemoHotels(cmd, b)
		})
	}
	cmd.Flags().StringVar(&id, "event", "demo-arena", "id of the demo event")
	return cmd
}

// demoArena is ten sections of 50 rows × 100 seats: 50,000 seats, priced
// from the floor to the back.
func demoArena(id string) booking.EventSpec {
	prices := []int64{18000, 15000, 12000, 12000, 9500, 9500, 7000, 7000, 4500, 4500}
	var secs []booking.SectionSpec
	for i, p := range prices {
		name := string(rune('A' + i))
		secs = append(secs, booking.SectionSpec{ID: name, Name: "Section " + name, Rows: 50, SeatsPerRow: 100, BasePrice: p})
	}
	return booking.EventSpec{
		ID: id, Name: "Demo Arena Night", Currency: "EUR",
		StartsAt:    time.Now().Add(30 * 24 * time.Hour).UTC().Truncate(time.Hour),
		SaleOpensAt: time.Now().UTC().Truncate(time.Second),
		HoldMinutes: 10, Sections: secs,
	}
}
