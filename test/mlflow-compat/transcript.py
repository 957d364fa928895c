"""The transcript every compatibility scenario writes: what each call returned or the MLflow error it raised,
with server-chosen ids replaced by numbered placeholders so that two servers' transcripts can be compared."""

import json
import sys

from mlflow.exceptions import MlflowException


class Transcript:
    def __init__(self, scrub):
        self.entries = []
        self.ids = {}
        self.scrub = scrub  # the scenario's own: which ids it replaces where depends on what it logs

    def placeholder(self, value, kind):
        """Replaces a server-chosen id with <kind:N>, numbered in order of first appearance."""
        key = (kind, value)
        if key not in self.ids:
            self.ids[key] = f"<{kind}:{sum(1 for k in self.ids if k[0] == kind) + 1}>"
        return self.ids[key]

    def record(self, step, fn):
        """Records what a call returned, or the MLflow error it raised (code and message, ids scrubbed)."""
        try:
            self.entries.append({"step": step, "result": fn()})
        except MlflowException as e:
            self.entries.append({"step": step, "error": e.error_code, "message": self.scrub(e.message)})

    def write(self):
        # The client prints run links on stdout, so the transcript goes to the file named on the command line.
        with open(sys.argv[1], "w") if len(sys.argv) > 1 else sys.stdout as out:
            json.dump(self.entries, out, indent=1, sort_keys=True)
