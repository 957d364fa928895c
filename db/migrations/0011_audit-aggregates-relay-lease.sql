CREATE TABLE "relay_leases" (
	"name" text PRIMARY KEY NOT NULL,
	"holder" text NOT NULL,
	"expires_at" timestamp with time zone NOT NULL
);
--> statement-breakpoint
ALTER TABLE "audit_log" ADD COLUMN "aggregate_key" text;--> statement-breakpoint
ALTER TABLE "audit_log" ADD COLUMN "repeat_count" integer DEFAULT 1 NOT NULL;--> statement-breakpoint
CREATE UNIQUE INDEX "audit_log_aggregate_key_idx" ON "audit_log" USING btree ("aggregate_key");