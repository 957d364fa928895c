"""A small object-store client: `file://` (a directory tree) and `s3://bucket/key` (any S3-protocol server).

Every operation takes a URI and the scheme picks the backend, so a job can read its inputs from one store and
write to another. Objects are whole or absent: a file:// write goes to a temp name, is fsynced and renamed; an
S3 PUT is atomic by itself. Downloads also land under a temp name first, so a killed download never leaves a
file that looks complete. Files are streamed both ways; nothing reads a whole file into memory except
read_text, which is for small JSON documents.

S3 settings come from the environment (the same names the control plane uses): HANZO_ML_STORAGE_ENDPOINT,
HANZO_ML_STORAGE_REGION (default us-east-1), HANZO_ML_STORAGE_ENCRYPTION (sse-s3 or sse-kms, with
HANZO_ML_STORAGE_KMS_KEY_ID: every object written asks the server to encrypt it), and the standard
AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, with AWS_SESSION_TOKEN when they are temporary (a pod's per-job
credentials of its organization's role).
boto3 is imported on the first s3:// call only, so file:// jobs run without it.
"""
from __future__ import annotations

import os
import secrets
import shutil
import threading
from pathlib import Path
from typing import Mapping
from urllib.parse import unquote, urlparse

from hanzo_ml.files import fsync_dir, sha256_file

# Infix of temp names (`.{name}.partial-{pid}-{random}`): a listing skips them, so a reader never sees half an
# object, and a process that dies mid-write leaves only a name nobody reads.
PARTIAL = ".partial-"
S3_MISSING = {"404", "NoSuchKey", "NoSuchBucket", "NotFound"}


def join(uri: str, *parts: str) -> str:
    """`join("s3://b/jobs", "j1", "result.json")` -> "s3://b/jobs/j1/result.json"."""
    return "/".join([uri.rstrip("/"), *(p.strip("/") for p in parts if p)])


def temp_name(path: Path) -> Path:
    return path.with_name(f".{path.name}{PARTIAL}{os.getpid()}-{secrets.token_hex(4)}")


def is_temp_name(name: str) -> bool:
    return name.startswith(".") and PARTIAL in name


class ObjectStore:
    """Objects by URI. Thread-safe: the background mirrors and the main thread share one instance."""

    def __init__(self, env: Mapping[str, str] | None = None):
        self.env = dict(os.environ if env is None else env)
        self._file = FileBackend()
        self._s3: S3Backend | None = None
        self._lock = threading.Lock()

    def _backend(self, uri: str):
        scheme = urlparse(uri).scheme
        if scheme == "file":
            return self._file
        if scheme == "s3":
            with self._lock:
                if self._s3 is None:
                    self._s3 = S3Backend(self.env)
                return self._s3
        raise ValueError(f"{uri}: expected a file:// or s3:// URI")

    def put_file(self, uri: str, local: Path) -> None:
        """Upload a local file (S3: with metadata sha256 = the file's SHA-256)."""
        self._backend(uri).put_file(uri, Path(local))

    def get_file(self, uri: str, local: Path) -> None:
        """Download an object to a local file (temp name, then rename). Raises FileNotFoundError if absent."""
        local = Path(local)
        local.parent.mkdir(parents=True, exist_ok=True)
        tmp = temp_name(local)
        try:
            self._backend(uri).get_file(uri, tmp)
            os.replace(tmp, local)
        finally:
            tmp.unlink(missing_ok=True)

    def read_text(self, uri: str) -> str | None:
        """A small object's text, or None when there is no such object."""
        return self._backend(uri).read_text(uri)

    def write_text(self, uri: str, text: str) -> None:
        self._backend(uri).write_text(uri, text)

    def list(self, uri: str) -> dict[str, int]:
        """Every object under the prefix `uri/`, recursively: {path relative to the prefix: size in bytes}."""
        return self._backend(uri).list(uri)

    def delete(self, uri: str) -> None:
        """Remove one object; an absent one is not an error."""
        self._backend(uri).delete(uri)

    def delete_prefix(self, uri: str) -> None:
        """Remove the object at `uri` and every object under `uri/`."""
        self._backend(uri).delete_prefix(uri)

    def exists(self, uri: str) -> bool:
        return self._backend(uri).exists(uri)


