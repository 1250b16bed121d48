package presence

import (
	"context"
	"fmt"

	"github.com/presenced/presenced/config"
)

// viewer is who asks to see presence: the user and the rooms of their token.
type viewer struct {
	User  string
	Rooms []string
}

// policy decides whose presence a viewer may see.
type policy interface {
	// Forbidden returns the subjects the viewer may not see.
	Forbidden(ctx context.Context, v viewer, subjects []string) ([]string, error)
}

// contactLister answers which candidates are on an owner's contact list.
type contactLister interface {
	ContactsAmong(ctx context.Context, owner string, candidates []string) ([]string, error)
}

// roomIndex answers which subjects share one of the rooms.
type roomIndex interface {
	sharesRoom(ctx context.Context, rooms []string, subjects []string) ([]bool, error)
}

// newPolicy builds the configured policy. contacts may be nil only for the
// open policy.
func newPolicy(name string, contacts contactLister, rooms roomIndex) (policy, error) {
	switch name {
	case config.PresencePolicyOpen:
		return openPolicy{}, nil
	case config.PresencePolicyContacts:
		if contacts == nil {
			return nil, fmt.Errorf("presence: the contacts policy needs PostgreSQL")
		}
		return &contactsPolicy{contacts: contacts, rooms: rooms}, nil
	}
	return nil, fmt.Errorf("presence: unknown policy %q", name)
}

// openPolicy lets every authenticated user see everyone.
type openPolicy struct{}

func (openPolicy) Forbidden(context.Context, viewer, []string) ([]string, error) { return nil, nil }

// contactsPolicy shows a subject to a viewer who has it as a contact or
// shares a room with it (rooms come from each user's latest token).
type contactsPolicy struct {
	contacts contactLister
	rooms    roomIndex
}

func (p *contactsPolicy) Forbidden(ctx context.Context, v viewer, subjects []string) ([]string, error) {
	var rest []string
	for _, s := range subjects {
		if s != v.User {
			rest = append(rest, s)
		}
	}
	if len(rest) == 0 {
		return nil, nil
	}
	known, err := p.contacts.ContactsAmong(ctx, v.User, rest)
	if err != nil {
		return nil, err
	}
	isContact := make(map[string]bool, len(known))
	for _, k := range known {
		isContact[k] = true
	}
	var strangers []string
	for _, s := range rest {
		if !isContact[s] {
			strangers = append(strangers, s)
		}
	}
	if len(strangers) == 0 {
		return nil, nil
	}
	shared, err := p.rooms.sharesRoom(ctx, v.Rooms, strangers)
	if err != nil {
		return nil, err
	}
	var forbidden []string
	for i, s := range strangers {
		if !shared[i] {
			forbidden = append(forbidden, s)
		}
	}
	return forbidden, nil
}
