# One image for every role (migrate, worker, studio); the command picks the role.
# Built and run by tests/compose/check_compose.py (`make compose-check`): docs/DEPLOYMENT.md says
# what was run, on which images, and what was seen.
FROM python:3.11-slim
# Extras of pyproject.toml to install, and extra pip packages for a GPU worker image
# (docker-compose.yml's worker-gpu sets EXTRA_PIP=tensorrt-cu12).
ARG EXTRAS=postgres,s3,auth
ARG EXTRA_PIP=""
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 \
    STREAMLIT_BROWSER_GATHER_USAGE_STATS=false NNCF_CI=1 \
    OPTISTUDIO_DATA_DIR=/data
WORKDIR /app
COPY pyproject.toml setup.py ./
# The dependencies pyproject.toml lists, in a layer of their own: a change to the code does not
# reinstall them (that took 1-2 minutes on every build).
RUN python -c "import sys, tomllib; p = tomllib.load(open('pyproject.toml', 'rb'))['project']; print('\n'.join(p['dependencies'] + [d for e in sys.argv[1].split(',') for d in p['optional-dependencies'][e]]))" "$EXTRAS" >/tmp/requirements.txt \
    && pip install --no-cache-dir -r /tmp/requirements.txt && rm /tmp/requirements.txt \
    && if [ -n "$EXTRA_PIP" ]; then pip install --no-cache-dir $EXTRA_PIP; fi
COPY README.md alembic.ini ./
COPY core core
COPY db db
COPY migrations migrations
COPY workers workers
COPY studio studio
COPY optistudio optistudio
RUN pip install --no-cache-dir --no-deps -e ".[$EXTRAS]"
RUN useradd --create-home optistudio && mkdir -p /data && chown optistudio /data
USER optistudio
# OpenVINO's telemetry consent file, declined, in the home of the user every role runs as.
RUN python -m optistudio.services.telemetry
EXPOSE 8501
CMD ["optistudio", "ui"]
