-- The browse plane reads seat maps through a login that can only SELECT.
-- Operators create that login (presenced_readonly) themselves in production;
-- the private development cluster creates it at bootstrap. When it exists,
-- every table created by later migrations becomes readable by it.
DO $$
BEGIN
	IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'presenced_readonly') THEN
		EXECUTE format('GRANT USAGE ON SCHEMA %I TO presenced_readonly', current_schema());
		EXECUTE format('GRANT SELECT ON ALL TABLES IN SCHEMA %I TO presenced_readonly', current_schema());
		EXECUTE format('ALTER DEFAULT PRIVILEGES IN SCHEMA %I GRANT SELECT ON TABLES TO presenced_readonly', current_schema());
	END IF;
END
$$;
