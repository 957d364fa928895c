CREATE TABLE "model_aliases" (
	"model_id" text NOT NULL,
	"alias" text NOT NULL,
	"version" integer NOT NULL,
	CONSTRAINT "model_aliases_model_id_alias_pk" PRIMARY KEY("model_id","alias")
);
--> statement-breakpoint
ALTER TABLE "model_versions" ALTER COLUMN "architecture" DROP NOT NULL;--> statement-breakpoint
ALTER TABLE "model_versions" ALTER COLUMN "base_model" DROP NOT NULL;--> statement-breakpoint
ALTER TABLE "model_versions" ALTER COLUMN "method" DROP NOT NULL;--> statement-breakpoint
ALTER TABLE "model_versions" ALTER COLUMN "artifacts" SET DEFAULT '{}'::jsonb;--> statement-breakpoint
ALTER TABLE "model_versions" ALTER COLUMN "metrics" SET DEFAULT '{}'::jsonb;--> statement-breakpoint
ALTER TABLE "model_versions" ALTER COLUMN "training_config" SET DEFAULT '{}'::jsonb;--> statement-breakpoint
ALTER TABLE "model_versions" ALTER COLUMN "lineage" SET DEFAULT '{}'::jsonb;--> statement-breakpoint
ALTER TABLE "model_versions" ADD COLUMN "source" text;--> statement-breakpoint
ALTER TABLE "model_versions" ADD COLUMN "description" text DEFAULT '' NOT NULL;--> statement-breakpoint
ALTER TABLE "model_versions" ADD COLUMN "run_link" text;--> statement-breakpoint
ALTER TABLE "model_versions" ADD COLUMN "last_updated_at" timestamp with time zone DEFAULT now() NOT NULL;--> statement-breakpoint
ALTER TABLE "registered_models" ADD COLUMN "tags" jsonb DEFAULT '{}'::jsonb NOT NULL;--> statement-breakpoint
ALTER TABLE "registered_models" ADD COLUMN "last_version" integer DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE "registered_models" ADD COLUMN "last_updated_at" timestamp with time zone DEFAULT now() NOT NULL;--> statement-breakpoint
ALTER TABLE "model_aliases" ADD CONSTRAINT "model_aliases_model_id_registered_models_id_fk" FOREIGN KEY ("model_id") REFERENCES "public"."registered_models"("id") ON DELETE cascade ON UPDATE no action;