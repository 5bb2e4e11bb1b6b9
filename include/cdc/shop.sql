-- The demo database `shop` whose changes the CDC chain captures: `lakehouse cdc up` creates it in the local database
-- it starts (include/cdc/database.py), docker-compose.yaml's `cdc-postgres` service runs it at its first start. A
-- team's own database (LAKEHOUSE_CDC_DATABASE_URL) gets none of this: the product only checks its tables.
CREATE TABLE IF NOT EXISTS public.customers (
    id bigint PRIMARY KEY,
    name text NOT NULL,
    email text NOT NULL,
    country text NOT NULL,
    updated_at timestamptz NOT NULL
);
CREATE TABLE IF NOT EXISTS public.orders (
    id bigint PRIMARY KEY,
    customer_id bigint NOT NULL REFERENCES public.customers (id),
    amount numeric(12, 2) NOT NULL,
    status text NOT NULL,
    updated_at timestamptz NOT NULL
);
