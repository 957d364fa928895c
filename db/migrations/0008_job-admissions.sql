CREATE TABLE "job_admissions" (
	"job_name" text PRIMARY KEY NOT NULL,
	"organization_id" text NOT NULL,
	"priority" integer NOT NULL,
	"gpus" integer NOT NULL,
	"gpu_indices" integer[] DEFAULT '{}' NOT NULL,
	"state" text NOT NULL,
	"seq" bigint GENERATED ALWAYS AS IDENTITY (sequence name "job_admissions_seq_seq" INCREMENT BY 1 MINVALUE 1 MAXVALUE 9223372036854775807 START WITH 1 CACHE 1),
	"requested_at" timestamp with time zone DEFAULT now() NOT NULL,
	"heartbeat_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
CREATE INDEX "job_admissions_org_state_idx" ON "job_admissions" USING btree ("organization_id","state");