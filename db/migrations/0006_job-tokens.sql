ALTER TABLE "api_tokens" ADD COLUMN "run_id" text;--> statement-breakpoint
ALTER TABLE "api_tokens" ADD COLUMN "expires_at" timestamp with time zone;