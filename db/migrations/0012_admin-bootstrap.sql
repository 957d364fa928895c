CREATE TABLE "catalogue_bootstrap" (
	"id" integer PRIMARY KEY DEFAULT 1 NOT NULL,
	"organization_id" text NOT NULL,
	"subject" text NOT NULL,
	"token_id" text NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "catalogue_bootstrap_one_row" CHECK ("catalogue_bootstrap"."id" = 1)
);
