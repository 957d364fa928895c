CREATE TABLE "jobs" (
	"seq" bigserial NOT NULL,
	"id" text PRIMARY KEY NOT NULL,
	"organization_id" text NOT NULL,
	"name" text NOT NULL,
	"submitted_by" text NOT NULL,
	"type" text NOT NULL,
	"kind" text NOT NULL,
	"spec" jsonb NOT NULL,
	"status" text NOT NULL,
	"message" text,
	"workflow_id" text NOT NULL,
	"run_id" text,
	"idempotency_key" text,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"started_at" timestamp with time zone,
	"ended_at" timestamp with time zone,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
ALTER TABLE "jobs" ADD CONSTRAINT "jobs_organization_id_organizations_id_fk" FOREIGN KEY ("organization_id") REFERENCES "public"."organizations"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
CREATE INDEX "jobs_org_seq_idx" ON "jobs" USING btree ("organization_id","seq");--> statement-breakpoint
CREATE UNIQUE INDEX "jobs_org_idempotency_key_idx" ON "jobs" USING btree ("organization_id","idempotency_key");