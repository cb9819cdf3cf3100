-- Login roles of the docker-compose.yml deployment, one per process, each a
-- member of the group role deploy/postgres/least-privilege.sql grants to.
-- Run as the superuser BEFORE the migrations (the migrator logs in with its
-- login role from the first `etlctl migrate up`), with the three passwords
-- as psql variables:
--
--   psql -v ON_ERROR_STOP=1 -v migrator_password=... -v intake_password=... \
--        -v worker_password=... -d mightyetl -f deploy/postgres/compose-logins.sql
--
-- Idempotent: it creates what is missing and sets the passwords again.
-- least-privilege.sql, run after every `migrate up`, then grants the group
-- roles exactly what each process needs.

\set ON_ERROR_STOP on

BEGIN;

-- The group roles (least-privilege.sql creates them too, when missing).
SELECT format('CREATE ROLE %I NOLOGIN', r)
FROM unnest(ARRAY['mightyetl_migrator_role', 'mightyetl_worker_role',
                  'mightyetl_intake_role', 'mightyetl_relay_role',
                  'mightyetl_maintenance_role']) AS r
WHERE NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = r)
\gexec

SELECT format('CREATE ROLE %I LOGIN', l)
FROM unnest(ARRAY['mightyetl_migrator_login', 'mightyetl_intake_login', 'mightyetl_worker_login']) AS l
WHERE NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = l)
\gexec

ALTER ROLE mightyetl_migrator_login LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOBYPASSRLS PASSWORD :'migrator_password';
ALTER ROLE mightyetl_intake_login   LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOBYPASSRLS PASSWORD :'intake_password';
ALTER ROLE mightyetl_worker_login   LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOBYPASSRLS PASSWORD :'worker_password';

GRANT mightyetl_migrator_role TO mightyetl_migrator_login;
-- The intake runs the outbox relay in its own process.
GRANT mightyetl_intake_role, mightyetl_relay_role TO mightyetl_intake_login;
-- The worker runs the fleet's built-in retention when elected
-- (MIGHTYETL_MAINTENANCE_ENABLED, default true).
GRANT mightyetl_worker_role, mightyetl_maintenance_role TO mightyetl_worker_login;

-- Objects the migrator creates are owned by the group role, not the login.
ALTER ROLE mightyetl_migrator_login SET role = 'mightyetl_migrator_role';
-- The first migration needs somewhere to create its tables.
GRANT USAGE, CREATE ON SCHEMA public TO mightyetl_migrator_role;

COMMIT;
