package presence

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// contactStore stores contact lists in PostgreSQL (table presence_contacts).
type contactStore struct {
	pool *pgxpool.Pool
}

// newContacts returns the contact store over pool.
func newContacts(pool *pgxpool.Pool) *contactStore { return &contactStore{pool: pool} }

var _ contactLister = (*contactStore)(nil)

// Replace sets owner's contact list to contacts in one transaction.
func (c *contactStore) Replace(ctx context.Context, owner string, contacts []string) error {
	err := pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `DELETE FROM presence_contacts WHERE owner_id = $1 AND NOT (contact_id = ANY($2))`, owner, contacts); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `
			INSERT INTO presence_contacts (owner_id, contact_id)
			SELECT $1, unnest($2::text[])
			ON CONFLICT DO NOTHING`, owner, contacts)
		return err
	})
	if err != nil {
		return fmt.Errorf("presence: replace contacts of %s: %w", owner, err)
	}
	return nil
}

// List returns owner's contacts, sorted.
func (c *contactStore) List(ctx context.Context, owner string) ([]string, error) {
	rows, err := c.pool.Query(ctx, `SELECT contact_id FROM presence_contacts WHERE owner_id = $1 ORDER BY contact_id`, owner)
	if err != nil {
		return nil, fmt.Errorf("presence: list contacts: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("presence: list contacts: %w", err)
	}
	if out == nil {
		out = []string{}
	}
	return out, nil
}

// ContactsAmong returns the candidates on owner's list.
func (c *contactStore) ContactsAmong(ctx context.Context, owner string, candidates []string) ([]string, error) {
	rows, err := c.pool.Query(ctx, `SELECT contact_id FROM presence_contacts WHERE owner_id = $1 AND contact_id = ANY($2)`, owner, candidates)
	if err != nil {
		return nil, fmt.Errorf("presence: check contacts: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("presence: check contacts: %w", err)
	}
	return out, nil
}

// ListedBy returns the owners who have viewer on their list.
func (c *contactStore) ListedBy(ctx context.Context, viewer string, owners []string) ([]string, error) {
	rows, err := c.pool.Query(ctx, `SELECT owner_id FROM presence_contacts WHERE contact_id = $1 AND owner_id = ANY($2)`, viewer, owners)
	if err != nil {
		return nil, fmt.Errorf("presence: check listing contacts: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("presence: check listing contacts: %w", err)
	}
	return out, nil
}
