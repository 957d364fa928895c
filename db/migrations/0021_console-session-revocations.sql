CREATE TABLE "console_session_revocations" (
	"session_id" text PRIMARY KEY NOT NULL,
	"expires_at" timestamp with time zone NOT NULL,
	"revoked_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
CREATE INDEX "console_session_revocations_expires_at_idx" ON "console_session_revocations" USING btree ("expires_at");