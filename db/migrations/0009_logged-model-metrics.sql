CREATE TABLE "logged_model_metrics" (
	"model_id" text NOT NULL,
	"key" text NOT NULL,
	"timestamp" bigint NOT NULL,
	"step" bigint NOT NULL,
	"run_id" text NOT NULL,
	"value" double precision NOT NULL,
	"is_nan" boolean DEFAULT false NOT NULL,
	"dataset_name" text DEFAULT '' NOT NULL,
	"dataset_digest" text DEFAULT '' NOT NULL,
	CONSTRAINT "logged_model_metrics_model_id_key_timestamp_step_run_id_pk" PRIMARY KEY("model_id","key","timestamp","step","run_id")
);
--> statement-breakpoint
ALTER TABLE "logged_model_metrics" ADD CONSTRAINT "logged_model_metrics_model_id_logged_models_id_fk" FOREIGN KEY ("model_id") REFERENCES "public"."logged_models"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
CREATE INDEX "logged_model_metrics_dataset_idx" ON "logged_model_metrics" USING btree ("dataset_name","dataset_digest");