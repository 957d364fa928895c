CREATE TABLE "api_tokens" (
	"id" text PRIMARY KEY NOT NULL,
	"organization_id" text NOT NULL,
	"subject" text NOT NULL,
	"role" text NOT NULL,
	"token_sha256" text NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
CREATE TABLE "audit_log" (
	"id" text PRIMARY KEY NOT NULL,
	"organization_id" text NOT NULL,
	"actor" text NOT NULL,
	"action" text NOT NULL,
	"target" text NOT NULL,
	"detail" text DEFAULT '{}' NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
CREATE TABLE "organizations" (
	"id" text PRIMARY KEY NOT NULL,
	"name" text NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "organizations_name_unique" UNIQUE("name")
);
--> statement-breakpoint
CREATE TABLE "datasets" (
	"id" text PRIMARY KEY NOT NULL,
	"organization_id" text NOT NULL,
	"name" text NOT NULL,
	"version" integer NOT NULL,
	"format" text NOT NULL,
	"storage_path" text NOT NULL,
	"size_bytes" bigint NOT NULL,
	"num_records" integer NOT NULL,
	"sha256" text NOT NULL,
	"schema" jsonb NOT NULL,
	"splits" jsonb NOT NULL,
	"metadata" jsonb NOT NULL,
	"tags" text[] NOT NULL,
	"lineage" jsonb NOT NULL,
	"created_by" text NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
CREATE TABLE "experiments" (
	"id" text PRIMARY KEY NOT NULL,
	"organization_id" text NOT NULL,
	"name" text NOT NULL,
	"artifact_location" text NOT NULL,
	"lifecycle_stage" text DEFAULT 'active' NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
CREATE TABLE "latest_metrics" (
	"run_id" text NOT NULL,
	"key" text NOT NULL,
	"step" bigint NOT NULL,
	"timestamp" bigint NOT NULL,
	"value" double precision NOT NULL,
	CONSTRAINT "latest_metrics_run_id_key_pk" PRIMARY KEY("run_id","key")
);
--> statement-breakpoint
CREATE TABLE "metrics" (
	"run_id" text NOT NULL,
	"key" text NOT NULL,
	"step" bigint NOT NULL,
	"timestamp" bigint NOT NULL,
	"value" double precision NOT NULL,
	"is_nan" boolean DEFAULT false NOT NULL,
	CONSTRAINT "metrics_run_id_key_step_timestamp_value_pk" PRIMARY KEY("run_id","key","step","timestamp","value")
);
--> statement-breakpoint
CREATE TABLE "run_artifacts" (
	"run_id" text NOT NULL,
	"path" text NOT NULL,
	"uri" text NOT NULL,
	"size_bytes" bigint NOT NULL,
	"sha256" text NOT NULL,
	"metadata" jsonb DEFAULT '{}'::jsonb NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "run_artifacts_run_id_path_pk" PRIMARY KEY("run_id","path")
);
--> statement-breakpoint
CREATE TABLE "run_params" (
	"run_id" text NOT NULL,
	"key" text NOT NULL,
	"value" text NOT NULL,
	CONSTRAINT "run_params_run_id_key_pk" PRIMARY KEY("run_id","key")
);
--> statement-breakpoint
CREATE TABLE "runs" (
	"id" text PRIMARY KEY NOT NULL,
	"organization_id" text NOT NULL,
	"experiment_id" text NOT NULL,
	"name" text NOT NULL,
	"status" text NOT NULL,
	"user_id" text NOT NULL,
	"artifact_uri" text NOT NULL,
	"config" jsonb DEFAULT '{}'::jsonb NOT NULL,
	"start_time" timestamp with time zone DEFAULT now() NOT NULL,
	"end_time" timestamp with time zone
);
--> statement-breakpoint
CREATE TABLE "model_versions" (
	"id" text PRIMARY KEY NOT NULL,
	"organization_id" text NOT NULL,
	"model_id" text NOT NULL,
	"version" integer NOT NULL,
	"stage" text NOT NULL,
	"run_id" text,
	"dataset_id" text,
	"architecture" text NOT NULL,
	"base_model" text NOT NULL,
	"method" text NOT NULL,
	"artifacts" jsonb NOT NULL,
	"metrics" jsonb NOT NULL,
	"training_config" jsonb NOT NULL,
	"lineage" jsonb NOT NULL,
	"tags" jsonb DEFAULT '{}'::jsonb NOT NULL,
	"created_by" text NOT NULL,
	"source_pipeline" text,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"stage_changed_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
CREATE TABLE "registered_models" (
	"id" text PRIMARY KEY NOT NULL,
	"organization_id" text NOT NULL,
	"name" text NOT NULL,
	"description" text DEFAULT '' NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
CREATE TABLE "outbox" (
	"id" bigserial PRIMARY KEY NOT NULL,
	"organization_id" text NOT NULL,
	"topic" text NOT NULL,
	"key" text NOT NULL,
	"payload" jsonb NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"published_at" timestamp with time zone
);
--> statement-breakpoint
CREATE TABLE "pipelines" (
	"id" text PRIMARY KEY NOT NULL,
	"organization_id" text NOT NULL,
	"model_name" text NOT NULL,
	"dataset_name" text NOT NULL,
	"stage" text NOT NULL,
	"outcome" text,
	"input" jsonb NOT NULL,
	"created_by" text NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
CREATE TABLE "schedules" (
	"id" text PRIMARY KEY NOT NULL,
	"organization_id" text NOT NULL,
	"name" text NOT NULL,
	"spec" jsonb NOT NULL,
	"pipeline" jsonb NOT NULL,
	"created_by" text NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
ALTER TABLE "api_tokens" ADD CONSTRAINT "api_tokens_organization_id_organizations_id_fk" FOREIGN KEY ("organization_id") REFERENCES "public"."organizations"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "audit_log" ADD CONSTRAINT "audit_log_organization_id_organizations_id_fk" FOREIGN KEY ("organization_id") REFERENCES "public"."organizations"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "datasets" ADD CONSTRAINT "datasets_organization_id_organizations_id_fk" FOREIGN KEY ("organization_id") REFERENCES "public"."organizations"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "experiments" ADD CONSTRAINT "experiments_organization_id_organizations_id_fk" FOREIGN KEY ("organization_id") REFERENCES "public"."organizations"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "latest_metrics" ADD CONSTRAINT "latest_metrics_run_id_runs_id_fk" FOREIGN KEY ("run_id") REFERENCES "public"."runs"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "metrics" ADD CONSTRAINT "metrics_run_id_runs_id_fk" FOREIGN KEY ("run_id") REFERENCES "public"."runs"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "run_artifacts" ADD CONSTRAINT "run_artifacts_run_id_runs_id_fk" FOREIGN KEY ("run_id") REFERENCES "public"."runs"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "run_params" ADD CONSTRAINT "run_params_run_id_runs_id_fk" FOREIGN KEY ("run_id") REFERENCES "public"."runs"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "runs" ADD CONSTRAINT "runs_organization_id_organizations_id_fk" FOREIGN KEY ("organization_id") REFERENCES "public"."organizations"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "runs" ADD CONSTRAINT "runs_experiment_id_experiments_id_fk" FOREIGN KEY ("experiment_id") REFERENCES "public"."experiments"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "model_versions" ADD CONSTRAINT "model_versions_organization_id_organizations_id_fk" FOREIGN KEY ("organization_id") REFERENCES "public"."organizations"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "model_versions" ADD CONSTRAINT "model_versions_model_id_registered_models_id_fk" FOREIGN KEY ("model_id") REFERENCES "public"."registered_models"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "model_versions" ADD CONSTRAINT "model_versions_run_id_runs_id_fk" FOREIGN KEY ("run_id") REFERENCES "public"."runs"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "model_versions" ADD CONSTRAINT "model_versions_dataset_id_datasets_id_fk" FOREIGN KEY ("dataset_id") REFERENCES "public"."datasets"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "registered_models" ADD CONSTRAINT "registered_models_organization_id_organizations_id_fk" FOREIGN KEY ("organization_id") REFERENCES "public"."organizations"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "outbox" ADD CONSTRAINT "outbox_organization_id_organizations_id_fk" FOREIGN KEY ("organization_id") REFERENCES "public"."organizations"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "pipelines" ADD CONSTRAINT "pipelines_organization_id_organizations_id_fk" FOREIGN KEY ("organization_id") REFERENCES "public"."organizations"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "schedules" ADD CONSTRAINT "schedules_organization_id_organizations_id_fk" FOREIGN KEY ("organization_id") REFERENCES "public"."organizations"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
CREATE UNIQUE INDEX "api_tokens_token_sha256_idx" ON "api_tokens" USING btree ("token_sha256");--> statement-breakpoint
CREATE UNIQUE INDEX "datasets_org_name_version_idx" ON "datasets" USING btree ("organization_id","name","version");--> statement-breakpoint
CREATE INDEX "datasets_org_created_idx" ON "datasets" USING btree ("organization_id","created_at");--> statement-breakpoint
CREATE UNIQUE INDEX "experiments_org_name_idx" ON "experiments" USING btree ("organization_id","name");--> statement-breakpoint
CREATE INDEX "runs_experiment_idx" ON "runs" USING btree ("experiment_id","start_time");--> statement-breakpoint
CREATE UNIQUE INDEX "model_versions_model_version_idx" ON "model_versions" USING btree ("model_id","version");--> statement-breakpoint
CREATE UNIQUE INDEX "model_versions_source_pipeline_idx" ON "model_versions" USING btree ("source_pipeline");--> statement-breakpoint
CREATE UNIQUE INDEX "model_versions_one_production_idx" ON "model_versions" USING btree ("model_id") WHERE "model_versions"."stage" = 'production';--> statement-breakpoint
CREATE INDEX "model_versions_org_idx" ON "model_versions" USING btree ("organization_id");--> statement-breakpoint
CREATE UNIQUE INDEX "registered_models_org_name_idx" ON "registered_models" USING btree ("organization_id","name");--> statement-breakpoint
CREATE INDEX "outbox_unpublished_idx" ON "outbox" USING btree ("id") WHERE "outbox"."published_at" is null;--> statement-breakpoint
CREATE INDEX "pipelines_org_created_idx" ON "pipelines" USING btree ("organization_id","created_at");--> statement-breakpoint
CREATE UNIQUE INDEX "schedules_org_name_idx" ON "schedules" USING btree ("organization_id","name");