"""The command line: one function per command, logs on stderr, stdout left quiet, an exit code per outcome.

    python -m hanzo_ml train --spec JOB.json --workdir DIR
    python -m hanzo_ml eval --spec JOB.json
    python -m hanzo_ml merge --spec JOB.json
    python -m hanzo_ml count-tokens --spec JOB.json
    python -m hanzo_ml prepare-dataset --spec JOB.json
    python -m hanzo_ml estimate-tokens --spec TRAIN_JOB.json --output ESTIMATE.json
    python -m hanzo_ml job --envelope URI [--scratch DIR]   (any of the above, its files in the object store)
    python -m hanzo_ml build-base --out DIR [--seed 0] [--threads 2]
    python -m hanzo_ml make-demo-data [--out DIR]
    python -m hanzo_ml recipe TEMPLATE.yaml --base-model DIR --train FILE [--validation FILE] --workdir DIR [--out F]
    python -m hanzo_ml recipe TEMPLATE.yaml --update-estimate
    python -m hanzo_ml hpo-suggest [--serve]        (request JSON on stdin, response JSON on stdout)

Exit codes: 0 done; 2 bad input (spec, dataset, model directory; one line on stderr naming file and field);
3 out of memory; 4 training diverged (both also write failure.json in the workdir, see recovery.py);
143 stopped by SIGTERM after writing an emergency checkpoint; 1 anything else.
"""
from __future__ import annotations

import argparse
import logging
import os
import sys
import warnings
from pathlib import Path

from hanzo_ml.errors import InputError, OutOfMemory, Preempted, TrainingDiverged

EXIT_INPUT_ERROR = 2
EXIT_OUT_OF_MEMORY = 3
EXIT_DIVERGED = 4
EXIT_PREEMPTED = 143  # 128 + SIGTERM, what a shell reports for a process the signal ended

log = logging.getLogger("hanzo_ml")


def main(argv: list[str] | None = None) -> int:
    for variable in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"):
        os.environ[variable] = "1"
    args = parser().parse_args(argv)
    configure_logging()
    try:
        return args.run(args) or 0  # a command that runs a child (job) returns the child's exit code
    except InputError as e:
        print(str(e).replace("\n", " "), file=sys.stderr)
        return EXIT_INPUT_ERROR
    except Preempted as e:
        log.warning("%s", e)
        return EXIT_PREEMPTED
    except OutOfMemory as e:
        log.error("out of memory: %s", e)
        return EXIT_OUT_OF_MEMORY
    except TrainingDiverged as e:
        log.error("training diverged: %s", e)
        return EXIT_DIVERGED
    except Exception as e:  # noqa: BLE001 - the last line says what failed; the traceback is above it
        log.exception("%s failed", args.command)
        print(f"error: {args.command}: {type(e).__name__}: {e}".replace("\n", " "), file=sys.stderr)
        return 1


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(prog="python -m hanzo_ml", description="hanzo-ml trainer")
    commands = root.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, run, help_text: str, spec: bool = True) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=help_text, description=help_text)
        if spec:
            sub.add_argument("--spec", type=Path, required=True, help="job spec JSON (see contracts/trainer-job.ts)")
        sub.set_defaults(run=run)
        return sub

    train = command("train", run_train,
                    "fine-tuning (full, lora, qlora, adalora, dpo, orpo) with checkpoints and resume")
    train.add_argument("--workdir", type=Path, required=True, help="where progress.json and result.json go")
    command("eval", run_eval, "loss, perplexity and exact match of the base and the tuned model")
    command("merge", run_merge, "merge an adapter into its base; reference perplexity for the Candle tool")
    command("count-tokens", run_count_tokens, "records and tokens per split (tokenizer only, no torch)")
    command("prepare-dataset", run_prepare_dataset,
            "raw files -> a normalized, cleaned, split (optionally tokenized) dataset version")
    estimate = command("estimate-tokens", run_estimate_tokens,
                       "the tokens and steps a train spec will train on, counted as training counts them")
    estimate.add_argument("--output", type=Path, required=True, help="where the estimate JSON goes")
    job = command("job", run_job, "run one job from its envelope, every file through the object store", spec=False)
    job.add_argument("--envelope", required=True, help="file:// or s3:// URI of the JobEnvelope (contracts/job-io.ts)")
    job.add_argument("--scratch", type=Path, default=None,
                     help="local working directory (default: $HANZO_ML_SCRATCH, else a temp dir removed at the end)")
    base = command("build-base", run_build_base, "build the bundled base model (tokenizer + pre-training)",
                   spec=False)
    base.add_argument("--out", type=Path, required=True, help="model directory to create (replaced atomically)")
    base.add_argument("--seed", type=int, default=0)
    base.add_argument("--threads", type=int, default=2)
    demo = command("make-demo-data", run_make_demo_data, "regenerate the bundled files under examples/",
                   spec=False)
    demo.add_argument("--out", type=Path, default=Path(__file__).resolve().parents[2] / "examples",
                      help="examples directory (default: the repository's)")
    recipe = command("recipe", run_recipe, "render a recipe template (recipes/*.yaml) into a validated train job spec",
                     spec=False)
    recipe.add_argument("template", type=Path, help="recipe template YAML")
    recipe.add_argument("--base-model", help="base model directory (absolute)")
    recipe.add_argument("--train", help="train JSONL (absolute)")
    recipe.add_argument("--validation", default=None, help="validation JSONL (absolute)")
    recipe.add_argument("--workdir", help="run directory: output/ and checkpoints/ go under it (absolute)")
    recipe.add_argument("--run-id", default=None, help="default: derived from the template name and workdir")
    recipe.add_argument("--out", type=Path, default=None, help="write the job spec here (default: stdout)")
    recipe.add_argument("--update-estimate", action="store_true",
                        help="rewrite the template's estimate block with the memory estimator's numbers")
    suggest = command("hpo-suggest", run_hpo_suggest, "next sweep trial(s) from space, strategy, seed and history",
                      spec=False)
    suggest.add_argument("--serve", action="store_true", help="answer one JSON request per stdin line")
    return root


