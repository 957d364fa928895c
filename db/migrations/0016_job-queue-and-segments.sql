ALTER TABLE "jobs" ADD COLUMN "queue" jsonb;--> statement-breakpoint
ALTER TABLE "jobs" ADD COLUMN "segments" jsonb DEFAULT '[]'::jsonb NOT NULL;