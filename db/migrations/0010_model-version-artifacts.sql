ALTER TABLE "model_versions" ADD COLUMN "status" text DEFAULT 'ready' NOT NULL;--> statement-breakpoint
ALTER TABLE "model_versions" ADD COLUMN "checksum" text;