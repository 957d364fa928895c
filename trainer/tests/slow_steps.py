"""`python tests/slow_steps.py train --spec ... --workdir ...`: the real CLI with every optimizer step slowed
down by $STEP_DELAY_S seconds, so that a test can signal the process in the middle of a run."""
import os
import sys
import time

import hanzo_ml.lora as lora
from hanzo_ml.cli import main

_write_progress = lora.write_progress


def write_progress_then_wait(*args, **kwargs):
    _write_progress(*args, **kwargs)
    time.sleep(float(os.environ["STEP_DELAY_S"]))


lora.write_progress = write_progress_then_wait
sys.exit(main(sys.argv[1:]))
