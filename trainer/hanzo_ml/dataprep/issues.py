"""Problems in the input, each naming the file, the record and the field to fix (contracts/data-prep.ts
PrepareIssue). Collected up to max_errors; any issue means the job writes nothing to output_dir."""
from __future__ import annotations

from hanzo_ml.errors import InputError


class IssueLog:
    def __init__(self, max_errors: int):
        self.max_errors = max_errors
        self.issues: list[dict] = []

    def add(self, file: str, record: int | None, field: str | None, message: str) -> None:
        if not self.full:
            self.issues.append({"file": file, "record": record, "field": field, "message": message})

    @property
    def full(self) -> bool:
        return len(self.issues) >= self.max_errors

    def __bool__(self) -> bool:
        return bool(self.issues)

    def error(self) -> "PrepareInputError":
        return PrepareInputError(self.issues, stopped_early=self.full)


def format_issue(issue: dict) -> str:
    where = issue["file"] if issue["record"] is None else f"{issue['file']}:{issue['record']}"
    field = "" if issue["field"] is None else f'field "{issue["field"]}": '
    return f"{where}: {field}{issue['message']}"


class PrepareInputError(InputError):
    """Bad input found while preparing: the message is the first issue; `issues` holds every one collected."""

    def __init__(self, issues: list[dict], stopped_early: bool = False):
        more = f" (and {len(issues) - 1} more issues)" if len(issues) > 1 else ""
        stop = "; stopped after the first issues" if stopped_early else ""
        super().__init__(format_issue(issues[0]) + more + stop)
        self.issues = issues


def single_issue(file: str, message: str, record: int | None = None, field: str | None = None) -> PrepareInputError:
    return PrepareInputError([{"file": file, "record": record, "field": field, "message": message}])
