# One image for every role (migrate, worker, studio); the command picks the role.
# Not built on the development machines (no Docker engine there): see docs/DEPLOYMENT.md.
FROM python:3.11-slim
# Extra pip packages for a GPU worker image (docker-compose.yml's worker-gpu sets tensorrt-cu12).
ARG EXTRA_PIP=""
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 \
    STREAMLIT_BROWSER_GATHER_USAGE_STATS=false NNCF_CI=1 \
    OPTISTUDIO_DATA_DIR=/data
WORKDIR /app
COPY pyproject.toml README.md alembic.ini ./
COPY core core
COPY db db
COPY migrations migrations
COPY workers workers
COPY studio studio
COPY optistudio optistudio
RUN pip install --no-cache-dir -e '.[postgres,s3,auth]' \
    && if [ -n "$EXTRA_PIP" ]; then pip install --no-cache-dir $EXTRA_PIP; fi
RUN useradd --create-home optistudio && mkdir -p /data && chown optistudio /data
USER optistudio
EXPOSE 8501
CMD ["optistudio", "ui"]
