# The program inside every training / eval / conversion pod: the Python trainer and the Candle tool.
#   docker build -f deploy/trainer.Dockerfile -t hanzoai/ml-trainer:0.1.0 .
# scripts/images.sh builds it without any registry: BASE_IMAGE is a Debian root built with mmdebstrap, and the
# stages `wheels`, `storage-wheels`, `kernels-wheels`, `data-wheels` and `candle` are replaced (--build-context) by the lock files' cached wheels
# and the Candle binary the bootstrap built (Debian bookworm too, the same glibc), so nothing is downloaded or
# compiled twice. Without them (a plain docker build) pip reads PyPI and Candle is compiled in a Rust stage.
ARG BASE_IMAGE=debian:bookworm-slim
ARG RUST_IMAGE=rust:1.95-bookworm

FROM ${RUST_IMAGE} AS candle-build
WORKDIR /src/candle
COPY candle/ ./
RUN cargo build --release --locked

# The binary alone, at /hanzo-ml-candle.
FROM scratch AS candle
COPY --from=candle-build /src/candle/target/release/hanzo-ml-candle /hanzo-ml-candle

# Empty: pip downloads from PyPI. With --build-context wheels=DIR, DIR's wheels are installed offline.
FROM scratch AS wheels
FROM scratch AS storage-wheels
FROM scratch AS kernels-wheels
FROM scratch AS data-wheels

FROM ${BASE_IMAGE}
# Bookworm's Python is 3.11, the interpreter trainer/requirements.lock is frozen for. A base that already has these
# packages (scripts/images.sh builds one) skips apt entirely.
RUN dpkg -s python3 python3-venv ca-certificates libstdc++6 >/dev/null 2>&1 || { apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends python3 python3-venv ca-certificates libstdc++6 \
    && rm -rf /var/lib/apt/lists/*; }
WORKDIR /opt/hanzo-ml
ENV PATH=/opt/hanzo-ml/venv/bin:$PATH PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1

# The lock's layer (torch with CUDA: several GB) comes before any source, so a source change rebuilds in seconds.
COPY trainer/requirements.lock trainer/requirements.lock
RUN --mount=type=bind,from=wheels,target=/wheels \
    offline=; [ -n "$(ls /wheels)" ] && offline="--no-index --find-links /wheels"; \
    python3 -m venv /opt/hanzo-ml/venv && pip install -q $offline -r trainer/requirements.lock
# The S3 client of the job runner (python -m hanzo_ml job): its own layer, pinned, nothing unpinned with it.
COPY trainer/requirements-storage.lock trainer/requirements-storage.lock
RUN --mount=type=bind,from=storage-wheels,target=/wheels \
    offline=; [ -n "$(ls /wheels)" ] && offline="--no-index --find-links /wheels"; \
    pip install -q --no-deps $offline -r trainer/requirements-storage.lock
# Liger kernels (hardware.kernels liger on CUDA): their own layer; torch and triton come from the lock's.
COPY trainer/requirements-kernels.lock trainer/requirements-kernels.lock
RUN --mount=type=bind,from=kernels-wheels,target=/wheels \
    offline=; [ -n "$(ls /wheels)" ] && offline="--no-index --find-links /wheels"; \
    pip install -q --no-deps $offline -r trainer/requirements-kernels.lock
# Dataset preparation (prepare-dataset jobs): MinHash, language detection, PII validators, zstd.
COPY trainer/requirements-data.lock trainer/requirements-data.lock
RUN --mount=type=bind,from=data-wheels,target=/wheels \
    offline=; [ -n "$(ls /wheels)" ] && offline="--no-index --find-links /wheels"; \
    pip install -q --no-deps $offline -r trainer/requirements-data.lock

COPY --from=candle /hanzo-ml-candle /usr/local/bin/hanzo-ml-candle
COPY contracts/generated/ contracts/generated/
COPY trainer/hanzo_ml/ trainer/hanzo_ml/
RUN python3 -m compileall -q trainer/hanzo_ml
# Jobs run as uid 1000, never root, on a read-only root filesystem: the pod mounts scratch volumes at HOME (HF and
# torch caches), /tmp and /scratch (jobs/executor/kubernetes.ts). The user's line in /etc/passwd gives HOME a
# default where a runtime mounts nothing there.
RUN echo 'hanzo:x:1000:1000:hanzo-ml job:/home/hanzo:/usr/sbin/nologin' >>/etc/passwd \
    && echo 'hanzo:x:1000:' >>/etc/group && mkdir -p /home/hanzo /scratch && chown 1000:1000 /home/hanzo /scratch
USER 1000:1000
ENV PYTHONPATH=/opt/hanzo-ml/trainer HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 HOME=/home/hanzo
ENTRYPOINT ["python", "-m", "hanzo_ml"]
