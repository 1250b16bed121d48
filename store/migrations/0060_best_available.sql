-- Best available: a hold names a section and a quantity, and the server
-- picks the seats. Buyers naming seats of a hot section all queue on the
-- same best seats' row locks; here each one locks the best seats nobody
-- else has locked (SKIP LOCKED), so concurrent buyers spread over the
-- free seats instead of waiting for each other.
--
-- The order (docs/booking.md): the row nearest the stage (lowest number)
-- first, then the seats whose middle is nearest the row's middle, then
-- the lowest seat number. A run of adjacent seats is only taken where it
-- touches the end of the row, a seat that is not free, or where it is the
-- row's centred run (moved so that the seats left of it are a multiple of
-- its size): rows fill outward from their middle, and holds of one size
-- strand no seat between them (at most width mod size at the row's end).
--
-- best_available_seats returns the seats it locked (in id order; null:
-- none locked) and whether it gave up while fitting seats were locked by
-- other transactions (busy: the caller answers "retry", not "sold out").
-- Rows are uniform in a section (rows × seats per row), so the widest
-- seat number is every row's width. Every lookup is a range of the
-- seats' key (event, section, row, number).
CREATE FUNCTION best_available_seats(p_event text, p_section text, p_quantity integer, p_adjacent boolean,
	p_max_base bigint, OUT picked bigint[], OUT busy boolean) LANGUAGE plpgsql AS $$
DECLARE
	width integer;
	first_row integer;
	last_row integer;
	from_row integer;
	centred integer;
	cand record;
	run bigint[];
	waited bigint[];
	rounds integer := 0;
BEGIN
	busy := false;
	LOOP
		waited := NULL;
		-- The nearest row with a fitting free seat, in the order of the
		-- section's key.
		SELECT s.row_num INTO first_row FROM seats s
		WHERE s.event_id = p_event AND s.section_id = p_section AND s.status = 'AVAILABLE'
		  AND (p_max_base IS NULL OR s.base_price <= p_max_base)
		ORDER BY s.row_num, s.seat_num LIMIT 1;
		IF first_row IS NULL THEN
			RETURN; -- nothing free that fits: sold out for this request
		END IF;
		SELECT s.seat_num INTO width FROM seats s
		WHERE s.event_id = p_event AND s.section_id = p_section AND s.row_num = first_row
		ORDER BY s.seat_num DESC LIMIT 1;
		IF p_adjacent THEN
			-- The row's centred run, moved by less than the quantity so
			-- that the seats left of it are a multiple of it.
			centred := ((width - p_quantity) / 2 + p_quantity / 2) / p_quantity * p_quantity + 1;
			SELECT s.row_num INTO last_row FROM seats s
			WHERE s.event_id = p_event AND s.section_id = p_section
			ORDER BY s.row_num DESC, s.seat_num DESC LIMIT 1;
			-- Four rows at a time from the nearest (a few hundred seats,
			-- not the section): buyers who find the best runs of those
			-- locked by others go on to the next four, not to a wait.
			from_row := first_row;
			WHILE from_row <= last_row LOOP
				FOR cand IN
					WITH free AS (
						SELECT s.row_num, s.seat_num,
						       s.seat_num - row_number() OVER (PARTITION BY s.row_num ORDER BY s.seat_num) AS block
						FROM seats s
						WHERE s.event_id = p_event AND s.section_id = p_section AND s.status = 'AVAILABLE'
						  AND s.row_num >= from_row AND s.row_num < from_row + 4
						  AND (p_max_base IS NULL OR s.base_price <= p_max_base)),
					blocks AS (
						SELECT row_num, min(seat_num) AS a, max(seat_num) AS b
						FROM free GROUP BY row_num, block HAVING count(*) >= p_quantity),
					runs AS (
						SELECT row_num, a AS first FROM blocks
						UNION SELECT row_num, b - p_quantity + 1 FROM blocks
						UNION SELECT row_num, centred FROM blocks WHERE centred BETWEEN a AND b - p_quantity + 1)
					SELECT row_num, first FROM runs
					ORDER BY row_num, abs(2 * first + p_quantity - 1 - (width + 1)), first
					LIMIT 64
				LOOP
					SELECT array_agg(s.id) INTO run FROM seats s
					WHERE s.event_id = p_event AND s.section_id = p_section AND s.row_num = cand.row_num
					  AND s.seat_num BETWEEN cand.first AND cand.first + p_quantity - 1;
					picked := best_available_lock(run, p_quantity, false);
					IF picked IS NOT NULL THEN
						RETURN;
					END IF;
					waited := coalesce(waited, run);
				END LOOP;
				from_row := from_row + 4;
			END LOOP;
		ELSE
			-- Any seats: the best free ones nobody has locked.
			BEGIN
				SELECT array_agg(id ORDER BY id) INTO picked FROM (
					SELECT s.id FROM seats s
					WHERE s.event_id = p_event AND s.section_id = p_section AND s.status = 'AVAILABLE'
					  AND s.row_num >= first_row AND (p_max_base IS NULL OR s.base_price <= p_max_base)
					ORDER BY s.row_num, abs(2 * s.seat_num - (width + 1)), s.seat_num
					FOR UPDATE SKIP LOCKED LIMIT p_quantity) l;
				IF cardinality(picked) = p_quantity THEN
					RETURN;
				END IF;
				RAISE EXCEPTION USING ERRCODE = 'PBA01';
			EXCEPTION WHEN SQLSTATE 'PBA01' THEN
				picked := NULL;
			END;
			SELECT array_agg(id) INTO waited FROM (
				SELECT s.id FROM seats s
				WHERE s.event_id = p_event AND s.section_id = p_section AND s.status = 'AVAILABLE'
				  AND s.row_num >= first_row AND (p_max_base IS NULL OR s.base_price <= p_max_base)
				ORDER BY s.row_num, abs(2 * s.seat_num - (width + 1)), s.seat_num
				LIMIT p_quantity) l;
			IF cardinality(waited) IS DISTINCT FROM p_quantity THEN
				waited := NULL;
			END IF;
		END IF;
		IF waited IS NULL THEN
			RETURN; -- nothing fits: sold out for this request
		END IF;
		rounds := rounds + 1;
		IF rounds > 64 THEN
			busy := true;
			RETURN;
		END IF;
		-- Every fitting seat was locked by other buyers, who may take it or
		-- let it go: wait for the best ones (lock_timeout bounds it),
		-- holding nothing else, so this wait is in no deadlock.
		picked := best_available_lock(waited, p_quantity, true);
		IF picked IS NOT NULL THEN
			RETURN;
		END IF;
	END LOOP;
END
$$;

-- best_available_lock locks all the seats of ids that are still free, or
-- none: a partial lock is rolled back at once (a subtransaction), so other
-- buyers can take those seats. wait: wait for a lock another transaction
-- holds instead of skipping its seat.
CREATE FUNCTION best_available_lock(ids bigint[], p_quantity integer, wait boolean)
	RETURNS bigint[] LANGUAGE plpgsql AS $$
DECLARE
	got bigint[];
BEGIN
	IF wait THEN
		SELECT array_agg(id ORDER BY id) INTO got FROM (
			SELECT id FROM seats WHERE id = ANY(ids) AND status = 'AVAILABLE' ORDER BY id FOR UPDATE) l;
	ELSE
		SELECT array_agg(id ORDER BY id) INTO got FROM (
			SELECT id FROM seats WHERE id = ANY(ids) AND status = 'AVAILABLE' ORDER BY id FOR UPDATE SKIP LOCKED) l;
	END IF;
	IF cardinality(got) = p_quantity THEN
		RETURN got;
	END IF;
	RAISE EXCEPTION USING ERRCODE = 'PBA01';
EXCEPTION WHEN SQLSTATE 'PBA01' THEN
	RETURN NULL;
END
$$;

-- A named-seat hold locks its seats with SKIP LOCKED and then asks this
-- whether it got them all: a seat another transaction holds locked right
-- now (a hold committing, a cancel, an expiry) refuses the hold at once,
-- as seats_being_held, instead of queueing on the row lock until the lock
-- timeout. Buyers of a hot seat are then told in milliseconds to retry or
-- take the best available.
CREATE FUNCTION seats_all_locked(wanted integer, locked bigint) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
	IF locked < wanted THEN
		RAISE EXCEPTION '% of % seats are being held by another transaction', wanted - locked, wanted
			USING ERRCODE = 'PBH01', CONSTRAINT = 'seats_being_held';
	END IF;
	RETURN true;
END
$$;
