ALTER TABLE "datasets" ALTER COLUMN "splits" DROP NOT NULL;--> statement-breakpoint
ALTER TABLE "datasets" ADD COLUMN "status" text DEFAULT 'ready' NOT NULL;--> statement-breakpoint
ALTER TABLE "datasets" ADD COLUMN "issues" jsonb;--> statement-breakpoint
ALTER TABLE "datasets" ADD COLUMN "job_id" text;