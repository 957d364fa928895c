"""The command line: one function per command, logs on stderr, stdout left quiet, an exit code per outcome.

    python -m hanzo_ml train --spec JOB.json --workdir DIR
    python -m hanzo_ml eval --spec JOB.json
    python -m hanzo_ml merge --spec JOB.json
    python -m hanzo_ml count-tokens --spec JOB.json
    python -m hanzo_ml build-base --out DIR [--seed 0] [--threads 2]
    python -m hanzo_ml make-demo-data [--out DIR]

Exit codes: 0 done; 2 bad input (spec, dataset, model directory; one line on stderr naming file and field);
143 stopped by SIGTERM after writing an emergency checkpoint; 1 anything else.
"""
from __future__ import annotations

import argparse
import logging
import os
import sys
import warnings
from pathlib import Path

from hanzo_ml.errors import InputError, Preempted

EXIT_INPUT_ERROR = 2
EXIT_PREEMPTED = 143  # 128 + SIGTERM, what a shell reports for a process the signal ended

log = logging.getLogger("hanzo_ml")


def main(argv: list[str] | None = None) -> int:
    for variable in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"):
        os.environ[variable] = "1"
    args = parser().parse_args(argv)
    configure_logging()
    try:
        args.run(args)
        return 0
    except InputError as e:
        print(str(e).replace("\n", " "), file=sys.stderr)
        return EXIT_INPUT_ERROR
    except Preempted as e:
        log.warning("%s", e)
        return EXIT_PREEMPTED
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

    train = command("train", run_train, "LoRA fine-tuning with checkpoints and resume")
    train.add_argument("--workdir", type=Path, required=True, help="where progress.json and result.json go")
    command("eval", run_eval, "loss, perplexity and exact match of the base and the tuned model")
    command("merge", run_merge, "merge an adapter into its base; reference perplexity for the Candle tool")
    command("count-tokens", run_count_tokens, "records and tokens per split (tokenizer only, no torch)")
    base = command("build-base", run_build_base, "build the bundled base model (tokenizer + pre-training)",
                   spec=False)
    base.add_argument("--out", type=Path, required=True, help="model directory to create (replaced atomically)")
    base.add_argument("--seed", type=int, default=0)
    base.add_argument("--threads", type=int, default=2)
    demo = command("make-demo-data", run_make_demo_data, "regenerate the bundled files under examples/",
                   spec=False)
    demo.add_argument("--out", type=Path, default=Path(__file__).resolve().parents[2] / "examples",
                      help="examples directory (default: the repository's)")
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

    train(spec, args.spec, args.workdir.resolve())


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


def run_build_base(args) -> None:
    quiet_transformers()
    from hanzo_ml.base_model import BaseModelRecipe, build_base

    build_base(args.out, seed=args.seed, recipe=BaseModelRecipe(threads=args.threads))


def run_make_demo_data(args) -> None:
    from hanzo_ml.demo_data import write_demo_files

    for path in write_demo_files(args.out):
        log.info("wrote %s", path)