def configure_logging() -> None:
    level = os.environ.get("HANZO_ML_LOG_LEVEL", "INFO").upper()
    logging.basicConfig(stream=sys.stderr, level=level,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # Library chatter (progress bars, deprecation notices, optional-kernel probes) is not the job's log.
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    warnings.filterwarnings("ignore", category=FutureWarning)
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    for name in ("transformers", "peft", "bitsandbytes", "huggingface_hub", "torch"):
        logging.getLogger(name).setLevel(logging.ERROR)


def quiet_transformers() -> None:
    from transformers.utils import logging as transformers_logging

    transformers_logging.set_verbosity_error()
    transformers_logging.disable_progress_bar()


# ---- one function per command ------------------------------------------------------------------

def run_train(args) -> None:
    from hanzo_ml.spec import load_spec

    spec = load_spec(args.spec, "train")
    quiet_transformers()
    from hanzo_ml.lora import train
    from hanzo_ml.recovery import recorded_failure

    workdir = args.workdir.resolve()
    with recorded_failure(workdir):
        train(spec, args.spec, workdir)


def run_eval(args) -> None:
    from hanzo_ml.spec import load_spec

    spec = load_spec(args.spec, "eval")
    quiet_transformers()
    from hanzo_ml.evaluate import evaluate

    evaluate(spec, args.spec)


def run_merge(args) -> None:
    from hanzo_ml.spec import load_spec

    spec = load_spec(args.spec, "merge")
    quiet_transformers()
    from hanzo_ml.merge import merge

    merge(spec, args.spec)


def run_count_tokens(args) -> None:
    from hanzo_ml.spec import load_spec

    spec = load_spec(args.spec, "count-tokens")
    quiet_transformers()
    from hanzo_ml.count_tokens import count_tokens

    count_tokens(spec, args.spec)


def run_prepare_dataset(args) -> None:
    from hanzo_ml.spec import load_spec

    spec = load_spec(args.spec, "prepare-dataset")
    quiet_transformers()
    from hanzo_ml.dataprep.run import prepare_dataset

    prepare_dataset(spec, args.spec)


def run_estimate_tokens(args) -> None:
    from hanzo_ml.spec import load_spec

    spec = load_spec(args.spec, "train")
    quiet_transformers()
    from hanzo_ml.estimate import estimate_tokens

    estimate_tokens(spec, args.spec, args.output)


def run_job(args) -> int:
    from hanzo_ml.jobio.runner import run

    return run(args.envelope, args.scratch)


def run_build_base(args) -> None:
    quiet_transformers()
    from hanzo_ml.base_model import BaseModelRecipe, build_base

    build_base(args.out, seed=args.seed, recipe=BaseModelRecipe(threads=args.threads))


def run_make_demo_data(args) -> None:
    from hanzo_ml.demo_data import write_demo_files

    for path in write_demo_files(args.out):
        log.info("wrote %s", path)


def run_hpo_suggest(args) -> None:
    from hanzo_ml.hpo.suggest import run

    run(args)


def run_recipe(args) -> None:
    import json

    from hanzo_ml.files import atomic_write_text, dumps_json
    from hanzo_ml.recipes.templates import read_template, render, update_estimate, validated

    if args.update_estimate:
        numbers = update_estimate(args.template)
        log.info("%s: estimate %.2f GiB per device", args.template, numbers["total_gib"])
        return
    missing = [f"--{n.replace('_', '-')}" for n in ("base_model", "train", "workdir") if not getattr(args, n)]
    if missing:
        raise InputError(f"{args.template}: rendering needs {', '.join(missing)}")
    document = render(read_template(args.template), args.base_model, args.train, args.validation, args.workdir,
                      args.run_id)
    validated(document, args.template)
    if args.out:
        atomic_write_text(args.out, dumps_json(document))
    else:
        print(json.dumps(document, indent=2))
