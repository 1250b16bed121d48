-- Presence contact lists. Under the "contacts" policy a user sees the
-- presence of the users on their list (and of room mates from their token).
-- The list is managed by the server-to-server API
-- PUT /v1/presence/contacts/{user}; it is directional: owner sees contact.
CREATE TABLE presence_contacts (
	owner_id   text        NOT NULL,
	contact_id text        NOT NULL,
	created_at timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (owner_id, contact_id),
	CONSTRAINT presence_contacts_owner_id CHECK (length(owner_id) BETWEEN 1 AND 128),
	CONSTRAINT presence_contacts_contact_id CHECK (length(contact_id) BETWEEN 1 AND 128),
	CONSTRAINT presence_contacts_not_self CHECK (owner_id <> contact_id)
);
