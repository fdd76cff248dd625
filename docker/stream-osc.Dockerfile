# stream-osc itself; the build context is filtered by .dockerignore (no virtualenv, run or cache folders).
FROM python:3.11-slim
WORKDIR /app
COPY . .
RUN pip install --no-cache-dir .
ENTRYPOINT ["stream-osc"]
