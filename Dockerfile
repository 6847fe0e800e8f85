# oomwatch sidecar. NVML comes from the host driver through the NVIDIA container toolkit
# (`--gpus all` or the device plugin); the image carries no CUDA and never creates a CUDA context.
FROM debian:bookworm-slim

ARG DEBIAN_FRONTEND=noninteractive
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3=3.11.2-1+b1 python3-venv=3.11.2-1+b1 \
 && rm -rf /var/lib/apt/lists/*

WORKDIR /opt/oomwatch
COPY deploy/requirements.lock ./requirements.lock
# Behind a TLS-intercepting proxy, pass its CA as a build secret: --secret id=pip_cert,src=/path/ca.pem
RUN --mount=type=secret,id=pip_cert,required=false \
    if [ -s /run/secrets/pip_cert ]; then export PIP_CERT=/run/secrets/pip_cert; fi \
 && python3 -m venv /opt/venv \
 && /opt/venv/bin/pip install --no-cache-dir --no-deps -r requirements.lock
COPY pyproject.toml README.md ./
COPY daemon ./daemon
COPY exporters ./exporters
RUN /opt/venv/bin/pip install --no-cache-dir --no-deps --no-build-isolation . \
 && useradd --system --uid 10001 --no-create-home --shell /usr/sbin/nologin oomwatch

USER 10001
ENV PATH=/opt/venv/bin:$PATH \
    OOMWATCH_LISTEN=0.0.0.0:9846 \
    NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=utility
EXPOSE 9846
HEALTHCHECK --interval=30s --timeout=3s --start-period=10s \
  CMD ["python3", "-c", "import os, ssl, urllib.request; p = os.environ.get('OOMWATCH_LISTEN', ':9846').rsplit(':', 1)[1]; w = os.environ.get('OOMWATCH_WEB_CONFIG_FILE'); s = 'https' if w and 'tls_server_config' in open(w).read() else 'http'; urllib.request.urlopen(s + '://127.0.0.1:' + p + '/healthz', timeout=2, context=ssl._create_unverified_context())"]
ENTRYPOINT ["oomwatch"]
CMD ["run"]
