-- Best available for several buyers in one statement (booking's group
-- commit of best-available holds): best_available_pick_many picks for each
-- buyer in turn, as best_available_seats would one after another, each
-- pick leaving out the seats of the picks before it. SKIP LOCKED skips
-- only other transactions' locks, and the picked seats stay AVAILABLE
-- until the batch writes them, so best_available_seats takes the seats to
-- leave out (p_exclude): they count as taken, in the free runs too. The
-- five-argument form stays for processes of the version before.

CREATE FUNCTION best_available_seats(p_event text, p_section text, p_quantity integer, p_adjacent boolean,
	p_max_base bigint, p_exclude bigint[], OUT picked bigint[], OUT busy boolean) LANGUAGE plpgsql AS $$
DECLARE
	width integer;
	first_row integer;
	last_row integer;
	from_row integer;
	centred integer;
	cand record;
	run bigint[];
	waited bigint[];
	got bigint[];
	stray boolean := false;
	rounds integer := 0;
BEGIN
	busy := false;
	LOOP
		waited := NULL;
		-- The nearest row with a fitting free seat, in the order of the
		-- section's key.
		SELECT s.row_num INTO first_row FROM seats s
		WHERE s.event_id = p_event AND s.section_id = p_section AND s.status = 'AVAILABLE' AND s.id <> ALL(p_exclude)
		  AND (p_max_base IS NULL OR s.base_price <= p_max_base)
		ORDER BY s.row_num, s.seat_num LIMIT 1;
		IF first_row IS NULL THEN
			RETURN; -- nothing free that fits: sold out for this request
		END IF;
		-- The last seat of the section: its row is the last, its number
		-- every row's width (rows are uniform in a section).
		SELECT s.row_num, s.seat_num INTO last_row, width FROM seats s
		WHERE s.event_id = p_event AND s.section_id = p_section
		ORDER BY s.row_num DESC, s.seat_num DESC LIMIT 1;
		IF p_adjacent THEN
			-- The row's centred run, moved by less than the quantity so
			-- that the seats left of it are a multiple of it.
			centred := ((width - p_quantity) / 2 + p_quantity / 2) / p_quantity * p_quantity + 1;
			-- One row at a time from the nearest (its free seats, read
			-- from seats_free): buyers who find the best runs of that row
			-- locked by others go on to the next, not to a wait.
			from_row := first_row;
			WHILE from_row <= last_row LOOP
				FOR cand IN
					WITH free AS (
						SELECT s.row_num, s.seat_num,
						       s.seat_num - row_number() OVER (PARTITION BY s.row_num ORDER BY s.seat_num) AS block
						FROM seats s
						WHERE s.event_id = p_event AND s.section_id = p_section AND s.status = 'AVAILABLE' AND s.id <> ALL(p_exclude)
						  AND s.row_num = from_row
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
					-- Locked by the transaction itself, not a subtransaction:
					-- a seat a subtransaction locked and its parent then
					-- updates gets a MultiXact for its deleter, and a scan
					-- can then never tell the old version dead, so the
					-- entries of taken seats stayed in seats_free until a
					-- vacuum, and every pick read them again.
					SELECT array_agg(id ORDER BY id) INTO got FROM (
						SELECT id FROM seats WHERE id = ANY(run) AND status = 'AVAILABLE' AND id <> ALL(p_exclude) ORDER BY id FOR UPDATE SKIP LOCKED) l;
					IF cardinality(got) = p_quantity THEN
						picked := got;
						RETURN;
					END IF;
					-- Half of a run (another buyer's overlapping run holds the
					-- rest) stays locked until the statement ends.
					stray := stray OR got IS NOT NULL;
					waited := coalesce(waited, run);
				END LOOP;
				from_row := from_row + 1;
			END LOOP;
		ELSE
			-- Any seats: the best free ones nobody has locked.
			BEGIN
				SELECT array_agg(id ORDER BY id) INTO picked FROM (
					SELECT s.id FROM seats s
					WHERE s.event_id = p_event AND s.section_id = p_section AND s.status = 'AVAILABLE' AND s.id <> ALL(p_exclude)
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
				WHERE s.event_id = p_event AND s.section_id = p_section AND s.status = 'AVAILABLE' AND s.id <> ALL(p_exclude)
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
		IF stray THEN
			-- Waiting while holding half runs could close a cycle with
			-- another waiter's: the caller runs the statement again.
			busy := true;
			RETURN;
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

CREATE OR REPLACE FUNCTION best_available_seats(p_event text, p_section text, p_quantity integer, p_adjacent boolean,
	p_max_base bigint, OUT picked bigint[], OUT busy boolean) LANGUAGE sql AS $$
	SELECT b.picked, b.busy FROM best_available_seats(p_event, p_section, p_quantity, p_adjacent, p_max_base, '{}'::bigint[]) b
$$;

-- best_available_pick_many picks for the buyers of a batch in their order
-- (n: the position in the arrays); a buyer whose section is null is
-- skipped (what was read refuses it before its seats). A pick that found
-- nothing returns null seats; busy as best_available_seats.
CREATE FUNCTION best_available_pick_many(p_events text[], p_sections text[], p_quantities integer[], p_adjacent boolean[],
	p_max_base bigint[]) RETURNS TABLE (n integer, seats bigint[], all_busy boolean) LANGUAGE plpgsql AS $$
DECLARE
	taken bigint[] := '{}';
	got record;
BEGIN
	FOR i IN 1 .. coalesce(cardinality(p_events), 0) LOOP
		IF p_sections[i] IS NULL THEN
			CONTINUE;
		END IF;
		SELECT b.picked, b.busy INTO got
		FROM best_available_seats(p_events[i], p_sections[i], p_quantities[i], p_adjacent[i], p_max_base[i], taken) b;
		n := i;
		seats := got.picked;
		all_busy := got.busy;
		taken := taken || coalesce(got.picked, '{}'::bigint[]);
		RETURN NEXT;
	END LOOP;
END
$$;
