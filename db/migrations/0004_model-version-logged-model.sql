ALTER TABLE "model_versions" ADD COLUMN "storage_location" text;--> statement-breakpoint
ALTER TABLE "model_versions" ADD COLUMN "logged_model_id" text;