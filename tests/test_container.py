"""Build the sidecar image with podman from a locally made Debian base, and run it.

No registry is reachable here, so the Dockerfile's base (debian:bookworm-slim) is made with mmdebstrap and
imported under that name; pip inside the build may need this machine's CA bundle (passed as a build secret).
"""

import os
import subprocess
import time

import pytest

from conftest import ROOT, need_binary

pytestmark = [pytest.mark.integration, pytest.mark.slow]
IMAGE = "localhost/oomwatch:test"


@pytest.fixture(scope="module")
def podman(tmp_path_factory):
    pm = need_binary("podman")
    d = tmp_path_factory.mktemp("podman")
    conf = d / "containers.conf"
    conf.write_text(
        '[engine]\nruntime = "runc"\n[containers]\ndefault_ulimits = ["nofile=1024:1024", "nproc=4096:4096"]\n'
    )
    env = dict(os.environ, CONTAINERS_CONF=str(conf))

    def run(*args, check=True, timeout=600):
        r = subprocess.run([pm, *args], env=env, capture_output=True, text=True, timeout=timeout)
        if check:
            assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
        return r

    if run("image", "exists", "debian:bookworm-slim", check=False).returncode != 0:
        mm = need_binary("mmdebstrap")
        tar = d / "rootfs.tar"
        subprocess.run(
            [mm, "--variant=minbase", "--include=ca-certificates", "bookworm", str(tar)],
            check=True,
            capture_output=True,
            timeout=600,
        )
        run("import", str(tar), "debian:bookworm-slim")
    args = ["build", "--pull=never", "--format", "docker", "-t", IMAGE]  # docker format keeps HEALTHCHECK
    ca = "/etc/ssl/certs/ca-certificates.crt"
    if os.path.exists(ca):
        args += ["--secret", f"id=pip_cert,src={ca}"]
    t0 = time.time()
    run(*args, ROOT)
    run.build_seconds = time.time() - t0
    return run


def test_image_runs_help_and_a_replay(podman):
    r = podman("run", "--rm", IMAGE, "--help")
    assert "oomwatch" in r.stdout and "diagnose" in r.stdout
    r = podman("run", "--rm", IMAGE, "replay", "example:staircase", "--json")  # a bundled trace, by name
    assert '"shape": "staircase"' in r.stdout.splitlines()[-1]
    r = podman("run", "--rm", IMAGE, "run", check=False)
    assert r.returncode == 2 and "--replay" in r.stderr  # no GPU here: one clear line


def test_image_is_non_root_and_healthy(podman):
    r = podman("run", "--rm", "--entrypoint", "id", IMAGE, "-u")
    assert r.stdout.strip() == "10001"
    name = f"oomwatch-test-{os.getpid()}"
    podman("run", "-d", "--name", name, IMAGE, "run", "--replay", "/opt/oomwatch/daemon/examples/stray.jsonl", "--loop")
    try:
        for _ in range(30):
            if podman("healthcheck", "run", name, check=False).returncode == 0:
                break
            time.sleep(1)
        assert podman("healthcheck", "run", name, check=False).returncode == 0
    finally:
        podman("rm", "-f", name, check=False)
