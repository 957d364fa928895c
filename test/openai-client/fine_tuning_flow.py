"""The stock openai client against hanzo-ml: only base_url and api_key differ from talking to OpenAI.

Run by test/openai-client.e2e.test.ts:
    python fine_tuning_flow.py <training.jsonl> <base model>   (env: HANZO_ML_BASE_URL, HANZO_ML_TOKEN)
Prints one JSON object with what each call answered, for the test to check.
"""
import json
import os
import sys
import time

from openai import OpenAI

client = OpenAI(base_url=os.environ["HANZO_ML_BASE_URL"], api_key=os.environ["HANZO_ML_TOKEN"])
training_path, model = sys.argv[1], sys.argv[2]
out = {}

with open(training_path, "rb") as f:
    uploaded = client.files.create(file=f, purpose="fine-tune")
out["file"] = uploaded.model_dump()
out["files_listed"] = [f.id for f in client.files.list()]

job = client.fine_tuning.jobs.create(
    model=model,
    training_file=uploaded.id,
    method={"type": "supervised", "supervised": {"hyperparameters": {"n_epochs": 1, "batch_size": 2}}},
    suffix="from-openai-client",
    seed=3,
    metadata={"client": "openai-python"},
)
out["created"] = job.model_dump()
out["listed"] = [j.id for j in client.fine_tuning.jobs.list(limit=10)]

# Follow the events until some appear: each page starts after the last event seen (ours are ascending).
events, after, deadline = [], None, time.time() + 60
while not events and time.time() < deadline:
    page = client.fine_tuning.jobs.list_events(job.id, limit=50, **({"after": after} if after else {}))
    events += page.data
    if page.data:
        after = page.data[-1].id
    else:
        time.sleep(0.5)
out["events"] = [e.model_dump() for e in events]

out["retrieved"] = client.fine_tuning.jobs.retrieve(job.id).model_dump()
out["checkpoints"] = [c.model_dump() for c in client.fine_tuning.jobs.checkpoints.list(job.id)]
out["cancel_answer"] = client.fine_tuning.jobs.cancel(job.id).model_dump()

deadline = time.time() + 180
status = out["cancel_answer"]["status"]
while status != "cancelled" and time.time() < deadline:
    time.sleep(1)
    status = client.fine_tuning.jobs.retrieve(job.id).status
out["final_status"] = status
out["events_after_cancel"] = [e.model_dump() for e in client.fine_tuning.jobs.list_events(job.id, limit=100, after=after)]
print(json.dumps(out))
