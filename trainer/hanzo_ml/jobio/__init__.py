"""The job runner: runs one job with the object store as its only channel to the worker (no shared disk).

    python -m hanzo_ml job --envelope URI [--scratch DIR]

The worker writes `{job_uri}/envelope.json` (contracts/job-io.ts) and starts the runner in a pod or as a local
process. The runner materialises the inputs into local scratch, runs the trainer or the Candle tool as a child,
mirrors checkpoints, progress and the log into the store while it runs, and uploads the outputs and the result
(last) when it ends. Modules:

    store.py        file:// and s3:// objects (boto3 is imported only for s3://)
    envelope.py     reading and validating the envelope
    scratch.py      the local layout: inputs downloaded, outputs pointed at scratch, result paths rewritten
    checkpoints.py  resume from the newest complete checkpoint in the store; mirror new ones while training
    launch.py       the child's command line (trainer, torchrun on one or many nodes, Candle)
    child.py        the child in its own process group: output teed to stdout and job.log, signals forwarded
    mirror.py       background copies of job.log and progress.json
    runner.py       the order of it all, and the exit code
"""
