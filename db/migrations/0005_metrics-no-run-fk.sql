ALTER TABLE "metrics" DROP CONSTRAINT "metrics_run_id_runs_id_fk";