class FileBackend:
    """file:///absolute/path: plain files. Percent-escapes are decoded (the control plane writes some URIs with
    Node's pathToFileURL, which escapes, and some by concatenation, which does not)."""

    @staticmethod
    def path(uri: str) -> Path:
        parsed = urlparse(uri)
        if parsed.netloc not in ("", "localhost") or not parsed.path.startswith("/"):
            raise ValueError(f"{uri}: expected file:///absolute/path")
        return Path(unquote(parsed.path))

    def put_file(self, uri: str, local: Path) -> None:
        with open(local, "rb") as source:
            self._write_atomically(self.path(uri), lambda target: shutil.copyfileobj(source, target, 1 << 20))

    @staticmethod
    def _write_atomically(dest: Path, fill) -> None:
        """A temporary name, fsync, rename, fsync of the directory: a reader sees the whole object or none."""
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = temp_name(dest)
        try:
            with open(tmp, "wb") as target:
                fill(target)
                target.flush()
                os.fsync(target.fileno())
            os.replace(tmp, dest)
        finally:
            tmp.unlink(missing_ok=True)
        fsync_dir(dest.parent)

    def get_file(self, uri: str, local: Path) -> None:
        with open(self.path(uri), "rb") as source, open(local, "wb") as target:
            shutil.copyfileobj(source, target, 1 << 20)

    def read_text(self, uri: str) -> str | None:
        try:
            return self.path(uri).read_text(encoding="utf-8")
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            return None

    def write_text(self, uri: str, text: str) -> None:
        data = text.encode("utf-8")
        self._write_atomically(self.path(uri), lambda target: target.write(data))

    def list(self, uri: str) -> dict[str, int]:
        root = self.path(uri)
        if not root.is_dir():
            return {}
        found = {}
        for directory, _, names in os.walk(root):
            for name in names:
                if is_temp_name(name):
                    continue
                path = Path(directory) / name
                try:
                    found[path.relative_to(root).as_posix()] = path.stat().st_size
                except FileNotFoundError:  # deleted while we walked
                    continue
        return found

    def delete(self, uri: str) -> None:
        try:
            self.path(uri).unlink()
        except (FileNotFoundError, NotADirectoryError):
            pass

    def delete_prefix(self, uri: str) -> None:
        path = self.path(uri)
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            self.delete(uri)

    def exists(self, uri: str) -> bool:
        return self.path(uri).is_file()


def encryption_args(env: Mapping[str, str]) -> dict[str, str]:
    """The upload arguments that make the server encrypt what this job writes (as the control plane's writes)."""
    mode = env.get("HANZO_ML_STORAGE_ENCRYPTION") or "none"
    if mode == "sse-s3":
        return {"ServerSideEncryption": "AES256"}
    if mode == "sse-kms":
        key = env.get("HANZO_ML_STORAGE_KMS_KEY_ID")
        if not key:
            raise ValueError("HANZO_ML_STORAGE_ENCRYPTION=sse-kms needs HANZO_ML_STORAGE_KMS_KEY_ID")
        return {"ServerSideEncryption": "aws:kms", "SSEKMSKeyId": key}
    if mode != "none":
        raise ValueError(f"HANZO_ML_STORAGE_ENCRYPTION={mode!r}: expected sse-s3, sse-kms or none")
    return {}


