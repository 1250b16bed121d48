-- The hold path in two round trips: it reads without locking, then writes
-- everything in one implicit transaction whose statements refuse, by
-- constraint, any change that happened in between. What the code checked
-- under row locks before is now the schema's to enforce.

-- A seat becomes HELD only from AVAILABLE: a hold that read a seat free and
-- finds it taken (or blocked) when it writes fails as a whole. The trigger
-- fires only for that transition's refusals (its WHEN clause is evaluated
-- without calling the function), so it costs a hold nothing.
CREATE FUNCTION seat_held_only_when_available() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	RAISE EXCEPTION 'seat % is % and cannot be held', OLD.id, OLD.status
		USING ERRCODE = 'check_violation', CONSTRAINT = 'seat_held_only_when_available',
		      DETAIL = OLD.id::text;
END
$$;
CREATE TRIGGER seat_held_only_when_available
	BEFORE UPDATE OF status ON seats
	FOR EACH ROW WHEN (NEW.status = 'HELD' AND OLD.status <> 'AVAILABLE')
	EXECUTE FUNCTION seat_held_only_when_available();

-- The global cap of a promotion, under a name the code maps to
-- promotion_exhausted.
ALTER TABLE promotions RENAME CONSTRAINT promotions_check TO promotion_within_cap;

-- Seats are found from their reservation through reservation_items'
-- (reservation_id, seat_id) key, so holding, selling or releasing a seat
-- changes no indexed column of seats: the update can stay on its page
-- (HOT) instead of writing a new entry in every index of a big table. The
-- free tenth of each page of events created from now on gives it room.
DROP INDEX seats_by_reservation;
ALTER TABLE seats SET (fillfactor = 90);

-- The expiry worker's queue is a partial index of pending reservations.
-- A planner that believes it small (a table never analyzed, statistics
-- taken before a sale) would read it whole, filtered, for a hold's lookup
-- of one user's pending checkout, and it grows with the sale. The extra
-- predicate (always true: the column is NOT NULL) is implied by the
-- worker's `expires_at <= …` and by no key lookup of the hold path, so only
-- the worker can use the index.
DROP INDEX reservations_pending_expiry;
CREATE INDEX reservations_pending_expiry ON reservations (expires_at)
	WHERE status = 'PENDING_PAYMENT' AND expires_at IS NOT NULL;
