-- The metrics primary key carries is_nan (INCLUDE: stored in the index, not part of the key), so a chart's series is
-- read from the index alone (an index-only scan) instead of a heap fetch per point. drizzle's primaryKey() has no
-- INCLUDE: db/schema/tracking.ts declares the same key columns and names this migration.
ALTER TABLE "metrics" DROP CONSTRAINT "metrics_run_id_key_step_timestamp_value_pk";--> statement-breakpoint
ALTER TABLE "metrics" ADD CONSTRAINT "metrics_run_id_key_step_timestamp_value_pk" PRIMARY KEY("run_id","key","step","timestamp","value") INCLUDE ("is_nan");--> statement-breakpoint
-- An index-only scan skips the heap only on pages the visibility map marks all-visible, which vacuum sets. Metrics
-- are only inserted: vacuum them after 1% of growth (Postgres' default waits for 20%), so most of a history is.
ALTER TABLE "metrics" SET (autovacuum_vacuum_insert_scale_factor = 0.01);
