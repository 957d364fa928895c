"""`python -m hanzo_ml <command> ...`"""
import os

# Nothing may download at run time: set before transformers, datasets or huggingface_hub are imported.
for _variable in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE", "HF_HUB_DISABLE_TELEMETRY"):
    os.environ[_variable] = "1"

from hanzo_ml.cli import main  # noqa: E402

raise SystemExit(main())
