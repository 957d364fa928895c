"""Unpack the MLflow UI's static build (mlflow/server/js/build/) from an mlflow wheel into a directory.

    python3 deploy/unpack-mlflow-ui.py WHEEL OUT_DIR

The control-plane image serves it at /mlflow/ (api/routes/mlflow-ui.ts) without installing the mlflow package.
"""
import sys
import zipfile
from pathlib import Path

PREFIX = "mlflow/server/js/build/"


def main(wheel: str, out: str) -> int:
    with zipfile.ZipFile(wheel) as archive:
        names = [n for n in archive.namelist() if n.startswith(PREFIX) and not n.endswith("/")]
        if PREFIX + "index.html" not in names:
            print(f"{wheel}: no {PREFIX}index.html (not an mlflow wheel with the UI build)", file=sys.stderr)
            return 1
        for name in names:
            target = Path(out) / name[len(PREFIX):]
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(archive.read(name))
    print(f"unpacked {len(names)} files of the MLflow UI into {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(*sys.argv[1:3]))
