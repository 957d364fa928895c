CREATE TABLE "eval_suites" (
	"id" text PRIMARY KEY NOT NULL,
	"organization_id" text NOT NULL,
	"name" text NOT NULL,
	"version" integer NOT NULL,
	"definition" jsonb NOT NULL,
	"created_by" text NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
ALTER TABLE "eval_suites" ADD CONSTRAINT "eval_suites_organization_id_organizations_id_fk" FOREIGN KEY ("organization_id") REFERENCES "public"."organizations"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
CREATE UNIQUE INDEX "eval_suites_org_name_version_idx" ON "eval_suites" USING btree ("organization_id","name","version");--> statement-breakpoint
CREATE INDEX "eval_suites_org_created_idx" ON "eval_suites" USING btree ("organization_id","created_at");