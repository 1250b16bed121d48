-- The browse plane's login: it may connect and read, nothing else. Table
-- privileges are granted by presenced's first migration.
CREATE ROLE presenced_readonly LOGIN PASSWORD 'readonly' NOSUPERUSER NOCREATEDB NOCREATEROLE;
