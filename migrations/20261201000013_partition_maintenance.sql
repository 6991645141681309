-- Telemetry partitions are made by the server's maintenance task, never on the request path (issue 16): ingest
-- no longer creates a month's partition when a window arrives. Rows of a month without a partition wait in the
-- default partition until the task makes that month's partition (which moves them).
--
-- Creates the partitions of every month in [p_from, p_through] and of every month that has rows in the default
-- partition; returns how many partitions it made. Run by the app role through its maintenance door.

SET LOCAL ROLE gpuledger_owner;

CREATE FUNCTION gpuledger_maintain_telemetry_partitions(p_from date, p_through date) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    m       date;
    made    integer := 0;
BEGIN
    IF p_through < p_from OR p_through > p_from + interval '10 years' THEN
        RAISE EXCEPTION 'maintenance range % .. % is not a sensible one', p_from, p_through;
    END IF;
    FOR m IN
        SELECT generate_series(date_trunc('month', p_from), date_trunc('month', p_through), interval '1 month')::date
        UNION
        SELECT DISTINCT date_trunc('month', window_start)::date FROM telemetry_rollups_default
    LOOP
        IF to_regclass(format('telemetry_rollups_%s', to_char(m, 'YYYYMM'))) IS NULL THEN
            PERFORM gpuledger_ensure_telemetry_partition(m);
            made := made + 1;
        END IF;
    END LOOP;
    RETURN made;
END
$$;
REVOKE ALL ON FUNCTION gpuledger_maintain_telemetry_partitions(date, date) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION gpuledger_maintain_telemetry_partitions(date, date) TO gpuledger_app;

RESET ROLE;
