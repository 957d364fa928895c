CREATE TABLE "artifact_objects" (
	"key" text PRIMARY KEY NOT NULL,
	"organization_id" text NOT NULL,
	"size_bytes" bigint NOT NULL,
	"sha256" text NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
CREATE TABLE "logged_model_params" (
	"model_id" text NOT NULL,
	"key" text NOT NULL,
	"value" text NOT NULL,
	CONSTRAINT "logged_model_params_model_id_key_pk" PRIMARY KEY("model_id","key")
);
--> statement-breakpoint
CREATE TABLE "logged_model_tags" (
	"model_id" text NOT NULL,
	"key" text NOT NULL,
	"value" text NOT NULL,
	CONSTRAINT "logged_model_tags_model_id_key_pk" PRIMARY KEY("model_id","key")
);
--> statement-breakpoint
CREATE TABLE "logged_models" (
	"id" text PRIMARY KEY NOT NULL,
	"organization_id" text NOT NULL,
	"experiment_id" text NOT NULL,
	"name" text NOT NULL,
	"artifact_location" text NOT NULL,
	"model_type" text DEFAULT '' NOT NULL,
	"source_run_id" text,
	"status" text NOT NULL,
	"status_message" text DEFAULT '' NOT NULL,
	"lifecycle_stage" text DEFAULT 'active' NOT NULL,
	"creation_time" bigint NOT NULL,
	"last_updated_time" bigint NOT NULL
);
--> statement-breakpoint
CREATE TABLE "mlflow_datasets" (
	"id" text PRIMARY KEY NOT NULL,
	"experiment_id" text NOT NULL,
	"name" text NOT NULL,
	"digest" text NOT NULL,
	"source_type" text NOT NULL,
	"source" text NOT NULL,
	"schema" text,
	"profile" text
);
--> statement-breakpoint
CREATE TABLE "run_dataset_inputs" (
	"run_id" text NOT NULL,
	"dataset_id" text NOT NULL,
	"tags" jsonb DEFAULT '[]'::jsonb NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "run_dataset_inputs_run_id_dataset_id_pk" PRIMARY KEY("run_id","dataset_id")
);
--> statement-breakpoint
CREATE TABLE "run_models" (
	"run_id" text NOT NULL,
	"model_id" text NOT NULL,
	"direction" text NOT NULL,
	"step" bigint DEFAULT 0 NOT NULL,
	CONSTRAINT "run_models_run_id_model_id_direction_pk" PRIMARY KEY("run_id","model_id","direction")
);
--> statement-breakpoint
CREATE TABLE "hpo_sweeps" (
	"id" text PRIMARY KEY NOT NULL,
	"organization_id" text NOT NULL,
	"experiment_id" text NOT NULL,
	"strategy" text NOT NULL,
	"status" text NOT NULL,
	"config" jsonb NOT NULL,
	"space_key" text NOT NULL,
	"best_trial" integer,
	"created_by" text NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
CREATE TABLE "hpo_trials" (
	"sweep_id" text NOT NULL,
	"number" integer NOT NULL,
	"run_id" text NOT NULL,
	"status" text NOT NULL,
	"params" jsonb NOT NULL,
	"objective_values" jsonb,
	"metrics" jsonb DEFAULT '{}'::jsonb NOT NULL,
	"intermediate" jsonb DEFAULT '[]'::jsonb NOT NULL,
	"steps" integer DEFAULT 0 NOT NULL,
	"gpu_seconds" double precision DEFAULT 0 NOT NULL,
	"reason" text,
	"started_at" timestamp with time zone DEFAULT now() NOT NULL,
	"ended_at" timestamp with time zone,
	CONSTRAINT "hpo_trials_sweep_id_number_pk" PRIMARY KEY("sweep_id","number")
);
--> statement-breakpoint
CREATE TABLE "pbt_lineage" (
	"sweep_id" text NOT NULL,
	"member" integer NOT NULL,
	"round" integer NOT NULL,
	"parent_member" integer,
	"action" text NOT NULL,
	"params" jsonb NOT NULL,
	"step" integer NOT NULL,
	"value" double precision,
	"checkpoint" text,
	"gpu_seconds" double precision DEFAULT 0 NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "pbt_lineage_sweep_id_member_round_pk" PRIMARY KEY("sweep_id","member","round")
);
--> statement-breakpoint
ALTER TABLE "artifact_objects" ADD CONSTRAINT "artifact_objects_organization_id_organizations_id_fk" FOREIGN KEY ("organization_id") REFERENCES "public"."organizations"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "logged_model_params" ADD CONSTRAINT "logged_model_params_model_id_logged_models_id_fk" FOREIGN KEY ("model_id") REFERENCES "public"."logged_models"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "logged_model_tags" ADD CONSTRAINT "logged_model_tags_model_id_logged_models_id_fk" FOREIGN KEY ("model_id") REFERENCES "public"."logged_models"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "logged_models" ADD CONSTRAINT "logged_models_organization_id_organizations_id_fk" FOREIGN KEY ("organization_id") REFERENCES "public"."organizations"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "logged_models" ADD CONSTRAINT "logged_models_experiment_id_experiments_id_fk" FOREIGN KEY ("experiment_id") REFERENCES "public"."experiments"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "mlflow_datasets" ADD CONSTRAINT "mlflow_datasets_experiment_id_experiments_id_fk" FOREIGN KEY ("experiment_id") REFERENCES "public"."experiments"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "run_dataset_inputs" ADD CONSTRAINT "run_dataset_inputs_run_id_runs_id_fk" FOREIGN KEY ("run_id") REFERENCES "public"."runs"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "run_dataset_inputs" ADD CONSTRAINT "run_dataset_inputs_dataset_id_mlflow_datasets_id_fk" FOREIGN KEY ("dataset_id") REFERENCES "public"."mlflow_datasets"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "run_models" ADD CONSTRAINT "run_models_run_id_runs_id_fk" FOREIGN KEY ("run_id") REFERENCES "public"."runs"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "hpo_sweeps" ADD CONSTRAINT "hpo_sweeps_organization_id_organizations_id_fk" FOREIGN KEY ("organization_id") REFERENCES "public"."organizations"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "hpo_sweeps" ADD CONSTRAINT "hpo_sweeps_experiment_id_experiments_id_fk" FOREIGN KEY ("experiment_id") REFERENCES "public"."experiments"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "hpo_trials" ADD CONSTRAINT "hpo_trials_sweep_id_hpo_sweeps_id_fk" FOREIGN KEY ("sweep_id") REFERENCES "public"."hpo_sweeps"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "hpo_trials" ADD CONSTRAINT "hpo_trials_run_id_runs_id_fk" FOREIGN KEY ("run_id") REFERENCES "public"."runs"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "pbt_lineage" ADD CONSTRAINT "pbt_lineage_sweep_id_hpo_sweeps_id_fk" FOREIGN KEY ("sweep_id") REFERENCES "public"."hpo_sweeps"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
CREATE INDEX "artifact_objects_org_key_idx" ON "artifact_objects" USING btree ("organization_id","key" text_pattern_ops);--> statement-breakpoint
CREATE INDEX "logged_models_search_idx" ON "logged_models" USING btree ("organization_id","experiment_id","lifecycle_stage","creation_time");--> statement-breakpoint
CREATE UNIQUE INDEX "mlflow_datasets_exp_name_digest_idx" ON "mlflow_datasets" USING btree ("experiment_id","name","digest");--> statement-breakpoint
CREATE INDEX "hpo_sweeps_org_created_idx" ON "hpo_sweeps" USING btree ("organization_id","created_at");--> statement-breakpoint
CREATE INDEX "hpo_sweeps_space_idx" ON "hpo_sweeps" USING btree ("organization_id","space_key");