class S3Backend:
    """s3://bucket/key through boto3, path-style (MinIO, moto and most self-hosted servers need it). A bucket
    is created on the first write to it, as the control plane's store does."""

    def __init__(self, env: Mapping[str, str]):
        try:
            import boto3
            from botocore.config import Config
        except ImportError as e:
            raise RuntimeError("s3:// objects need boto3: install trainer/requirements-storage.lock") from e
        from boto3.s3.transfer import TransferConfig

        session = boto3.session.Session(aws_access_key_id=env.get("AWS_ACCESS_KEY_ID") or None,
                                        aws_secret_access_key=env.get("AWS_SECRET_ACCESS_KEY") or None,
                                        aws_session_token=env.get("AWS_SESSION_TOKEN") or None)
        self.client = session.client(
            "s3", endpoint_url=env.get("HANZO_ML_STORAGE_ENDPOINT") or None,
            region_name=env.get("HANZO_ML_STORAGE_REGION") or "us-east-1",
            config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 5, "mode": "standard"}))
        # multipart above 64 MiB: a checkpoint's optimizer state streams in parts, a few at a time
        self.transfer = TransferConfig(multipart_threshold=64 << 20, multipart_chunksize=64 << 20, max_concurrency=4)
        self.ensured: set[str] = set()
        self.lock = threading.Lock()
        self.sse = encryption_args(env)

    @staticmethod
    def location(uri: str) -> tuple[str, str]:
        parsed = urlparse(uri)
        if not parsed.netloc:
            raise ValueError(f"{uri}: expected s3://bucket/key")
        return parsed.netloc, parsed.path.lstrip("/")

    @staticmethod
    def missing(error: Exception) -> bool:
        response = getattr(error, "response", None) or {}
        return str(response.get("Error", {}).get("Code")) in S3_MISSING

    def ensure_bucket(self, bucket: str) -> None:
        with self.lock:
            if bucket in self.ensured:
                return
        from botocore.exceptions import ClientError

        try:
            self.client.head_bucket(Bucket=bucket)
        except ClientError as e:
            # A job's credentials are scoped to its organization's prefixes: HEAD of the bucket may be refused
            # though the bucket exists (the operator created it). Its writes then answer for themselves.
            if str(e.response.get("Error", {}).get("Code")) in ("403", "AccessDenied", "Forbidden"):
                with self.lock:
                    self.ensured.add(bucket)
                return
            try:
                self.client.create_bucket(Bucket=bucket)
            except ClientError as e:
                if e.response.get("Error", {}).get("Code") not in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
                    raise
        with self.lock:
            self.ensured.add(bucket)

    def put_file(self, uri: str, local: Path) -> None:
        bucket, key = self.location(uri)
        self.ensure_bucket(bucket)
        digest = sha256_file(local)  # one streamed read; the upload is the second
        self.client.upload_file(str(local), bucket, key, ExtraArgs={"Metadata": {"sha256": digest}, **self.sse},
                                Config=self.transfer)

    def get_file(self, uri: str, local: Path) -> None:
        from botocore.exceptions import ClientError

        bucket, key = self.location(uri)
        try:
            self.client.download_file(bucket, key, str(local), Config=self.transfer)
        except ClientError as e:
            if self.missing(e):
                raise FileNotFoundError(uri) from e
            raise

    def read_text(self, uri: str) -> str | None:
        from botocore.exceptions import ClientError

        bucket, key = self.location(uri)
        try:
            response = self.client.get_object(Bucket=bucket, Key=key)
        except ClientError as e:
            if self.missing(e):
                return None
            raise
        with response["Body"] as body:
            return body.read().decode("utf-8")

    def write_text(self, uri: str, text: str) -> None:
        import hashlib

        bucket, key = self.location(uri)
        self.ensure_bucket(bucket)
        data = text.encode("utf-8")
        self.client.put_object(Bucket=bucket, Key=key, Body=data, ContentType="application/json",
                               Metadata={"sha256": hashlib.sha256(data).hexdigest()}, **self.sse)

    def list(self, uri: str) -> dict[str, int]:
        from botocore.exceptions import ClientError

        bucket, key = self.location(uri)
        prefix = key.rstrip("/") + "/" if key else ""
        found = {}
        try:
            for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
                for entry in page.get("Contents", []):
                    found[entry["Key"][len(prefix):]] = entry["Size"]
        except ClientError as e:
            if self.missing(e):
                return {}
            raise
        return found

    def delete(self, uri: str) -> None:
        from botocore.exceptions import ClientError

        bucket, key = self.location(uri)
        try:
            self.client.delete_object(Bucket=bucket, Key=key)
        except ClientError as e:
            if not self.missing(e):
                raise

    def delete_prefix(self, uri: str) -> None:
        bucket, key = self.location(uri)
        self.delete(uri)
        prefix = key.rstrip("/") + "/" if key else ""
        keys = [prefix + path for path in self.list(uri)]
        for start in range(0, len(keys), 1000):  # DeleteObjects takes at most 1000 keys
            batch = [{"Key": k} for k in keys[start:start + 1000]]
            self.client.delete_objects(Bucket=bucket, Delete={"Objects": batch, "Quiet": True})

    def exists(self, uri: str) -> bool:
        from botocore.exceptions import ClientError

        bucket, key = self.location(uri)
        try:
            self.client.head_object(Bucket=bucket, Key=key)
            return True
        except ClientError as e:
            if self.missing(e):
                return False
            raise
