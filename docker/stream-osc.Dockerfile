FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml ./
COPY migration migration
COPY connectors connectors
COPY streams streams
COPY applier applier
COPY cutover cutover
COPY monitor monitor
COPY stack stack
RUN pip install --no-cache-dir .
ENTRYPOINT ["stream-osc"]
