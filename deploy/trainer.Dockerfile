# The program inside every training / eval / conversion pod: the Python trainer and the Candle tool.
#   docker build -f deploy/trainer.Dockerfile -t hanzoai/ml-trainer .
FROM rust:1.95-bookworm AS candle
WORKDIR /src
COPY candle/ candle/
RUN cd candle && cargo build --release

FROM python:3.11-slim-bookworm
WORKDIR /opt/hanzo-ml
COPY trainer/requirements.lock trainer/requirements.lock
RUN pip install --no-cache-dir -r trainer/requirements.lock
# the S3 client of the job runner (python -m hanzo_ml job): its own layer, pinned, nothing unpinned with it
COPY trainer/requirements-storage.lock trainer/requirements-storage.lock
RUN pip install --no-cache-dir --no-deps -r trainer/requirements-storage.lock
COPY trainer/ trainer/
COPY contracts/generated/ contracts/generated/
COPY --from=candle /src/candle/target/release/hanzo-ml-candle /usr/local/bin/hanzo-ml-candle
ENV PYTHONPATH=/opt/hanzo-ml/trainer HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1
ENTRYPOINT ["python", "-m", "hanzo_ml"]
