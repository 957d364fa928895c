"""The failures the command line maps to exit codes. Anything else is a bug or an environment problem (exit 1)."""


class InputError(Exception):
    """Bad input (job spec, dataset, model directory), found before any model is touched. Exit code 2.
    The message is one line that names the file, the record or field, and what was expected."""


class Preempted(Exception):
    """SIGTERM arrived; the current step finished and an emergency checkpoint was written. Exit code 143."""


class TrainingDiverged(Exception):
    """The loss or the gradient norm became NaN or infinite; continuing would only waste compute. Exit code 4."""


class OutOfMemory(Exception):
    """The device ran out of memory; a smaller micro-batch may fit. Exit code 3."""
