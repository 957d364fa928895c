CREATE TABLE "experiment_tags" (
	"experiment_id" text NOT NULL,
	"key" text NOT NULL,
	"value" text NOT NULL,
	CONSTRAINT "experiment_tags_experiment_id_key_pk" PRIMARY KEY("experiment_id","key")
);
--> statement-breakpoint
CREATE TABLE "run_tags" (
	"run_id" text NOT NULL,
	"key" text NOT NULL,
	"value" text NOT NULL,
	CONSTRAINT "run_tags_run_id_key_pk" PRIMARY KEY("run_id","key")
);
--> statement-breakpoint
ALTER TABLE "experiments" ADD COLUMN "last_update_time" bigint;--> statement-breakpoint
ALTER TABLE "latest_metrics" ADD COLUMN "is_nan" boolean DEFAULT false NOT NULL;--> statement-breakpoint
ALTER TABLE "runs" ADD COLUMN "lifecycle_stage" text DEFAULT 'active' NOT NULL;--> statement-breakpoint
ALTER TABLE "runs" ADD COLUMN "deleted_time" bigint;--> statement-breakpoint
ALTER TABLE "experiment_tags" ADD CONSTRAINT "experiment_tags_experiment_id_experiments_id_fk" FOREIGN KEY ("experiment_id") REFERENCES "public"."experiments"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "run_tags" ADD CONSTRAINT "run_tags_run_id_runs_id_fk" FOREIGN KEY ("run_id") REFERENCES "public"."runs"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
CREATE INDEX "latest_metrics_key_value_idx" ON "latest_metrics" USING btree ("key","value");--> statement-breakpoint
CREATE INDEX "runs_search_idx" ON "runs" USING btree ("organization_id","experiment_id","lifecycle_stage","start_time");