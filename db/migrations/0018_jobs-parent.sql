ALTER TABLE "jobs" ADD COLUMN "parent" text;--> statement-breakpoint
CREATE INDEX "jobs_org_parent_seq_idx" ON "jobs" USING btree ("organization_id","parent","seq");